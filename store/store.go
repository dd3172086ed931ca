// Package store defines what FlexiQ keeps durably and how it is asked for:
// the Store interface the namespace actors, retention and the admin door
// need, and the shared types. Backends live in store/sqlite,
// store/postgres and store/redis; store/storetest is the conformance suite
// every backend runs.
//
// Methods are named Noun+Verb and take a params struct that carries Now, so
// a backend never reads the clock and a test or simulation controls time.
// Every write method is one transaction (or one atomic script): it lands
// whole or not at all.
package store

import (
	"context"
	"errors"
	"time"

	"github.com/flexiq/flexiq/api"
)

// Errors a backend returns; wrap with %w and test with errors.Is.
var (
	// ErrNotFound: no such row.
	ErrNotFound = errors.New("store: not found")
	// ErrConflict: a conditional write found the row changed.
	ErrConflict = errors.New("store: conflict")
)

// Store is the durable state of a FlexiQ cluster.
type Store interface {
	JobStore
	SettingStore
	TokenStore
	ConfigStore
	// Ping reports whether the backend is reachable.
	Ping(ctx context.Context) error
	// Close releases the backend; the Store is unusable after.
	Close() error
}

// JobStore holds jobs in every status.
type JobStore interface {
	// JobEnqueueMany writes a group of calls of one namespace in one
	// transaction, in order, and returns each call's per-job results.
	JobEnqueueMany(ctx context.Context, p JobEnqueueManyParams) ([][]api.EnqueueResult, error)
	// JobClaimMany hands out due pending jobs for each claim in order, in
	// one transaction.
	JobClaimMany(ctx context.Context, p JobClaimManyParams) ([][]Job, error)
	// JobUpdateMany applies acks, nacks, lease extensions and expiries to
	// running jobs in one transaction. applied[i] is false where update i
	// found its job no longer running with that attempt; nothing else of
	// such an update is written.
	JobUpdateMany(ctx context.Context, p JobUpdateManyParams) (applied []bool, err error)
	// JobGet returns one job or ErrNotFound.
	JobGet(ctx context.Context, namespace, id string) (Job, error)
	// JobList lists a namespace's jobs, newest (highest Seq) first.
	JobList(ctx context.Context, p JobListParams) ([]Job, error)
	// JobCount counts a namespace's jobs by status. It reads the backlog
	// and is meant for actor start-up and usage, not the enqueue path.
	JobCount(ctx context.Context, namespace string) (Counts, error)
	// JobNextRunAt returns the earliest run_at of the queues' pending jobs
	// (of every queue of the namespace when queues is empty) that were not
	// yet due when last written (delayed, or retrying after a backoff) and
	// not made available by a claim since; ok is false when there are none.
	// It may lie in the past: the job is due and the next claim takes it.
	JobNextRunAt(ctx context.Context, namespace string, queues []string) (next time.Time, ok bool, err error)
	// JobListRunning returns a namespace's running jobs (for an actor
	// rebuilding its running counts and leases).
	JobListRunning(ctx context.Context, namespace string) ([]Job, error)
	// JobRunningNamespaces returns, in no order, every namespace that has
	// running jobs: a node taking over namespaces (or starting after a
	// crash) wakes their actors so the leases of a dead node's claims run
	// out and the jobs come back, without waiting for a call.
	JobRunningNamespaces(ctx context.Context) ([]string, error)
	// JobListDeadRetryable returns dead letters of queue that died at or
	// before DeadBefore, are not shed, did not die with retry:false and
	// were replayed fewer than MaxReplays times, oldest first.
	JobListDeadRetryable(ctx context.Context, p JobListDeadRetryableParams) ([]Job, error)
	// JobDeleteFinishedBefore deletes up to Limit jobs of Status (completed
	// or dead) in any namespace but Skip's that finished before Before,
	// oldest first.
	JobDeleteFinishedBefore(ctx context.Context, p JobDeleteFinishedBeforeParams) (int64, error)
	// JobDeleteOverCeiling deletes the oldest (by finished_at) jobs of
	// Status in Namespace beyond the newest Keep, at most Limit of them.
	JobDeleteOverCeiling(ctx context.Context, p JobDeleteOverCeilingParams) (int64, error)
}

// StepTx is one write transaction over several calls, committed or rolled
// back as one: a namespace actor's step, so the step's acks, enqueues and
// claims cost one commit. Its reads see its writes. Once a call fails, the
// transaction is rolled back and every later call fails too.
type StepTx interface {
	JobEnqueueMany(ctx context.Context, p JobEnqueueManyParams) ([][]api.EnqueueResult, error)
	JobClaimMany(ctx context.Context, p JobClaimManyParams) ([][]Job, error)
	JobUpdateMany(ctx context.Context, p JobUpdateManyParams) (applied []bool, err error)
	JobGet(ctx context.Context, namespace, id string) (Job, error)
	JobCount(ctx context.Context, namespace string) (Counts, error)
	JobNextRunAt(ctx context.Context, namespace string, queues []string) (next time.Time, ok bool, err error)
	JobListRunning(ctx context.Context, namespace string) ([]Job, error)
	// Commit makes the writes durable; after a failed call it returns
	// that call's error and writes nothing.
	Commit(ctx context.Context) error
	// Rollback undoes the writes; after Commit it does nothing.
	Rollback()
}

// Job is a job row.
type Job struct {
	Namespace string
	ID        string
	// Seq is the enqueue order within the store; later enqueues get larger
	// values.
	Seq      int64
	Queue    string
	Task     string
	Payload  []byte // JSON text, nil when absent
	Priority int64
	RunAt    time.Time
	// MaxAttempts is the job's own setting; 0 = take the queue's or the
	// default.
	MaxAttempts int64
	Attempt     int64
	Status      api.Status
	UniqueKey   string
	DebounceKey string
	LeaseUntil  time.Time // zero unless running
	Worker      string
	Error       string
	Result      []byte
	DeadMeta    []byte
	CreatedAt   time.Time
	FinishedAt  time.Time // zero unless completed or dead
	// Shed marks a dead letter written by drop mode.
	Shed bool
	// NoRetry marks a dead letter that died with retry:false.
	NoRetry bool
	// DeadReplays counts admitted auto-retry replays of this job.
	DeadReplays int64
}

// NewJob is a job to insert. RunAt is already resolved (delay, debounce
// window or given time) by the caller.
type NewJob struct {
	ID          string
	Queue       string
	Task        string
	Payload     []byte
	Priority    int64
	RunAt       time.Time
	MaxAttempts int64
	UniqueKey   string
	DebounceKey string
	// Generated says the id was made by FlexiQ (time-ordered, never
	// repeated), so the backend may skip the repeated-id check.
	Generated bool
}

// Keyed reports whether the job's outcome depends on what is stored: a
// client-chosen id, a unique key or a debounce key. Only such jobs can come
// back deduplicated or coalesced.
func (j *NewJob) Keyed() bool {
	return !j.Generated || j.UniqueKey != "" || j.DebounceKey != ""
}

// EnqueueCall is one call's share: its jobs or replays, admitted or shed.
type EnqueueCall struct {
	// Jobs to insert.
	Jobs []NewJob
	// ReplayIDs are dead letters to make pending again (dead-letter
	// replay); a call has Jobs or ReplayIDs, not both.
	ReplayIDs []string
	// AutoRetry marks replays made by the auto-retry sweep; admitted ones
	// count against the job's dead_retry_max.
	AutoRetry bool
	// ShedError, when set, sheds the call: new jobs are written dead with
	// this error and {"shed":"quota"}, holding no keys; replayed dead
	// letters stay dead and are marked the same way.
	ShedError string
}

// JobEnqueueManyParams is a group of calls for one namespace.
type JobEnqueueManyParams struct {
	Namespace string
	Now       time.Time
	// Fence, when set, makes the write conditional on the namespace's
	// lease (ClusterStore): ErrFenced, nothing written, when it is stale.
	Fence *Fence
	Calls []EnqueueCall
}

// Outcomes per job, in call order:
//   - new job, admitted: enqueued; its id repeats a stored job's (any
//     status): deduplicated, nothing written; its unique key is held by a
//     pending or running job: deduplicated with that job's id; its debounce
//     key is held by a pending job: coalesced with that job's id (that job's
//     payload and run_at replaced by this one's).
//   - new job, shed: shed, written dead holding no keys (an id already
//     stored: shed, nothing written).
//   - replay admitted: enqueued (pending, attempt 0, run_at Now, error and
//     dead metadata cleared); the dead letter's unique key now held by
//     another live job: deduplicated with that job's id, the dead letter
//     untouched.
//   - replay shed: shed, the dead letter marked shed and stripped of keys.
//   - replay of an id that is not (or no longer) a dead letter: outcome ""
//     and nothing written. Callers check ids first; this only happens when
//     retention deleted the row in between.

// ClaimSpec is one worker's claim.
type ClaimSpec struct {
	Queues     []string
	Max        int
	LeaseUntil time.Time
	Worker     string
}

// JobClaimManyParams is a group of claims for one namespace.
type JobClaimManyParams struct {
	Namespace string
	Now       time.Time
	// Fence, when set, makes the write conditional on the namespace's
	// lease (ClusterStore): ErrFenced, nothing written, when it is stale.
	Fence  *Fence
	Claims []ClaimSpec
	// ExcludeTasks are tasks whose cap is already reached; the backend may
	// leave their jobs out of its scan.
	ExcludeTasks []string
	// NoPromote tells the backend that no delayed job of these queues is
	// due at Now (the caller tracks when the next one is), so it may skip
	// looking for delayed jobs to make available.
	NoPromote bool
	// Allow is asked, in dispatch order (priority desc, run_at, Seq), for
	// each due candidate and says what to do with it; it must count what it
	// takes. A job not taken is left untouched (its attempt too). Nil takes
	// everything.
	Allow func(queue, task string) ClaimVerdict
	// Head, when set on a group OneQueueUngated allows, is where the
	// queue's available jobs start: none sorts before it in dispatch
	// order (the caller, which writes every change to the namespace's
	// jobs, knows). A backend may start its scan there; PostgreSQL does,
	// since its index keeps the entries of claimed jobs until vacuum and
	// a scan from the queue's start walks them all.
	Head *JobPos
}

// JobPos is a place in a queue's dispatch order: priority descending,
// then run_at (to the microsecond, as stored), then Seq.
type JobPos struct {
	Priority int64
	RunAt    time.Time
	Seq      int64
}

// PosOf is j's place in its queue's dispatch order.
func PosOf(j *Job) JobPos {
	return JobPos{Priority: j.Priority, RunAt: j.RunAt.Truncate(time.Microsecond), Seq: j.Seq}
}

// Before reports whether p sorts before q in dispatch order.
func (p JobPos) Before(q JobPos) bool {
	switch {
	case p.Priority != q.Priority:
		return p.Priority > q.Priority
	case !p.RunAt.Equal(q.RunAt):
		return p.RunAt.Before(q.RunAt)
	}
	return p.Seq < q.Seq
}

// OneQueueUngated returns the queue of a group that a backend may hand out
// as the head of that one queue, with no scan of its own: Allow is nil and
// every claim names that queue alone. Claim after claim, each then takes
// the next jobs of the queue in dispatch order, up to its Max; any path
// must give exactly that.
func (p *JobClaimManyParams) OneQueueUngated() (string, bool) {
	if p.Allow != nil || len(p.Claims) == 0 || len(p.Claims[0].Queues) != 1 {
		return "", false
	}
	q := p.Claims[0].Queues[0]
	for _, c := range p.Claims[1:] {
		if len(c.Queues) != 1 || c.Queues[0] != q {
			return "", false
		}
	}
	return q, true
}

// ClaimVerdict is the dispatch gate's answer for one candidate job. The
// skip verdicts let a backend stop scanning jobs that cannot go out.
type ClaimVerdict int

// The claim verdicts.
const (
	// ClaimTake hands the job out.
	ClaimTake ClaimVerdict = iota
	// ClaimSkipTask leaves the job, and every further job of its task in
	// this group, pending: the task's cap is reached.
	ClaimSkipTask
	// ClaimSkipQueue leaves the job, and every further job of its queue in
	// this group, pending: the queue's cap is reached.
	ClaimSkipQueue
	// ClaimStop leaves the job pending and ends the whole group: the
	// namespace's cap is reached.
	ClaimStop
)

// UpdateKind says what an update does to a running job.
type UpdateKind int

// The update kinds.
const (
	// UpdateComplete: ack → completed, Result kept, finished_at Now.
	UpdateComplete UpdateKind = iota + 1
	// UpdateRetry: pending again at RunAt, Error kept, lease cleared; it
	// takes its debounce key back only if no other pending job took it
	// while it ran (then it keeps none).
	UpdateRetry
	// UpdateDead: dead, Error kept, finished_at Now; NoRetry marks retry:false.
	UpdateDead
	// UpdateExtend: lease extended to LeaseUntil.
	UpdateExtend
	// UpdateRelease: pending again as before its claim, for a worker that
	// took it ahead of a free slot and stops without starting it: the
	// attempt is given back (attempt − 1); run_at, error and its place in
	// claim order stay as they were; lease and worker are cleared; it
	// takes its debounce key back as a retry does.
	UpdateRelease
)

// JobUpdate changes one running job. It applies only while the job is
// running with Attempt.
type JobUpdate struct {
	ID         string
	Attempt    int64
	Kind       UpdateKind
	Result     []byte
	Error      string
	RunAt      time.Time
	LeaseUntil time.Time
	NoRetry    bool
}

// JobUpdateManyParams is a group of updates for one namespace.
type JobUpdateManyParams struct {
	Namespace string
	Now       time.Time
	// Fence, when set, makes the write conditional on the namespace's
	// lease (ClusterStore): ErrFenced, nothing written, when it is stale.
	Fence   *Fence
	Updates []JobUpdate
}

// JobListParams filters JobList. Empty fields do not filter.
type JobListParams struct {
	Namespace string
	Status    api.Status
	Queue     string
	// Shed: nil any, true only shed dead letters, false none of them.
	Shed *bool
	// BeforeSeq pages: only jobs with Seq < BeforeSeq (0 = from the newest).
	BeforeSeq int64
	Limit     int
}

// Counts are a namespace's jobs by status.
type Counts struct {
	Pending   int64
	Running   int64
	Completed int64
	Dead      int64
}

// JobListDeadRetryableParams selects dead letters for the auto-retry sweep.
type JobListDeadRetryableParams struct {
	Namespace  string
	Queue      string
	DeadBefore time.Time
	MaxReplays int64
	Limit      int
}

// JobDeleteFinishedBeforeParams is one TTL sweep batch.
type JobDeleteFinishedBeforeParams struct {
	Status api.Status // completed or dead
	Before time.Time
	Limit  int
	// Skip names namespaces whose rows stay: their quota cannot be read,
	// and a stopped namespace loses nothing to retention (docs/quotas.md).
	// Rows of other namespaces behind theirs are still deleted (on Redis,
	// behind at most MaxSkipScan of theirs in one call).
	Skip []string
}

// MaxSkipScan bounds the rows of skipped namespaces one TTL batch looks
// past on a store that cannot filter them out in its index (Redis).
const MaxSkipScan = 10000

// JobDeleteOverCeilingParams is one row-ceiling batch.
type JobDeleteOverCeilingParams struct {
	Namespace string
	Status    api.Status // completed or dead
	Keep      int64
	Limit     int
}

// SettingStore is the settings key-value store with its audit trail.
type SettingStore interface {
	// SettingGet returns the setting under key; a deleted one comes back
	// with a nil Value and its revision; a key never written is ErrNotFound.
	SettingGet(ctx context.Context, key string) (Setting, error)
	// SettingPut writes (or, with a nil Value, deletes) a setting, bumps its
	// revision and records p.Audit, all in one transaction. With
	// IfRevision set, a setting at another revision is ErrConflict.
	SettingPut(ctx context.Context, p SettingPutParams) (Setting, error)
	// SettingList lists live settings whose key starts with prefix, by key.
	SettingList(ctx context.Context, prefix string) ([]Setting, error)
	// AuditList lists a namespace's audit entries, newest first.
	AuditList(ctx context.Context, p AuditListParams) ([]AuditEntry, error)
}

// Setting is one key's value. Value nil means deleted (or never set).
type Setting struct {
	Key       string
	Value     []byte
	Revision  int64
	UpdatedAt time.Time
}

// SettingPutParams writes one setting.
type SettingPutParams struct {
	Key   string
	Value []byte // nil deletes
	Now   time.Time
	// IfRevision, when not nil, makes the write conditional on the current
	// revision (0 for a key never written).
	IfRevision *int64
	// Audit, when not nil, is recorded with the before and after values.
	Audit *AuditRecord
}

// AuditRecord is what the caller says of a write; the store adds the
// before and after values and the time.
type AuditRecord struct {
	Actor      string
	Action     string
	TargetKind string
	Target     string
	// Namespace scopes the entry for AuditList; empty for cluster-wide
	// writes (generic settings).
	Namespace string
}

// AuditEntry is one recorded write.
type AuditEntry struct {
	ID int64
	AuditRecord
	At     time.Time
	Before []byte // nil: nothing existed
	After  []byte // nil: nothing remains
}

// AuditListParams filters AuditList.
type AuditListParams struct {
	Namespace string
	Limit     int
}

// TokenStore holds API tokens, by hash only.
type TokenStore interface {
	// TokenCreate stores a token; an id or hash already stored is
	// ErrConflict.
	TokenCreate(ctx context.Context, t Token) error
	// TokenGetByHash returns a live (not revoked) token or ErrNotFound.
	TokenGetByHash(ctx context.Context, hash []byte) (Token, error)
	// TokenRevoke revokes a token; ErrNotFound if no live token has id.
	TokenRevoke(ctx context.Context, id string, now time.Time) (Token, error)
}

// Token is a stored token: its id, the hash of its secret, its namespace
// and role.
type Token struct {
	ID        string
	Hash      []byte
	Namespace string
	Role      string
	CreatedAt time.Time
}

// ConfigStore holds a namespace's named configuration items: queue and
// task settings, triggers and periodic schedules, and their state.
type ConfigStore interface {
	// ConfigGet returns one item or ErrNotFound.
	ConfigGet(ctx context.Context, namespace, kind, name string) (ConfigItem, error)
	// ConfigPut creates or replaces an item. With Create set, an existing
	// item is ErrConflict.
	ConfigPut(ctx context.Context, p ConfigPutParams) (ConfigItem, error)
	// ConfigDelete removes an item; ErrNotFound if there is none.
	ConfigDelete(ctx context.Context, namespace, kind, name string) error
	// ConfigList lists a namespace's items of kind in creation order; an
	// empty namespace lists every namespace's.
	ConfigList(ctx context.Context, namespace, kind string) ([]ConfigItem, error)
}

// ConfigItem is one configuration item.
type ConfigItem struct {
	Namespace string
	Kind      string
	Name      string
	Value     []byte
	// Seq orders items by creation; replacing an item keeps it.
	Seq int64
	// Revision counts writes to the item, from 1.
	Revision  int64
	UpdatedAt time.Time
}

// ConfigPutParams writes one configuration item.
type ConfigPutParams struct {
	Item   ConfigItem
	Now    time.Time
	Create bool
	// IfRevision, when not nil, makes the write conditional on the item's
	// current revision (0: the item must not exist); otherwise ErrConflict.
	IfRevision *int64
}

// Faults lets tests fail a write transaction part-way: a backend calls
// Fault between the steps of its write methods and, on error, rolls back and
// returns it. Production stores have none.
type Faults interface {
	Fault(op string, step int) error
}

// Configuration kinds.
const (
	KindQueue    = "queue"
	KindTask     = "task"
	KindTrigger  = "trigger"
	KindPeriodic = "periodic"
	// KindPeriodicState holds a schedule's last fire, apart from its
	// definition so a fire never rewrites what the admin wrote.
	KindPeriodicState = "periodic.state"
)
