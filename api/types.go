package api

import (
	"encoding/json"
	"time"
)

// Status is a job's lifecycle state.
type Status string

// The job statuses. A delayed job is pending with a future run_at.
const (
	StatusPending   Status = "pending"
	StatusRunning   Status = "running"
	StatusCompleted Status = "completed"
	StatusDead      Status = "dead"
)

// Outcome is what an enqueue did with one job.
type Outcome string

// The enqueue outcomes.
const (
	OutcomeEnqueued     Outcome = "enqueued"
	OutcomeDeduplicated Outcome = "deduplicated"
	OutcomeCoalesced    Outcome = "coalesced"
	OutcomeShed         Outcome = "shed"
)

// Debounce coalesces enqueues that share Key while the first is pending.
type Debounce struct {
	Key      string `json:"key"`
	WindowMS int64  `json:"window_ms"`
}

// Job is both what a producer sends and what the node shows. Read-only
// fields (status, attempt, error, dead_meta, created_at, finished_at) are
// ignored on input. Every field is always present in output, null or empty
// where it does not apply, so clients can rely on the shape.
type Job struct {
	ID          string          `json:"id"`
	Queue       string          `json:"queue"`
	Task        string          `json:"task"`
	Payload     json.RawMessage `json:"payload"`
	Priority    int64           `json:"priority"`
	RunAt       *time.Time      `json:"run_at"`
	DelayMS     int64           `json:"delay_ms,omitempty"`
	MaxAttempts *int64          `json:"max_attempts"`
	UniqueKey   string          `json:"unique_key"`
	Debounce    *Debounce       `json:"debounce"`

	Status     Status          `json:"status,omitempty"`
	Attempt    int64           `json:"attempt"`
	Error      string          `json:"error"`
	DeadMeta   json.RawMessage `json:"dead_meta"`
	CreatedAt  *time.Time      `json:"created_at"`
	FinishedAt *time.Time      `json:"finished_at"`
	// Result is what the worker acked with; absent until then.
	Result json.RawMessage `json:"result,omitempty"`
	// LeaseUntil is set on jobs handed out by a claim.
	LeaseUntil *time.Time `json:"lease_until,omitempty"`
}

// EnqueueRequest is the body of fq.v1.enqueue.
type EnqueueRequest struct {
	Jobs []Job `json:"jobs"`
}

// EnqueueResult is one job's outcome, in request order.
type EnqueueResult struct {
	ID      string  `json:"id"`
	Outcome Outcome `json:"outcome"`
}

// EnqueueReply answers fq.v1.enqueue, fq.v1.event and fq.v1.dead.replay.
type EnqueueReply struct {
	Results []EnqueueResult `json:"results"`
}

// ClaimRequest is the body of fq.v1.claim.
type ClaimRequest struct {
	Queues  []string `json:"queues"`
	Max     int      `json:"max"`
	WaitMS  int64    `json:"wait_ms"`
	LeaseMS int64    `json:"lease_ms"`
	Worker  string   `json:"worker"`
}

// ClaimReply answers fq.v1.claim.
type ClaimReply struct {
	Jobs []Job `json:"jobs"`
}

// HeartbeatRequest extends the leases of running jobs.
type HeartbeatRequest struct {
	IDs     []string `json:"ids"`
	LeaseMS int64    `json:"lease_ms"`
}

// HeartbeatReply lists the ids whose lease was extended; a missing id has
// lost its lease and its worker should stop.
type HeartbeatReply struct {
	Extended []string `json:"extended"`
}

// AckRequest completes a running job. Attempt, when set, must match the
// job's current attempt: it tells a late ack from a worker whose lease
// expired apart from the ack of the worker that holds the job now.
//
// Acks, instead of ID, completes several jobs in one request (the batched
// form of fq.v1.ack in docs/protocol.md: a worker running many jobs at once
// acks what finished together). Each entry succeeds or fails on its own;
// the reply is then an AckReply with one result per entry, in order.
type AckRequest struct {
	ID      string          `json:"id,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Attempt int64           `json:"attempt,omitempty"`
	Acks    []AckItem       `json:"acks,omitempty"`
}

// AckItem is one entry of a batched ack.
type AckItem struct {
	ID      string          `json:"id"`
	Result  json.RawMessage `json:"result,omitempty"`
	Attempt int64           `json:"attempt,omitempty"`
}

// AckReply answers an ack: {} for one id, one result per entry for Acks.
type AckReply struct {
	Results []AckResult `json:"results,omitempty"`
}

// AckResult is one entry's outcome: Error is nil when the job completed.
type AckResult struct {
	ID    string `json:"id"`
	Error *Error `json:"error,omitempty"`
}

// NackRequest fails a running job. Retry defaults to true.
type NackRequest struct {
	ID      string `json:"id"`
	Error   string `json:"error"`
	Retry   *bool  `json:"retry,omitempty"`
	Attempt int64  `json:"attempt,omitempty"`
	// Release gives back a job the worker took ahead of a free slot and
	// never started: pending again as before its claim, its attempt not
	// spent (docs/protocol.md fq.v1.nack). It takes no error and no retry.
	Release bool `json:"release,omitempty"`
}

// NackReply says where the job went.
type NackReply struct {
	Status Status     `json:"status"`
	RunAt  *time.Time `json:"run_at,omitempty"`
}

// EventRequest is the body of fq.v1.event.
type EventRequest struct {
	Name    string          `json:"name"`
	Payload json.RawMessage `json:"payload,omitempty"`
}

// ReplayRequest is the body of fq.v1.dead.replay.
type ReplayRequest struct {
	IDs []string `json:"ids"`
}

// QuotaChanged is broadcast on SubjectQuotaChanged after a quota write.
// At (Unix nanoseconds at publish) lets receivers measure propagation.
type QuotaChanged struct {
	Namespace string `json:"namespace"`
	Revision  int64  `json:"revision"`
	At        int64  `json:"at,omitempty"`
}

// ConfigChanged is broadcast on SubjectConfigChanged after a write to a
// namespace's queue or task settings, triggers or periodic schedules.
type ConfigChanged struct {
	Namespace string `json:"namespace"`
	Kind      string `json:"kind"`
}

// Empty is the body of replies that carry nothing: {}.
type Empty struct{}

// Trigger maps an event name to a job template.
type Trigger struct {
	ID    string `json:"id"`
	Event string `json:"event"`
	Queue string `json:"queue"`
	Task  string `json:"task"`
}

// Periodic is a cron schedule and the job each fire enqueues.
type Periodic struct {
	Name    string          `json:"name"`
	Cron    string          `json:"cron"`
	Queue   string          `json:"queue"`
	Task    string          `json:"task"`
	Payload json.RawMessage `json:"payload,omitempty"`
}
