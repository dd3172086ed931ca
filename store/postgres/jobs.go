package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/store"
	"github.com/flexiq/flexiq/store/internal/claimscan"
	"github.com/flexiq/flexiq/store/internal/sqlrow"
)

const jobCols = `seq, namespace, id, queue, task, payload, priority, run_at, max_attempts, attempt,
	status, unique_key, debounce_key, lease_until, worker, error, result, dead_meta,
	created_at, finished_at, shed, no_retry, dead_replays`

func scanJob(row pgx.Row) (store.Job, error) {
	var (
		j                                       store.Job
		status                                  int16
		uniqueKey, debounceKey, worker, errText *string
		leaseUntil, finishedAt                  *int64
		runAt, createdAt                        int64
	)
	err := row.Scan(&j.Seq, &j.Namespace, &j.ID, &j.Queue, &j.Task, &j.Payload, &j.Priority, &runAt,
		&j.MaxAttempts, &j.Attempt, &status, &uniqueKey, &debounceKey, &leaseUntil, &worker, &errText,
		&j.Result, &j.DeadMeta, &createdAt, &finishedAt, &j.Shed, &j.NoRetry, &j.DeadReplays)
	if err != nil {
		return j, err
	}
	j.Status = sqlrow.StatusName(int(status))
	j.RunAt = sqlrow.FromRunAtMicros(runAt)
	j.CreatedAt = fromNanos(createdAt)
	j.UniqueKey, j.DebounceKey, j.Worker, j.Error = deref(uniqueKey), deref(debounceKey), deref(worker), deref(errText)
	j.LeaseUntil = fromNullNanos(leaseUntil)
	j.FinishedAt = fromNullNanos(finishedAt)
	return j, nil
}

// ---------------------------------------------------------------------------
// Enqueue

// Key-less jobs go in with one INSERT … SELECT FROM unnest(arrays) per run
// of them: a prepared statement of one of a few shapes whatever the batch
// size, rows inserted (and numbered) in the arrays' order. When a run
// holds a client-chosen id, a repeated one is skipped by ON CONFLICT DO
// NOTHING, and RETURNING id tells which were. A run of ids FlexiQ
// generated (never repeated) has no conflict clause: an INSERT … ON
// CONFLICT checks each arbiter index before it writes a row and confirms
// the row after (a speculative insertion), which cost a fifth of a
// batch's rate (docs/performance.md, "PostgreSQL: generated ids without a
// conflict clause"). Were a generated id ever repeated, the write fails
// whole instead of answering "enqueued" for a job it did not write.
//
// What a run's rows share (queue, task, priority, run_at, max_attempts,
// and so the status) goes once, as scalars, when every row shares it, and
// otherwise in arrays a row long: PostgreSQL then reads two arrays rather
// than eight, which made a batch about a fifth faster (docs/performance.md,
// "PostgreSQL: what a run's rows share is sent once").
//
// The parameters keep their numbers in every shape: $1 the namespace, $2
// the ids, $3 the queues, $4 the tasks, $5 the payloads, $6 the
// priorities, $7 the run_ats, $8 the max_attempts; then $9 the statuses
// and $10 the time, or for shed rows $9 the time, $10 the error and $11
// the dead-letter metadata.
func insertRowsSQL(shed, shared, returning bool) string {
	type param struct {
		col, typ string
		perRow   bool
	}
	params := []param{{"id", "text", true}, {"queue", "text", false}, {"task", "text", false}, {"payload", "bytea", true},
		{"priority", "bigint", false}, {"run_at", "bigint", false}, {"max_attempts", "bigint", false}}
	if !shed {
		params = append(params, param{"status", "smallint", false})
	}
	var sel, arrays, names []string
	for i, p := range params {
		n := strconv.Itoa(i + 2)
		if p.perRow || !shared {
			sel = append(sel, "r."+p.col)
			arrays = append(arrays, "$"+n+"::"+p.typ+"[]")
			names = append(names, p.col)
		} else {
			sel = append(sel, "$"+n+"::"+p.typ)
		}
	}
	cols, rest, tail := "status, created_at", "$10::bigint", ""
	switch {
	case shed:
		// Shed rows are dead at once and hold no keys; a repeated id
		// writes nothing.
		cols, rest, tail = "status, created_at, finished_at, error, dead_meta, shed",
			"3, $9::bigint, $9::bigint, $10::text, $11::bytea, true", " ON CONFLICT DO NOTHING"
	case returning:
		tail = " ON CONFLICT DO NOTHING RETURNING id"
	}
	return `INSERT INTO jobs (namespace, id, queue, task, payload, priority, run_at, max_attempts, ` + cols + `)
		SELECT $1::text, ` + strings.Join(sel, ", ") + `, ` + rest + `
		FROM unnest(` + strings.Join(arrays, ", ") + `) WITH ORDINALITY AS r(` + strings.Join(names, ", ") + `, ord)
		ORDER BY r.ord` + tail
}

// rowsSQL holds insertRowsSQL's statements, by shed, shared, returning.
var rowsSQL = func() (m [2][2][2]string) {
	for i := range 8 {
		m[i>>2][i>>1&1][i&1] = insertRowsSQL(i>>2 == 1, i>>1&1 == 1, i&1 == 1)
	}
	return m
}()

// b2i is 1 for true.
func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// insertKeyedSQL writes one admitted job with a unique or debounce key in
// one statement: its id already stored → (1, id); its unique key held by a
// pending or running job → (2, holder); its debounce key held by a pending
// job → (3, holder), whose payload and run_at it takes; else inserted →
// (4, id). The insert has no ON CONFLICT clause: it can only conflict with
// a concurrent transaction that took the id or a key since the checks,
// and the unique violation then runs the whole write again.
const insertKeyedSQL = `WITH byid AS (
		SELECT id FROM jobs WHERE namespace = $1::text AND id = $2::text
	), uk AS (
		SELECT id FROM jobs
		WHERE $10::text IS NOT NULL AND namespace = $1 AND unique_key = $10 AND status IN (0, 1, 4)
			AND NOT EXISTS (SELECT FROM byid)
	), dk AS (
		UPDATE jobs SET payload = $5::bytea, run_at = $7::bigint, status = $9::smallint
		WHERE $11::text IS NOT NULL AND namespace = $1 AND debounce_key = $11 AND status IN (0, 4)
			AND NOT EXISTS (SELECT FROM byid) AND NOT EXISTS (SELECT FROM uk)
		RETURNING id
	), ins AS (
		INSERT INTO jobs (namespace, id, queue, task, payload, priority, run_at, max_attempts, status,
			unique_key, debounce_key, created_at)
		SELECT $1, $2, $3::text, $4::text, $5, $6::bigint, $7, $8::bigint, $9, $10, $11, $12::bigint
		WHERE NOT EXISTS (SELECT FROM byid) AND NOT EXISTS (SELECT FROM uk) AND NOT EXISTS (SELECT FROM dk)
		RETURNING id
	)
	SELECT 1, id FROM byid
	UNION ALL SELECT 2, id FROM uk
	UNION ALL SELECT 3, id FROM dk
	UNION ALL SELECT 4, id FROM ins`

// replaySQL makes one dead letter pending again: its unique key held by
// another live job → (2, holder), the dead letter untouched; else (4, id).
// No row: not (or no longer) a dead letter. The debounce key is dropped:
// the window it stood for is long gone. "status + 0 = 3" keeps the planner
// on the id and seq indexes, off a scan of the namespace's dead letters.
const replaySQL = `WITH d AS (
		SELECT seq, unique_key FROM jobs WHERE namespace = $1::text AND id = $2::text AND status + 0 = 3
	), h AS (
		SELECT id FROM jobs
		WHERE namespace = $1 AND unique_key = (SELECT unique_key FROM d) AND status IN (0, 1, 4)
	), u AS (
		UPDATE jobs SET status = 0, attempt = 0, run_at = $3::bigint, error = NULL, dead_meta = NULL,
			finished_at = NULL, lease_until = NULL, worker = NULL, result = NULL, shed = false, no_retry = false,
			debounce_key = NULL, dead_replays = dead_replays + $4::bigint
		WHERE seq = (SELECT seq FROM d) AND status + 0 = 3 AND NOT EXISTS (SELECT FROM h)
		RETURNING id
	)
	SELECT 2, id FROM h
	UNION ALL SELECT 4, id FROM u`

// replayShedSQL marks a dead letter shed and strips its keys.
const replayShedSQL = `UPDATE jobs SET shed = true, error = $3::text, dead_meta = $4::bytea, unique_key = NULL, debounce_key = NULL
	WHERE namespace = $1::text AND id = $2::text AND status + 0 = 3`

// admissionShedMeta is the dead-letter metadata of shed jobs (docs/quotas.md).
const admissionShedMeta = `{"shed":"quota"}`

// Bulk statements are cut at this many rows or payload bytes, well below
// PostgreSQL's 1 GB limit on one value.
const (
	bulkMaxRows  = 5000
	bulkMaxBytes = 32 << 20
)

type bulkRow struct {
	job *store.NewJob
	res *api.EnqueueResult
}

// enqueuer queues one group's statements in one transaction, in order;
// results land in the result slices as the batch is read.
type enqueuer struct {
	t        *txn
	ns       string
	now      time.Time
	nowNanos int64

	rows       []bulkRow // key-less rows not yet queued
	rowsBytes  int
	rowsShed   string // the ShedError of the buffered rows
	rowsIsShed bool
}

func (e *enqueuer) call(c store.EnqueueCall) []api.EnqueueResult {
	if len(c.ReplayIDs) > 0 {
		res := make([]api.EnqueueResult, len(c.ReplayIDs))
		e.flushRows()
		for i, id := range c.ReplayIDs {
			e.replay(id, c, &res[i])
		}
		return res
	}
	res := make([]api.EnqueueResult, len(c.Jobs))
	shed := c.ShedError != ""
	for i := range c.Jobs {
		j := &c.Jobs[i]
		res[i] = api.EnqueueResult{ID: j.ID}
		if shed || (j.UniqueKey == "" && j.DebounceKey == "") {
			if len(e.rows) > 0 && (e.rowsIsShed != shed || e.rowsShed != c.ShedError ||
				len(e.rows) >= bulkMaxRows || e.rowsBytes+len(j.Payload) > bulkMaxBytes) {
				e.flushRows()
			}
			e.rowsIsShed, e.rowsShed = shed, c.ShedError
			e.rows = append(e.rows, bulkRow{job: j, res: &res[i]})
			e.rowsBytes += len(j.Payload)
			if shed {
				res[i].Outcome = api.OutcomeShed
			}
			continue
		}
		e.flushRows()
		e.keyed(j, &res[i])
	}
	return res
}

// flushRows queues the buffered key-less rows as one statement.
func (e *enqueuer) flushRows() {
	rows := e.rows
	if len(rows) == 0 {
		return
	}
	e.rows, e.rowsBytes = nil, 0
	n := len(rows)
	ids, payloads := make([]string, n), make([][]byte, n)
	returning, shared := false, true
	j0 := rows[0].job
	status0 := sqlrow.PendingStatus(j0.RunAt, e.now)
	for i, r := range rows {
		j := r.job
		ids[i], payloads[i] = j.ID, j.Payload
		returning = returning || !j.Generated
		// The status follows from run_at as stored (PendingStatus): rows
		// that share it share their status too.
		shared = shared && j.Queue == j0.Queue && j.Task == j0.Task && j.Priority == j0.Priority &&
			sqlrow.RunAtMicros(j.RunAt) == sqlrow.RunAtMicros(j0.RunAt) && j.MaxAttempts == j0.MaxAttempts
	}
	args := []any{e.ns, ids, j0.Queue, j0.Task, payloads, j0.Priority, sqlrow.RunAtMicros(j0.RunAt), j0.MaxAttempts, int16(status0)}
	if !shared {
		queues, tasks := make([]string, n), make([]string, n)
		priorities, runAts, maxAtts, statuses := make([]int64, n), make([]int64, n), make([]int64, n), make([]int16, n)
		for i, r := range rows {
			j := r.job
			queues[i], tasks[i], priorities[i] = j.Queue, j.Task, j.Priority
			runAts[i], maxAtts[i], statuses[i] = sqlrow.RunAtMicros(j.RunAt), j.MaxAttempts, int16(sqlrow.PendingStatus(j.RunAt, e.now))
		}
		args = []any{e.ns, ids, queues, tasks, payloads, priorities, runAts, maxAtts, statuses}
	}
	if e.rowsIsShed {
		// Shed either way; a repeated id simply writes nothing. (The
		// statuses are not sent: shed rows are dead.)
		e.t.exec(rowsSQL[1][b2i(shared)][0], append(args[:8], e.nowNanos, e.rowsShed, []byte(admissionShedMeta)), nil)
		return
	}
	args = append(args, e.nowNanos)
	if !returning {
		// Generated ids are never repeated (store.NewJob.Generated): no
		// conflict clause.
		e.t.exec(rowsSQL[0][b2i(shared)][0], args, func(pgconn.CommandTag) error {
			for _, r := range rows {
				r.res.Outcome = api.OutcomeEnqueued
			}
			return nil
		})
		return
	}
	e.t.query(rowsSQL[0][b2i(shared)][1], args, func(rs pgx.Rows) error {
		inserted := make(map[string]int, n)
		for rs.Next() {
			var id string
			if err := rs.Scan(&id); err != nil {
				return err
			}
			inserted[id]++
		}
		if err := rs.Err(); err != nil {
			return err
		}
		// Of rows repeating one id, the first in order was inserted.
		for _, r := range rows {
			if inserted[r.job.ID] > 0 {
				inserted[r.job.ID]--
				r.res.Outcome = api.OutcomeEnqueued
			} else {
				r.res.Outcome = api.OutcomeDeduplicated
			}
		}
		return nil
	})
}

// outcomeRow reads the (kind, id) row of insertKeyedSQL or replaySQL.
func outcomeRow(rs pgx.Rows) (kind int32, id string, ok bool, err error) {
	if rs.Next() {
		if err := rs.Scan(&kind, &id); err != nil {
			return 0, "", false, err
		}
		ok = true
	}
	return kind, id, ok, rs.Err()
}

// keyed queues one admitted job with a unique or debounce key.
func (e *enqueuer) keyed(j *store.NewJob, res *api.EnqueueResult) {
	e.t.query(insertKeyedSQL, []any{e.ns, j.ID, j.Queue, j.Task, j.Payload, j.Priority, sqlrow.RunAtMicros(j.RunAt), j.MaxAttempts,
		int16(sqlrow.PendingStatus(j.RunAt, e.now)), nullString(j.UniqueKey), nullString(j.DebounceKey), e.nowNanos},
		func(rs pgx.Rows) error {
			kind, id, ok, err := outcomeRow(rs)
			switch {
			case err != nil:
				return err
			case !ok:
				return fmt.Errorf("job %q: no outcome", j.ID) // one branch always answers
			}
			switch kind {
			case 1, 2:
				*res = api.EnqueueResult{ID: id, Outcome: api.OutcomeDeduplicated}
			case 3:
				*res = api.EnqueueResult{ID: id, Outcome: api.OutcomeCoalesced}
			default:
				*res = api.EnqueueResult{ID: id, Outcome: api.OutcomeEnqueued}
			}
			return nil
		})
}

// replay queues one dead letter's replay, admitted or shed.
func (e *enqueuer) replay(id string, c store.EnqueueCall, res *api.EnqueueResult) {
	*res = api.EnqueueResult{ID: id}
	if c.ShedError != "" {
		e.t.exec(replayShedSQL, []any{e.ns, id, c.ShedError, []byte(admissionShedMeta)}, func(ct pgconn.CommandTag) error {
			if ct.RowsAffected() > 0 {
				res.Outcome = api.OutcomeShed
			}
			return nil
		})
		return
	}
	replays := int64(0)
	if c.AutoRetry {
		replays = 1
	}
	e.t.query(replaySQL, []any{e.ns, id, sqlrow.RunAtMicros(e.now), replays}, func(rs pgx.Rows) error {
		kind, holder, ok, err := outcomeRow(rs)
		switch {
		case err != nil:
			return err
		case !ok:
			return nil // not a dead letter: outcome ""
		case kind == 2:
			*res = api.EnqueueResult{ID: holder, Outcome: api.OutcomeDeduplicated}
		default:
			res.Outcome = api.OutcomeEnqueued
		}
		return nil
	})
}

// JobEnqueueMany writes a group of calls in one transaction: every
// statement of the group goes to the server in one pipelined batch.
func (s *Store) JobEnqueueMany(ctx context.Context, p store.JobEnqueueManyParams) ([][]api.EnqueueResult, error) {
	var out [][]api.EnqueueResult
	err := s.writeRetrying(ctx, "JobEnqueueMany", true, func(t *txn) error {
		out = make([][]api.EnqueueResult, len(p.Calls))
		// A group with nothing to write sends nothing, the fence neither.
		if slices.ContainsFunc(p.Calls, func(c store.EnqueueCall) bool { return len(c.Jobs)+len(c.ReplayIDs) > 0 }) {
			queueFence(t, p.Fence)
		}
		e := &enqueuer{t: t, ns: p.Namespace, now: p.Now, nowNanos: nanos(p.Now)}
		for i, c := range p.Calls {
			out[i] = e.call(c)
		}
		e.flushRows()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ---------------------------------------------------------------------------
// Claim

// promoteSQL makes the queues' due scheduled jobs available before the
// scan. Jobs another transaction holds are left for a later claim; those
// the subquery locks stay scheduled until the update, so the update looks
// them up by seq alone.
const promoteSQL = `UPDATE jobs SET status = 0 WHERE seq IN (
		SELECT seq FROM jobs
		WHERE namespace = $1 AND queue = ANY ($2::text[]) AND status = 4 AND run_at <= $3
		FOR UPDATE SKIP LOCKED)`

// fetchSQL reads and locks a page of one queue's available jobs after the
// keyset ($3, $4, $5) in dispatch order. "priority <= $3" is an index
// range on jobs_claim, and its estimate keeps a generic plan on the
// ordered index scan that LIMIT stops early (an OR alone is estimated so
// selective that a sort of a sequential scan looks cheaper). Before the
// first page the keyset sits ahead of every job: priority MaxInt64 with
// run_at MinInt64 still lets jobs of priority MaxInt64 in. Rows locked by
// another claim are skipped, not waited for.
const fetchSQL = `SELECT seq, task, priority, run_at FROM jobs
	WHERE namespace = $1 AND queue = $2 AND status = 0
		AND priority <= $3 AND (priority < $3 OR run_at > $4 OR (run_at = $4 AND seq > $5))
		AND task <> ALL ($6::text[])
	ORDER BY priority DESC, run_at, seq
	LIMIT $7
	FOR UPDATE SKIP LOCKED`

// claimSQL marks the group's taken jobs running, each with its claim's
// lease and worker; fetchSQL locked them all.
const claimSQL = `UPDATE jobs SET status = 1, attempt = attempt + 1, lease_until = u.lease, worker = u.wkr
	FROM unnest($1::bigint[], $2::bigint[], $3::text[]) AS u(useq, lease, wkr)
	WHERE seq = u.useq AND status + 0 = 0
	RETURNING ` + jobCols

// claimHeadSQL hands out the head of one queue in one statement, for a
// group that asks no gate per job (Allow nil) and whose claims all name
// that one queue: it locks the first $4 available jobs in dispatch order
// and marks them running, the k-th of them with the k-th slot's lease and
// worker ($5, $6: claim after claim, one slot per job it may take). The
// arrays are subscripted, not joined: a join re-reads them for every job.
// "priority <= $7", given MaxInt64, keeps the generic plan on the ordered
// index scan that LIMIT stops early, as in fetchSQL.
const claimHeadSQL = `WITH head AS (
		SELECT seq AS hseq, row_number() OVER (ORDER BY priority DESC, run_at, seq) AS slot FROM (
			SELECT seq, priority, run_at FROM jobs
			WHERE namespace = $1 AND queue = $2 AND status = 0 AND priority <= $7 AND task <> ALL ($3::text[])
			ORDER BY priority DESC, run_at, seq
			LIMIT $4
			FOR UPDATE SKIP LOCKED) h)
	UPDATE jobs SET status = 1, attempt = attempt + 1, lease_until = ($5::bigint[])[head.slot], worker = ($6::text[])[head.slot]
	FROM head
	WHERE seq = head.hseq
	RETURNING head.slot, ` + jobCols

// claimFromHeadSQL is claimHeadSQL for a group that knows where the
// queue's available jobs start (Params.Head: its priority, run_at and
// seq in $6, $7, $8). The claim index keeps an entry for every job claimed
// since the last vacuum, at the queue's start, and a scan from there
// walks them all: under a steady load, tens of thousands, more and more
// until autovacuum comes. This one starts at the head: the jobs of its
// priority from its run_at and seq on (a row comparison the index
// answers), then, only for the slots left, those of lower priorities.
const claimFromHeadSQL = `WITH a AS (
		SELECT seq, priority, run_at FROM jobs
		WHERE namespace = $1 AND queue = $2 AND status = 0 AND priority = $6 AND (run_at, seq) >= ($7, $8)
		ORDER BY run_at, seq
		LIMIT $3
		FOR UPDATE SKIP LOCKED),
	b AS (
		SELECT seq, priority, run_at FROM jobs
		WHERE namespace = $1 AND queue = $2 AND status = 0 AND priority < $6
		ORDER BY priority DESC, run_at, seq
		LIMIT $3 - (SELECT count(*) FROM a)
		FOR UPDATE SKIP LOCKED),
	head AS (
		SELECT seq AS hseq, row_number() OVER (ORDER BY priority DESC, run_at, seq) AS slot
		FROM (SELECT * FROM a UNION ALL SELECT * FROM b) h)
	UPDATE jobs SET status = 1, attempt = attempt + 1, lease_until = ($4::bigint[])[head.slot], worker = ($5::text[])[head.slot]
	FROM head
	WHERE seq = head.hseq
	RETURNING head.slot, ` + jobCols

// queueClaimHead queues claimHeadSQL for the group: claim after claim,
// each gets the next of the head's jobs up to its Max, in dispatch order,
// as the scan of the general path would give them.
func queueClaimHead(t *txn, p *store.JobClaimManyParams, queue string, out [][]store.Job) {
	var (
		leases  []int64
		workers []*string
		owner   []int // slot → claim
	)
	for ci, c := range p.Claims {
		var worker *string
		if c.Worker != "" {
			w := c.Worker
			worker = &w
		}
		for range max(c.Max, 0) {
			leases = append(leases, nanos(c.LeaseUntil))
			workers = append(workers, worker)
			owner = append(owner, ci)
		}
	}
	if len(owner) == 0 {
		return
	}
	exclude := p.ExcludeTasks
	if exclude == nil {
		exclude = []string{}
	}
	sql, args := claimHeadSQL, []any{p.Namespace, queue, exclude, len(owner), leases, workers, int64(math.MaxInt64)}
	if h := p.Head; h != nil && len(exclude) == 0 {
		sql, args = claimFromHeadSQL, []any{p.Namespace, queue, len(owner), leases, workers, h.Priority, sqlrow.RunAtMicros(h.RunAt), h.Seq}
	}
	t.query(sql, args, func(rows pgx.Rows) error {
		bySlot := make([]store.Job, len(owner))
		got := make([]bool, len(owner))
		for rows.Next() {
			var slot int64
			j, err := scanJob(slotted{rows, &slot})
			if err != nil {
				return err
			}
			if slot < 1 || slot > int64(len(owner)) || got[slot-1] {
				return fmt.Errorf("claim: slot %d out of %d", slot, len(owner))
			}
			bySlot[slot-1], got[slot-1] = j, true
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for k, ok := range got {
			if ok {
				out[owner[k]] = append(out[owner[k]], bySlot[k])
			}
		}
		return nil
	})
}

// slotted scans a row that leads with its slot before the job's columns.
type slotted struct {
	row  pgx.Row
	slot *int64
}

func (s slotted) Scan(dest ...any) error {
	return s.row.Scan(append([]any{s.slot}, dest...)...)
}

// queueFetch queues the read of c's next page.
func queueFetch(t *txn, ns string, c *claimscan.Cursor, skip map[string]bool, limit int) {
	lastPri, lastRun, lastSeq := c.After()
	tasks := make([]string, 0, len(skip))
	for task := range skip {
		tasks = append(tasks, task)
	}
	t.query(fetchSQL, []any{ns, c.Queue, lastPri, lastRun, lastSeq, tasks, limit}, func(rows pgx.Rows) error {
		c.Page()
		for rows.Next() {
			var cd claimscan.Candidate
			if err := rows.Scan(&cd.Seq, &cd.Task, &cd.Priority, &cd.RunAt); err != nil {
				return err
			}
			c.Add(cd)
		}
		if err := rows.Err(); err != nil {
			return err
		}
		c.Read(limit)
		return nil
	})
}

// JobClaimMany hands out due jobs for each claim in one transaction, in
// two round trips unless Allow skips more than a page holds. The first
// promotes the group's due scheduled jobs (unless NoPromote) and reads and
// locks the head of each of its queues; the cursors are shared by the
// group's claims, so a group of small claims reads each queue's head once.
// The second marks every taken job running in one statement and commits.
func (s *Store) JobClaimMany(ctx context.Context, p store.JobClaimManyParams) ([][]store.Job, error) {
	var out [][]store.Job
	err := s.write(ctx, "JobClaimMany", func(t *txn) error {
		out = make([][]store.Job, len(p.Claims))
		g := claimscan.NewGroup(&p)
		remaining := 0
		var queues []string
		for _, c := range p.Claims {
			remaining += max(c.Max, 0)
			for _, q := range c.Queues {
				if _, made := g.Cursor(q); made {
					queues = append(queues, q)
				}
			}
		}
		if remaining == 0 || len(queues) == 0 {
			return nil
		}
		queueFence(t, p.Fence)
		if !p.NoPromote {
			t.exec(promoteSQL, []any{p.Namespace, queues, sqlrow.RunAtMicros(p.Now)}, nil)
		}
		if q, ok := p.OneQueueUngated(); ok {
			// Nothing to ask per job: the whole claim, its commit too, is
			// one round trip.
			queueClaimHead(t, &p, q, out)
			return nil
		}
		// A page holds a little more than the group can take: Allow may
		// skip some, and another page costs a round trip.
		pageSize := func() int { return remaining + 4 }
		for _, q := range queues {
			c, _ := g.Cursor(q)
			queueFetch(t, p.Namespace, c, g.SkipTask, pageSize())
		}
		if err := t.flush(); err != nil {
			return err
		}
		read := func(c *claimscan.Cursor) error {
			queueFetch(t, p.Namespace, c, g.SkipTask, pageSize())
			return t.flush()
		}
		takenBy := make([][]int64, len(p.Claims))
		for ci, claim := range p.Claims {
			if g.Stopped {
				break
			}
			taken, err := g.Take(claim.Queues, claim.Max, read)
			if err != nil {
				return err
			}
			remaining -= max(claim.Max, 0)
			takenBy[ci] = taken
		}
		queueClaims(t, p.Claims, takenBy, out)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// queueClaims queues the one update that marks the group's taken jobs
// running; out[i] gets claim i's jobs in the order taken.
func queueClaims(t *txn, claims []store.ClaimSpec, takenBy [][]int64, out [][]store.Job) {
	var (
		seqs, leases []int64
		workers      []*string
	)
	for ci, taken := range takenBy {
		var worker *string
		if w := claims[ci].Worker; w != "" {
			worker = &w
		}
		for _, seq := range taken {
			seqs = append(seqs, seq)
			leases = append(leases, nanos(claims[ci].LeaseUntil))
			workers = append(workers, worker)
		}
	}
	if len(seqs) == 0 {
		return
	}
	t.query(claimSQL, []any{seqs, leases, workers}, func(rows pgx.Rows) error {
		bySeq := make(map[int64]store.Job, len(seqs))
		for rows.Next() {
			j, err := scanJob(rows)
			if err != nil {
				return err
			}
			bySeq[j.Seq] = j
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for ci, taken := range takenBy {
			if len(taken) == 0 {
				continue
			}
			jobs := make([]store.Job, 0, len(taken))
			for _, seq := range taken {
				j, ok := bySeq[seq]
				if !ok {
					// Cannot happen: fetchSQL locked it available.
					return fmt.Errorf("claim seq %d: locked but not claimed", seq)
				}
				jobs = append(jobs, j)
			}
			out[ci] = jobs
		}
		return nil
	})
}

// ---------------------------------------------------------------------------
// Updates

// Updates go in runs: consecutive updates of one kind, each of another
// job, are one statement over arrays; RETURNING tells which applied. A job
// updated twice in a group starts a new run, so updates apply in order.
// Retries run one by one (see retrySQL).
//
// "status + 0 = 1" (here and in claimSQL) is not a predicate of any
// partial index, so the planner looks each job up by its key in a nested
// loop: with "status = 1" a generic plan may hash-join against a full scan
// of jobs_running, which is cheap only while the statistics are right that
// few jobs run.
//
// Each entry's job is found by runningJobSQL, a LATERAL subquery that
// LIMIT keeps from being flattened into the join: one lookup in jobs_ns_id
// an entry, whatever the statistics say. Joined directly, statistics
// taken while the namespace held few running jobs (a new namespace, a
// fresh database) made the planner walk the namespace's jobs once and
// compare each with every entry: 4.7 s for an ack of 500 jobs with 41 000
// running.
const runningJobSQL = `SELECT r.seq FROM jobs r
	WHERE r.namespace = $1 AND r.id = u.uid AND r.status + 0 = 1 AND r.attempt = u.uatt LIMIT 1`

const (
	completeSQL = `UPDATE jobs SET status = 2, result = u.ures, finished_at = $5, lease_until = NULL
		FROM unnest($2::text[], $3::bigint[], $4::bytea[]) WITH ORDINALITY AS u(uid, uatt, ures, ord)
		CROSS JOIN LATERAL (` + runningJobSQL + `) AS k
		WHERE jobs.seq = k.seq
		RETURNING u.ord`
	// A retried job takes its debounce key back only if no other pending
	// job took it while it ran. Retries go one job a statement, so a
	// retry sees the key taken back by the one before it.
	retrySQL = `UPDATE jobs SET status = u.ust, run_at = u.urun, error = u.uerr, lease_until = NULL, worker = NULL,
			debounce_key = CASE WHEN debounce_key IS NOT NULL AND EXISTS (SELECT FROM jobs h
				WHERE h.namespace = $1 AND h.debounce_key = jobs.debounce_key AND h.status IN (0, 4))
				THEN NULL ELSE debounce_key END
		FROM unnest($2::text[], $3::bigint[], $4::smallint[], $5::bigint[], $6::text[])
			WITH ORDINALITY AS u(uid, uatt, ust, urun, uerr, ord)
		CROSS JOIN LATERAL (` + runningJobSQL + `) AS k
		WHERE jobs.seq = k.seq
		RETURNING u.ord`
	deadSQL = `UPDATE jobs SET status = 3, error = u.uerr, finished_at = $6, lease_until = NULL, no_retry = u.unr
		FROM unnest($2::text[], $3::bigint[], $4::text[], $5::boolean[]) WITH ORDINALITY AS u(uid, uatt, uerr, unr, ord)
		CROSS JOIN LATERAL (` + runningJobSQL + `) AS k
		WHERE jobs.seq = k.seq
		RETURNING u.ord`
	releaseSQL = `UPDATE jobs SET status = CASE WHEN run_at <= $4 THEN 0 ELSE 4 END, attempt = attempt - 1,
			lease_until = NULL, worker = NULL,
			debounce_key = CASE WHEN debounce_key IS NOT NULL AND EXISTS (SELECT FROM jobs h
				WHERE h.namespace = $1 AND h.debounce_key = jobs.debounce_key AND h.status IN (0, 4))
				THEN NULL ELSE debounce_key END
		FROM unnest($2::text[], $3::bigint[]) WITH ORDINALITY AS u(uid, uatt, ord)
		CROSS JOIN LATERAL (` + runningJobSQL + `) AS k
		WHERE jobs.seq = k.seq
		RETURNING u.ord`
	extendSQL = `UPDATE jobs SET lease_until = u.ulease
		FROM unnest($2::text[], $3::bigint[], $4::bigint[]) WITH ORDINALITY AS u(uid, uatt, ulease, ord)
		CROSS JOIN LATERAL (` + runningJobSQL + `) AS k
		WHERE jobs.seq = k.seq
		RETURNING u.ord`
)

// JobUpdateMany applies acks, nacks, extensions and expiries in one
// transaction, all its statements in one pipelined batch.
func (s *Store) JobUpdateMany(ctx context.Context, p store.JobUpdateManyParams) ([]bool, error) {
	for i, u := range p.Updates {
		if u.Kind < store.UpdateComplete || u.Kind > store.UpdateRelease {
			return nil, fmt.Errorf("postgres: JobUpdateMany: update %d: unknown kind %d", i, u.Kind)
		}
	}
	var applied []bool
	// A retry taking its debounce key back races with a concurrent
	// enqueue taking it: the unique violation runs the write again.
	err := s.writeRetrying(ctx, "JobUpdateMany", true, func(t *txn) error {
		applied = make([]bool, len(p.Updates))
		if len(p.Updates) > 0 {
			queueFence(t, p.Fence)
		}
		for start := 0; start < len(p.Updates); {
			end := start + 1
			seen := map[string]bool{p.Updates[start].ID: true}
			for end < len(p.Updates) && p.Updates[end].Kind == p.Updates[start].Kind && !seen[p.Updates[end].ID] &&
				p.Updates[start].Kind != store.UpdateRetry && p.Updates[start].Kind != store.UpdateRelease {
				seen[p.Updates[end].ID] = true
				end++
			}
			queueUpdates(t, p, p.Updates[start:end], applied[start:end])
			start = end
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

// queueUpdates queues one run of updates, all of one kind and of distinct
// jobs; applied[i] tells whether ups[i] applied.
func queueUpdates(t *txn, p store.JobUpdateManyParams, ups []store.JobUpdate, applied []bool) {
	n := len(ups)
	ids, attempts := make([]string, n), make([]int64, n)
	for i, u := range ups {
		ids[i], attempts[i] = u.ID, u.Attempt
	}
	args := []any{p.Namespace, ids, attempts}
	var query string
	switch ups[0].Kind {
	case store.UpdateComplete:
		results := make([][]byte, n)
		for i, u := range ups {
			results[i] = u.Result
		}
		query, args = completeSQL, append(args, results, nanos(p.Now))
	case store.UpdateRetry:
		statuses, runAts, errs := make([]int16, n), make([]int64, n), make([]*string, n)
		for i, u := range ups {
			statuses[i], runAts[i] = int16(sqlrow.PendingStatus(u.RunAt, p.Now)), sqlrow.RunAtMicros(u.RunAt)
			if u.Error != "" {
				errs[i] = &ups[i].Error
			}
		}
		query, args = retrySQL, append(args, statuses, runAts, errs)
	case store.UpdateDead:
		errs, noRetry := make([]*string, n), make([]bool, n)
		for i, u := range ups {
			noRetry[i] = u.NoRetry
			if u.Error != "" {
				errs[i] = &ups[i].Error
			}
		}
		query, args = deadSQL, append(args, errs, noRetry, nanos(p.Now))
	case store.UpdateExtend:
		leases := make([]int64, n)
		for i, u := range ups {
			leases[i] = nanos(u.LeaseUntil)
		}
		query, args = extendSQL, append(args, leases)
	case store.UpdateRelease:
		query, args = releaseSQL, append(args, sqlrow.RunAtMicros(p.Now))
	}
	t.query(query, args, func(rows pgx.Rows) error {
		for rows.Next() {
			var ord int64
			if err := rows.Scan(&ord); err != nil {
				return err
			}
			if ord >= 1 && ord <= int64(n) {
				applied[ord-1] = true
			}
		}
		return rows.Err()
	})
}

// ---------------------------------------------------------------------------
// Reads

// JobGet returns one job.
func (s *Store) JobGet(ctx context.Context, namespace, id string) (store.Job, error) {
	j, err := scanJob(s.pool.QueryRow(ctx, `SELECT `+jobCols+` FROM jobs WHERE namespace = $1 AND id = $2`, namespace, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return j, fmt.Errorf("job %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return j, fmt.Errorf("postgres: JobGet: %w", err)
	}
	return j, nil
}

// JobList lists jobs newest first.
func (s *Store) JobList(ctx context.Context, p store.JobListParams) ([]store.Job, error) {
	var b strings.Builder
	args := []any{p.Namespace}
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	b.WriteString(`SELECT ` + jobCols + ` FROM jobs WHERE namespace = $1`)
	if p.Status != "" {
		code, ok := sqlrow.StatusCode(p.Status)
		if !ok {
			return nil, fmt.Errorf("postgres: JobList: unknown status %q", p.Status)
		}
		if code == sqlrow.Pending {
			b.WriteString(` AND status IN (0, 4)`)
		} else {
			b.WriteString(` AND status = ` + arg(code))
		}
	}
	if p.Queue != "" {
		b.WriteString(` AND queue = ` + arg(p.Queue))
	}
	if p.Shed != nil {
		b.WriteString(` AND shed = ` + arg(*p.Shed))
	}
	if p.BeforeSeq > 0 {
		b.WriteString(` AND seq < ` + arg(p.BeforeSeq))
	}
	b.WriteString(` ORDER BY seq DESC`)
	if p.Limit > 0 {
		b.WriteString(` LIMIT ` + arg(p.Limit))
	}
	return s.jobs(ctx, "JobList", b.String(), args...)
}

func (s *Store) jobs(ctx context.Context, op, query string, args ...any) ([]store.Job, error) {
	rows, err := s.pool.Query(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", op, err)
	}
	defer rows.Close()
	var out []store.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres: %s: %w", op, err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: %s: %w", op, err)
	}
	return out, nil
}

// countSQL counts a namespace's jobs by status, each status through its
// own partial index. One statement reads one snapshot: the counts agree
// with each other as a REPEATABLE READ transaction's would, in one round
// trip.
const countSQL = `SELECT
	(SELECT count(*) FROM jobs WHERE namespace = $1 AND status = 0),
	(SELECT count(*) FROM jobs WHERE namespace = $1 AND status = 4),
	(SELECT count(*) FROM jobs WHERE namespace = $1 AND status = 1),
	(SELECT count(*) FROM jobs WHERE namespace = $1 AND status IN (2, 3) AND status = 2),
	(SELECT count(*) FROM jobs WHERE namespace = $1 AND status IN (2, 3) AND status = 3)`

// JobCount counts by status.
func (s *Store) JobCount(ctx context.Context, namespace string) (store.Counts, error) {
	var (
		c         store.Counts
		scheduled int64
	)
	if err := s.pool.QueryRow(ctx, countSQL, namespace).Scan(&c.Pending, &scheduled, &c.Running, &c.Completed, &c.Dead); err != nil {
		return store.Counts{}, fmt.Errorf("postgres: JobCount: %w", err)
	}
	c.Pending += scheduled
	return c, nil
}

// JobNextRunAt returns the earliest run_at among the queues' scheduled
// jobs (every queue's when queues is empty): the head of each queue's
// scheduled index, the least of them.
func (s *Store) JobNextRunAt(ctx context.Context, namespace string, queues []string) (time.Time, bool, error) {
	var (
		n   *int64
		row pgx.Row
	)
	if len(queues) == 0 {
		row = s.pool.QueryRow(ctx, `SELECT run_at FROM jobs WHERE namespace = $1 AND status = 4
			ORDER BY run_at LIMIT 1`, namespace)
	} else {
		row = s.pool.QueryRow(ctx, `SELECT min(h.run_at) FROM unnest($2::text[]) AS q(queue),
			LATERAL (SELECT run_at FROM jobs WHERE namespace = $1 AND queue = q.queue AND status = 4
				ORDER BY run_at LIMIT 1) AS h`, namespace, queues)
	}
	switch err := row.Scan(&n); {
	case errors.Is(err, pgx.ErrNoRows):
	case err != nil:
		return time.Time{}, false, fmt.Errorf("postgres: JobNextRunAt: %w", err)
	}
	if n == nil {
		return time.Time{}, false, nil
	}
	return sqlrow.FromRunAtMicros(*n), true, nil
}

// JobListRunning lists a namespace's running jobs.
func (s *Store) JobListRunning(ctx context.Context, namespace string) ([]store.Job, error) {
	return s.jobs(ctx, "JobListRunning", `SELECT `+jobCols+` FROM jobs WHERE namespace = $1 AND status = 1 ORDER BY seq`, namespace)
}

// JobRunningNamespaces lists the namespaces with running jobs (through
// the partial index jobs_running).
func (s *Store) JobRunningNamespaces(ctx context.Context) ([]string, error) {
	rows, err := s.pool.Query(ctx, `SELECT DISTINCT namespace FROM jobs WHERE status = 1`)
	if err != nil {
		return nil, fmt.Errorf("postgres: JobRunningNamespaces: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("postgres: JobRunningNamespaces: %w", err)
	}
	return out, nil
}

// JobListDeadRetryable lists dead letters due for an auto-retry.
func (s *Store) JobListDeadRetryable(ctx context.Context, p store.JobListDeadRetryableParams) ([]store.Job, error) {
	var limit any // NULL: no limit
	if p.Limit > 0 {
		limit = p.Limit
	}
	return s.jobs(ctx, "JobListDeadRetryable", `SELECT `+jobCols+` FROM jobs
		WHERE namespace = $1 AND status IN (2, 3) AND status = 3 AND queue = $2 AND finished_at <= $3
			AND NOT shed AND NOT no_retry AND dead_replays < $4
		ORDER BY finished_at, seq LIMIT $5`, p.Namespace, p.Queue, nanos(p.DeadBefore), p.MaxReplays, limit)
}

// ---------------------------------------------------------------------------
// Retention

// JobDeleteFinishedBefore deletes up to Limit finished jobs older than Before.
func (s *Store) JobDeleteFinishedBefore(ctx context.Context, p store.JobDeleteFinishedBeforeParams) (int64, error) {
	code, err := sqlrow.FinishedStatus(p.Status)
	if err != nil {
		return 0, fmt.Errorf("postgres: %w", err)
	}
	var n int64
	err = s.write(ctx, "JobDeleteFinishedBefore", func(t *txn) error {
		t.exec(`DELETE FROM jobs WHERE seq IN (
			SELECT seq FROM jobs WHERE status IN (2, 3) AND status = $1 AND finished_at < $2
			AND NOT (namespace = ANY($4::text[]))
			ORDER BY finished_at LIMIT $3)`, []any{code, nanos(p.Before), max(p.Limit, 0), append([]string{}, p.Skip...)},
			func(ct pgconn.CommandTag) error {
				n = ct.RowsAffected()
				return nil
			})
		return nil
	})
	return n, err
}

// JobDeleteOverCeiling deletes a namespace's oldest finished jobs beyond
// Keep, in one statement.
func (s *Store) JobDeleteOverCeiling(ctx context.Context, p store.JobDeleteOverCeilingParams) (int64, error) {
	code, err := sqlrow.FinishedStatus(p.Status)
	if err != nil {
		return 0, fmt.Errorf("postgres: %w", err)
	}
	var n int64
	err = s.write(ctx, "JobDeleteOverCeiling", func(t *txn) error {
		t.exec(`DELETE FROM jobs WHERE seq IN (
			SELECT seq FROM jobs WHERE namespace = $1 AND status IN (2, 3) AND status = $2
			ORDER BY finished_at, seq
			LIMIT greatest(0, least($4::bigint,
				(SELECT count(*) FROM jobs WHERE namespace = $1 AND status IN (2, 3) AND status = $2) - $3::bigint)))`,
			[]any{p.Namespace, code, p.Keep, max(p.Limit, 0)},
			func(ct pgconn.CommandTag) error {
				n = ct.RowsAffected()
				return nil
			})
		return nil
	})
	return n, err
}
