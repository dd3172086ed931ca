package sqlite

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/store"
	"github.com/flexiq/flexiq/store/internal/claimscan"
	"github.com/flexiq/flexiq/store/internal/sqlrow"
)

const jobCols = `seq, namespace, id, queue, task, payload, priority, run_at, max_attempts, attempt,
	status, unique_key, debounce_key, lease_until, worker, error, result, dead_meta,
	created_at, finished_at, shed, no_retry, dead_replays`

type scanner interface{ Scan(dest ...any) error }

func scanJob(sc scanner) (store.Job, error) {
	var (
		j                                       store.Job
		status                                  int
		uniqueKey, debounceKey, worker, errText sql.NullString
		leaseUntil, finishedAt                  sql.NullInt64
		runAt, createdAt                        int64
		shed, noRetry                           int
	)
	err := sc.Scan(&j.Seq, &j.Namespace, &j.ID, &j.Queue, &j.Task, &j.Payload, &j.Priority, &runAt,
		&j.MaxAttempts, &j.Attempt, &status, &uniqueKey, &debounceKey, &leaseUntil, &worker, &errText,
		&j.Result, &j.DeadMeta, &createdAt, &finishedAt, &shed, &noRetry, &j.DeadReplays)
	if err != nil {
		return j, err
	}
	j.Status = sqlrow.StatusName(status)
	j.RunAt = sqlrow.FromRunAtMicros(runAt)
	j.CreatedAt = time.Unix(0, createdAt).UTC()
	j.UniqueKey, j.DebounceKey, j.Worker, j.Error = uniqueKey.String, debounceKey.String, worker.String, errText.String
	j.LeaseUntil = fromNanos(leaseUntil)
	j.FinishedAt = fromNanos(finishedAt)
	j.Shed, j.NoRetry = shed != 0, noRetry != 0
	return j, nil
}

// ---------------------------------------------------------------------------
// Enqueue

// Bulk rows bind plain "?" parameters only: modernc looks every parameter
// up by name when it binds, and numbered ones make that quadratic in the
// statement's size.
var bulkSizes = []int{256, 64, 16, 4, 1}

// bulkKey names one text of bulkInsertSQL.
type bulkKey struct {
	n               int
	shed, returning bool
	// same: the rows share their queue, task, priority, run_at and
	// max_attempts (a batch for one task, jobs due now).
	same bool
}

// bulkInsertSQL builds the multi-row insert of k.n rows. Shed rows are
// dead at once and hold no keys.
//
// What the rows share is bound once, in the one-row subquery c, and only
// what differs goes in each row of VALUES. Binding was 28 % of the
// actor's time in batched enqueues (the driver takes the connection's
// mutex and copies each text into C memory at every parameter), and a
// batch's rows share their namespace and time, and mostly their task and
// settings.
// With k.same a row binds its id and payload alone. bulkArgs binds in the
// same order. The rows go in as VALUES lists them, one after the other:
// nothing sorts them, and their seq is their enqueue order.
func bulkInsertSQL(k bulkKey) string {
	// Each column's value: a literal, or the i-th (from 1) of what the
	// rows share or of each row's own.
	type value struct {
		lit    string
		shared bool
		i      int
	}
	var (
		shared []string // names in c
		row    int      // parameters in each row
		vals   []value
	)
	param := func(name string, same bool) {
		if same {
			shared = append(shared, name)
			vals = append(vals, value{shared: true, i: len(shared)})
			return
		}
		row++
		vals = append(vals, value{i: row})
	}
	param("ns", true)
	param("id", false)
	param("queue", k.same)
	param("task", k.same)
	param("payload", false)
	param("priority", k.same)
	param("run_at", k.same)
	param("max_attempts", k.same)
	param("now", true) // created_at
	now := vals[len(vals)-1]
	if k.shed {
		vals = append(vals, value{lit: "3"})
		param("err", true)
		param("meta", true)
		vals = append(vals, now, value{lit: "1"}) // finished_at
	} else {
		param("status", k.same)
		vals = append(vals, value{lit: "NULL"}, value{lit: "NULL"}, value{lit: "NULL"}, value{lit: "0"})
	}
	var b strings.Builder
	b.WriteString(`INSERT INTO jobs (namespace, id, queue, task, payload, priority, run_at, max_attempts,
		created_at, status, error, dead_meta, finished_at, shed) `)
	// One row: plain VALUES, numbered in bulkArgs' order. Selecting it
	// from a join costs a one-job write about 7 %.
	one := k.n == 1
	exprs := make([]string, len(vals))
	for i, v := range vals {
		switch {
		case v.lit != "":
			exprs[i] = v.lit
		case one && v.shared:
			exprs[i] = "?" + strconv.Itoa(v.i)
		case one:
			exprs[i] = "?" + strconv.Itoa(len(shared)+v.i)
		case v.shared:
			exprs[i] = "c." + shared[v.i-1]
		default:
			exprs[i] = "v.column" + strconv.Itoa(v.i)
		}
	}
	if one {
		b.WriteString("VALUES (" + strings.Join(exprs, ", ") + ") ON CONFLICT DO NOTHING")
	} else {
		b.WriteString("SELECT " + strings.Join(exprs, ", "))
		b.WriteString(" FROM (SELECT ")
		for i, name := range shared {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("? AS " + name)
		}
		b.WriteString(") AS c, (VALUES ")
		values := "(?" + strings.Repeat(",?", row-1) + ")"
		for i := 0; i < k.n; i++ {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(values)
		}
		// "WHERE true": without a WHERE, SQLite would read ON CONFLICT
		// as the join's ON.
		b.WriteString(") AS v WHERE true ON CONFLICT DO NOTHING")
	}
	if k.returning {
		b.WriteString(" RETURNING id")
	}
	return b.String()
}

// bulkArgs appends the parameters of bulkInsertSQL(k) for rows, in its
// order: what the rows share, then each row's own.
func (e *enqueuer) bulkArgs(args []any, k bulkKey, rows []bulkRow) []any {
	j0 := rows[0].job
	args = append(args, e.ns)
	if k.same {
		args = append(args, j0.Queue, j0.Task, j0.Priority, sqlrow.RunAtMicros(j0.RunAt), j0.MaxAttempts)
	}
	args = append(args, nanos(e.now))
	switch {
	case k.shed:
		args = append(args, e.rowsShed, []byte(admissionShedMeta))
	case k.same:
		args = append(args, sqlrow.PendingStatus(j0.RunAt, e.now))
	}
	for _, r := range rows {
		j := r.job
		if k.same {
			args = append(args, j.ID, nullBytes(j.Payload))
			continue
		}
		args = append(args, j.ID, j.Queue, j.Task, nullBytes(j.Payload), j.Priority, sqlrow.RunAtMicros(j.RunAt), j.MaxAttempts)
		if !k.shed {
			args = append(args, sqlrow.PendingStatus(j.RunAt, e.now))
		}
	}
	return args
}

// sameSettings tells whether rows share what bulkKey.same binds once.
func sameSettings(rows []bulkRow) bool {
	a := rows[0].job
	for _, r := range rows[1:] {
		b := r.job
		if b.Queue != a.Queue || b.Task != a.Task || b.Priority != a.Priority ||
			sqlrow.RunAtMicros(b.RunAt) != sqlrow.RunAtMicros(a.RunAt) || b.MaxAttempts != a.MaxAttempts {
			return false
		}
	}
	return true
}

// bulkInsert is bulkInsertSQL's text, built once per Store. The caller
// holds wmu.
func (s *Store) bulkInsert(k bulkKey) string {
	q, ok := s.bulkSQL[k]
	if !ok {
		q = bulkInsertSQL(k)
		s.bulkSQL[k] = q
	}
	return q
}

type bulkRow struct {
	job *store.NewJob
	res *api.EnqueueResult
}

// enqueuer writes one group inside a transaction.
type enqueuer struct {
	s    *Store
	ctx  context.Context
	tx   *wtx
	ns   string
	now  time.Time
	step func() error

	rows       []bulkRow
	rowsShed   string // the ShedError of the buffered rows; "" = admitted
	rowsIsShed bool
	args       []any
}

func (e *enqueuer) call(c store.EnqueueCall) ([]api.EnqueueResult, error) {
	if len(c.ReplayIDs) > 0 {
		res := make([]api.EnqueueResult, len(c.ReplayIDs))
		if err := e.flush(); err != nil {
			return nil, err
		}
		for i, id := range c.ReplayIDs {
			r, err := e.replay(id, c)
			if err != nil {
				return nil, err
			}
			res[i] = r
		}
		return res, nil
	}
	res := make([]api.EnqueueResult, len(c.Jobs))
	shed := c.ShedError != ""
	for i := range c.Jobs {
		j := &c.Jobs[i]
		res[i] = api.EnqueueResult{ID: j.ID}
		if shed || (j.UniqueKey == "" && j.DebounceKey == "") {
			if len(e.rows) > 0 && (e.rowsIsShed != shed || e.rowsShed != c.ShedError) {
				if err := e.flush(); err != nil {
					return nil, err
				}
			}
			e.rowsIsShed, e.rowsShed = shed, c.ShedError
			e.rows = append(e.rows, bulkRow{job: j, res: &res[i]})
			if shed {
				res[i].Outcome = api.OutcomeShed
			}
			continue
		}
		if err := e.flush(); err != nil {
			return nil, err
		}
		r, err := e.keyed(j)
		if err != nil {
			return nil, err
		}
		res[i] = r
	}
	return res, nil
}

// flush inserts the buffered key-less rows in as few statements as it can.
func (e *enqueuer) flush() error {
	rows := e.rows
	for len(rows) > 0 {
		n := 1
		for _, size := range bulkSizes {
			if len(rows) >= size {
				n = size
				break
			}
		}
		chunk := rows[:n]
		rows = rows[n:]
		if err := e.step(); err != nil {
			return err
		}
		k := bulkKey{n: n, shed: e.rowsIsShed, same: sameSettings(chunk)}
		for _, r := range chunk {
			if !r.job.Generated {
				k.returning = true
				break
			}
		}
		e.args = e.bulkArgs(e.args[:0], k, chunk)
		query := e.s.bulkInsert(k)
		if !k.returning {
			if _, err := e.tx.ExecContext(e.ctx, query, e.args...); err != nil {
				return err
			}
			if !e.rowsIsShed {
				for _, r := range chunk {
					r.res.Outcome = api.OutcomeEnqueued
				}
			}
			continue
		}
		rs, err := e.tx.QueryContext(e.ctx, query, e.args...)
		if err != nil {
			return err
		}
		inserted := map[string]int{}
		for rs.Next() {
			var id string
			if err := rs.Scan(&id); err != nil {
				rs.Close()
				return err
			}
			inserted[id]++
		}
		if err := rs.Close(); err != nil {
			return err
		}
		if e.rowsIsShed {
			continue // shed either way; a repeated id simply wrote nothing
		}
		for _, r := range chunk {
			if inserted[r.job.ID] > 0 {
				inserted[r.job.ID]--
				r.res.Outcome = api.OutcomeEnqueued
			} else {
				r.res.Outcome = api.OutcomeDeduplicated
			}
		}
	}
	e.rows = e.rows[:0]
	return nil
}

// keyed writes one admitted job with a unique or debounce key.
func (e *enqueuer) keyed(j *store.NewJob) (api.EnqueueResult, error) {
	ctx, tx := e.ctx, e.tx
	if err := e.step(); err != nil {
		return api.EnqueueResult{}, err
	}
	if !j.Generated {
		var one int
		row := e.tx.QueryRowContext(ctx, `SELECT 1 FROM jobs WHERE namespace = ? AND id = ?`, e.ns, j.ID)
		switch err := row.Scan(&one); {
		case err == nil:
			return api.EnqueueResult{ID: j.ID, Outcome: api.OutcomeDeduplicated}, nil
		case !errors.Is(err, sql.ErrNoRows):
			return api.EnqueueResult{}, err
		}
	}
	if j.UniqueKey != "" {
		var holder string
		row := e.tx.QueryRowContext(ctx, `SELECT id FROM jobs WHERE namespace = ? AND unique_key = ? AND status IN (0, 1, 4)`, e.ns, j.UniqueKey)
		switch err := row.Scan(&holder); {
		case err == nil:
			return api.EnqueueResult{ID: holder, Outcome: api.OutcomeDeduplicated}, nil
		case !errors.Is(err, sql.ErrNoRows):
			return api.EnqueueResult{}, err
		}
	}
	if j.DebounceKey != "" {
		var (
			seq    int64
			holder string
		)
		row := e.tx.QueryRowContext(ctx, `SELECT seq, id FROM jobs WHERE namespace = ? AND debounce_key = ? AND status IN (0, 4)`, e.ns, j.DebounceKey)
		switch err := row.Scan(&seq, &holder); {
		case err == nil:
			if _, err := tx.ExecContext(ctx, `UPDATE jobs SET payload = ?, run_at = ?, status = ? WHERE seq = ?`,
				nullBytes(j.Payload), sqlrow.RunAtMicros(j.RunAt), sqlrow.PendingStatus(j.RunAt, e.now), seq); err != nil {
				return api.EnqueueResult{}, err
			}
			return api.EnqueueResult{ID: holder, Outcome: api.OutcomeCoalesced}, nil
		case !errors.Is(err, sql.ErrNoRows):
			return api.EnqueueResult{}, err
		}
	}
	_, err := tx.ExecContext(ctx, `INSERT INTO jobs (namespace, id, queue, task, payload, priority, run_at, max_attempts,
		status, unique_key, debounce_key, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
		e.ns, j.ID, j.Queue, j.Task, nullBytes(j.Payload), j.Priority, sqlrow.RunAtMicros(j.RunAt), j.MaxAttempts, sqlrow.PendingStatus(j.RunAt, e.now),
		nullString(j.UniqueKey), nullString(j.DebounceKey), nanos(e.now))
	if err != nil {
		return api.EnqueueResult{}, err
	}
	return api.EnqueueResult{ID: j.ID, Outcome: api.OutcomeEnqueued}, nil
}

// replay makes one dead letter pending again, or marks it shed.
func (e *enqueuer) replay(id string, c store.EnqueueCall) (api.EnqueueResult, error) {
	ctx, tx := e.ctx, e.tx
	if err := e.step(); err != nil {
		return api.EnqueueResult{}, err
	}
	var (
		seq       int64
		status    int
		uniqueKey sql.NullString
	)
	row := e.tx.QueryRowContext(ctx, `SELECT seq, status, unique_key FROM jobs WHERE namespace = ? AND id = ?`, e.ns, id)
	switch err := row.Scan(&seq, &status, &uniqueKey); {
	case errors.Is(err, sql.ErrNoRows):
		return api.EnqueueResult{ID: id}, nil
	case err != nil:
		return api.EnqueueResult{}, err
	}
	if status != sqlrow.Dead {
		return api.EnqueueResult{ID: id}, nil
	}
	if c.ShedError != "" {
		_, err := tx.ExecContext(ctx, `UPDATE jobs SET shed = 1, error = ?, dead_meta = ?, unique_key = NULL, debounce_key = NULL WHERE seq = ?`,
			c.ShedError, []byte(admissionShedMeta), seq)
		if err != nil {
			return api.EnqueueResult{}, err
		}
		return api.EnqueueResult{ID: id, Outcome: api.OutcomeShed}, nil
	}
	if uniqueKey.Valid {
		var holder string
		row := e.tx.QueryRowContext(ctx, `SELECT id FROM jobs WHERE namespace = ? AND unique_key = ? AND status IN (0, 1, 4)`, e.ns, uniqueKey.String)
		switch err := row.Scan(&holder); {
		case err == nil:
			return api.EnqueueResult{ID: holder, Outcome: api.OutcomeDeduplicated}, nil
		case !errors.Is(err, sql.ErrNoRows):
			return api.EnqueueResult{}, err
		}
	}
	replays := 0
	if c.AutoRetry {
		replays = 1
	}
	// The debounce key is dropped: the window it stood for is long gone.
	_, err := tx.ExecContext(ctx, `UPDATE jobs SET status = 0, attempt = 0, run_at = ?, error = NULL, dead_meta = NULL,
		finished_at = NULL, lease_until = NULL, worker = NULL, result = NULL, shed = 0, no_retry = 0,
		debounce_key = NULL, dead_replays = dead_replays + ? WHERE seq = ?`, sqlrow.RunAtMicros(e.now), replays, seq)
	if err != nil {
		return api.EnqueueResult{}, err
	}
	return api.EnqueueResult{ID: id, Outcome: api.OutcomeEnqueued}, nil
}

// admissionShedMeta is the dead-letter metadata of shed jobs (docs/quotas.md).
const admissionShedMeta = `{"shed":"quota"}`

// JobEnqueueMany writes a group of calls in one transaction.
func (s *Store) JobEnqueueMany(ctx context.Context, p store.JobEnqueueManyParams) ([][]api.EnqueueResult, error) {
	return s.jobEnqueueMany(ctx, s.tx, p)
}

func (s *Store) jobEnqueueMany(ctx context.Context, run txRunner, p store.JobEnqueueManyParams) ([][]api.EnqueueResult, error) {
	var out [][]api.EnqueueResult
	err := run(ctx, "JobEnqueueMany", func(tx *wtx, step func() error) error {
		out = make([][]api.EnqueueResult, len(p.Calls))
		e := &enqueuer{s: s, ctx: ctx, tx: tx, ns: p.Namespace, now: p.Now, step: step}
		for i, c := range p.Calls {
			res, err := e.call(c)
			if err != nil {
				return err
			}
			out[i] = res
		}
		return e.flush()
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ---------------------------------------------------------------------------
// Claim

const claimCols = `seq, task, priority, run_at`

// The page queries have two fixed shapes so they stay prepared: the keyset
// starts before every job, skipped tasks come as a JSON array, and the page
// size is written into the text. SQLite prepares a statement again whenever
// a parameter its plan depended on changes value, and it plans with the
// LIMIT: a bound LIMIT that varied with each group cost a full parse per
// claim.
const (
	fetchSQL = `SELECT ` + claimCols + ` FROM jobs INDEXED BY jobs_claim
	WHERE namespace = ?1 AND queue = ?2 AND status = 0
	AND (priority < ?3 OR (priority = ?3 AND (run_at > ?4 OR (run_at = ?4 AND seq > ?5))))
	ORDER BY priority DESC, run_at, seq LIMIT `
	fetchSkipSQL = `SELECT ` + claimCols + ` FROM jobs INDEXED BY jobs_claim
	WHERE namespace = ?1 AND queue = ?2 AND status = 0
	AND (priority < ?3 OR (priority = ?3 AND (run_at > ?4 OR (run_at = ?4 AND seq > ?5))))
	AND task NOT IN (SELECT value FROM json_each(?6))
	ORDER BY priority DESC, run_at, seq LIMIT `
)

// claimSQL hands out the jobs of a group: its argument is a JSON array of
// [seq, lease_until, worker]. An empty worker is stored as NULL.
const claimSQL = `UPDATE jobs SET status = 1, attempt = attempt + 1,
	lease_until = c.value ->> 1, worker = NULLIF(c.value ->> 2, '')
	FROM json_each(?) AS c
	WHERE jobs.seq = c.value ->> 0 AND jobs.status = 0
	RETURNING ` + jobCols

// claimOneSQL hands out one job.
const claimOneSQL = `UPDATE jobs SET status = 1, attempt = attempt + 1, lease_until = ?, worker = ?
	WHERE seq = ? AND status = 0 RETURNING ` + jobCols

// ackSQL completes running jobs without a result: its last argument is a
// JSON array of [id, attempt]. CROSS JOIN keeps the array outside, so each
// entry is one index lookup (left alone, the planner walks every running
// job of the namespace per entry).
const ackSQL = `UPDATE jobs SET status = 2, result = NULL, finished_at = ?1, lease_until = NULL
	WHERE seq IN (SELECT j.seq FROM json_each(?3) AS u CROSS JOIN jobs AS j
		WHERE j.namespace = ?2 AND j.id = u.value ->> 0 AND j.status = 1 AND j.attempt = u.value ->> 1)
	RETURNING id`

// appendJSONString appends s as a JSON string.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// appendLease appends a claim's lease (ns) and worker as two JSON array
// elements.
func appendLease(b []byte, c *store.ClaimSpec) []byte {
	b = append(strconv.AppendInt(b, nanos(c.LeaseUntil), 10), ',')
	return appendJSONString(b, c.Worker)
}

// pageSizes are the page sizes a group may read, each its own statement:
// the smallest that holds what the group still wants, plus an eighth for
// jobs the gate holds back. Every row read beyond what is taken is wasted
// work on the hot path, hence the fine steps.
var pageSizes = [...]int{2, 4, 8, 16, 32, 64, 128, 256, 512}

func pageSize(want int) int {
	want += want/8 + 1
	for _, n := range pageSizes {
		if want <= n {
			return n
		}
	}
	return pageSizes[len(pageSizes)-1]
}

func (s *Store) fetch(ctx context.Context, tx *wtx, ns string, c *claimscan.Cursor, skip map[string]bool, want int) error {
	size := pageSize(want)
	lastPri, lastRun, lastSeq := c.After()
	query, args := fetchSQL+strconv.Itoa(size), []any{ns, c.Queue, lastPri, lastRun, lastSeq}
	if len(skip) > 0 {
		tasks := make([]string, 0, len(skip))
		for t := range skip {
			tasks = append(tasks, t)
		}
		b, err := json.Marshal(tasks)
		if err != nil {
			return err
		}
		query, args = fetchSkipSQL+strconv.Itoa(size), append(args, string(b))
	}
	rows, err := tx.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
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
	c.Read(size)
	return nil
}

// promoteSQL makes a queue's due scheduled jobs available before a claim
// reads it.
const promoteSQL = `UPDATE jobs SET status = 0
	WHERE namespace = ? AND queue = ? AND status = 4 AND run_at <= ?`

// headSQL numbers the first jobs of a queue in dispatch order, from slot
// 0: the head a claimHead statement hands out. The page size is written
// into the text, as for fetchSQL.
const headSQL = `SELECT hseq, row_number() OVER (ORDER BY hpri DESC, hrun, hseq) - 1 AS slot
	FROM (SELECT seq AS hseq, priority AS hpri, run_at AS hrun FROM jobs INDEXED BY jobs_claim
		WHERE namespace = ?1 AND queue = ?2 AND status = 0
		ORDER BY priority DESC, run_at, seq LIMIT %d)`

// The claimHead statements hand out the head of one queue in one
// statement, for a group OneQueueUngated allows. claimHeadSameSQL is for
// a group whose claims share a lease and a worker (?3, ?4; one claim, or
// max=1 claims of one step), the first ?5 jobs. claimHeadSlotsSQL gives
// the k-th job the k-th slot's [lease_until, worker] of ?3 (claim after
// claim, one slot per job it may take); the slots are read from the JSON
// once, into a table the join looks up (json_each joined directly would
// parse the array again for every job). RETURNING cannot name the slot,
// so the caller numbers the rows again in dispatch order.
const (
	claimHeadSameSQL = `UPDATE jobs SET status = 1, attempt = attempt + 1, lease_until = ?3, worker = ?4
	FROM (` + headSQL + `) AS h
	WHERE jobs.seq = h.hseq AND h.slot < ?5
	RETURNING ` + jobCols
	claimHeadSlotsSQL = `WITH s(slot, lease, wkr) AS MATERIALIZED (SELECT key, value ->> 0, value ->> 1 FROM json_each(?3))
	UPDATE jobs SET status = 1, attempt = attempt + 1, lease_until = s.lease, worker = NULLIF(s.wkr, '')
	FROM (` + headSQL + `) AS h JOIN s ON s.slot = h.slot
	WHERE jobs.seq = h.hseq
	RETURNING ` + jobCols
)

// headQueue returns the queue of a group claimHead hands out: one
// OneQueueUngated allows, of more than one job (for one, a page read and
// claimOneSQL cost less than numbering a head of one) and at most a page.
func headQueue(p *store.JobClaimManyParams) (string, bool) {
	q, ok := p.OneQueueUngated()
	if !ok || len(p.ExcludeTasks) > 0 {
		return "", false
	}
	n := 0
	for _, c := range p.Claims {
		n += max(c.Max, 0)
	}
	return q, n > 1 && n <= pageSizes[len(pageSizes)-1]
}

// claimHead hands out the group's jobs (headQueue says it may) with a
// claimHead statement, in dispatch order claim after claim.
func claimHead(ctx context.Context, tx *wtx, p *store.JobClaimManyParams, queue string, out [][]store.Job) error {
	var owner []int // slot → claim
	same := true
	for ci, c := range p.Claims {
		for range max(c.Max, 0) {
			owner = append(owner, ci)
		}
		first := &p.Claims[0]
		same = same && c.LeaseUntil.Equal(first.LeaseUntil) && c.Worker == first.Worker
	}
	size := slices.IndexFunc(pageSizes[:], func(n int) bool { return n >= len(owner) })
	var (
		rows *sql.Rows
		err  error
	)
	if c := &p.Claims[0]; same {
		rows, err = tx.QueryContext(ctx, fmt.Sprintf(claimHeadSameSQL, pageSizes[size]),
			p.Namespace, queue, nanos(c.LeaseUntil), nullString(c.Worker), len(owner))
	} else {
		arg := make([]byte, 0, 16+len(owner)*32)
		arg = append(arg, '[')
		for k, ci := range owner {
			if k > 0 {
				arg = append(arg, ',')
			}
			arg = append(appendLease(append(arg, '['), &p.Claims[ci]), ']')
		}
		arg = append(arg, ']')
		rows, err = tx.QueryContext(ctx, fmt.Sprintf(claimHeadSlotsSQL, pageSizes[size]), p.Namespace, queue, string(arg))
	}
	if err != nil {
		return err
	}
	defer rows.Close()
	var jobs []store.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return err
		}
		jobs = append(jobs, j)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if len(jobs) > len(owner) {
		return fmt.Errorf("claim: %d jobs for %d slots", len(jobs), len(owner))
	}
	slices.SortFunc(jobs, func(a, b store.Job) int {
		switch {
		case a.Priority != b.Priority:
			return cmp.Compare(b.Priority, a.Priority)
		case !a.RunAt.Equal(b.RunAt):
			return a.RunAt.Compare(b.RunAt)
		}
		return cmp.Compare(a.Seq, b.Seq)
	})
	for k, j := range jobs {
		out[owner[k]] = append(out[owner[k]], j)
	}
	return nil
}

// JobClaimMany hands out due jobs for each claim in one transaction.
func (s *Store) JobClaimMany(ctx context.Context, p store.JobClaimManyParams) ([][]store.Job, error) {
	return s.jobClaimMany(ctx, s.tx, p)
}

func (s *Store) jobClaimMany(ctx context.Context, run txRunner, p store.JobClaimManyParams) ([][]store.Job, error) {
	var out [][]store.Job
	err := run(ctx, "JobClaimMany", func(tx *wtx, step func() error) error {
		out = make([][]store.Job, len(p.Claims))
		nowRunAt := sqlrow.RunAtMicros(p.Now) // for comparing with run_at
		remaining := 0
		for _, c := range p.Claims {
			remaining += c.Max
		}
		if q, ok := headQueue(&p); ok {
			if err := step(); err != nil {
				return err
			}
			if !p.NoPromote {
				if _, err := tx.ExecContext(ctx, promoteSQL, p.Namespace, q, nowRunAt); err != nil {
					return err
				}
			}
			if err := step(); err != nil {
				return err
			}
			return claimHead(ctx, tx, &p, q, out)
		}
		g := claimscan.NewGroup(&p)
		read := func(c *claimscan.Cursor) error { return s.fetch(ctx, tx, p.Namespace, c, g.SkipTask, remaining) }
		type pick struct {
			seq   int64
			claim int
		}
		var picks []pick
		for ci, claim := range p.Claims {
			if g.Stopped {
				break
			}
			if err := step(); err != nil {
				return err
			}
			for _, q := range claim.Queues {
				if _, made := g.Cursor(q); made && !p.NoPromote {
					// Due scheduled jobs become available before the scan.
					if _, err := tx.ExecContext(ctx, promoteSQL, p.Namespace, q, nowRunAt); err != nil {
						return err
					}
				}
			}
			taken, err := g.Take(claim.Queues, claim.Max, read)
			if err != nil {
				return err
			}
			remaining -= claim.Max
			for _, seq := range taken {
				picks = append(picks, pick{seq: seq, claim: ci})
			}
		}
		if len(picks) == 0 {
			return nil
		}
		if err := step(); err != nil {
			return err
		}
		if len(picks) == 1 {
			// One job: the plain statement is cheaper than the array.
			claim := &p.Claims[picks[0].claim]
			j, err := scanJob(tx.QueryRowContext(ctx, claimOneSQL, nanos(claim.LeaseUntil), nullString(claim.Worker), picks[0].seq))
			if err != nil {
				return fmt.Errorf("claim seq %d: %w", picks[0].seq, err)
			}
			out[picks[0].claim] = []store.Job{j}
			return nil
		}
		// One statement hands out every job the group picked: per-row
		// statements cost more than the rows they write.
		arg := make([]byte, 0, 16+len(picks)*48)
		arg = append(arg, '[')
		for i, pk := range picks {
			if i > 0 {
				arg = append(arg, ',')
			}
			arg = append(strconv.AppendInt(append(arg, '['), pk.seq, 10), ',')
			arg = append(appendLease(arg, &p.Claims[pk.claim]), ']')
		}
		arg = append(arg, ']')
		rows, err := tx.QueryContext(ctx, claimSQL, string(arg))
		if err != nil {
			return err
		}
		defer rows.Close()
		bySeq := make(map[int64]store.Job, len(picks))
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
		for _, pk := range picks {
			j, ok := bySeq[pk.seq]
			if !ok {
				return fmt.Errorf("claim seq %d: %w", pk.seq, sql.ErrNoRows)
			}
			out[pk.claim] = append(out[pk.claim], j)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// ---------------------------------------------------------------------------
// Updates

// JobUpdateMany applies acks, nacks, extensions and expiries.
func (s *Store) JobUpdateMany(ctx context.Context, p store.JobUpdateManyParams) ([]bool, error) {
	return s.jobUpdateMany(ctx, s.tx, p)
}

func (s *Store) jobUpdateMany(ctx context.Context, run txRunner, p store.JobUpdateManyParams) ([]bool, error) {
	var applied []bool
	err := run(ctx, "JobUpdateMany", func(tx *wtx, step func() error) error {
		applied = make([]bool, len(p.Updates))
		now := nanos(p.Now)
		// Plain acks (no result) of jobs named once in the group go in one
		// statement, after the others: per-row statements cost more than
		// the rows they write. A job named twice keeps the order of its
		// updates, row by row.
		times := make(map[string]int, len(p.Updates))
		for _, u := range p.Updates {
			times[u.ID]++
		}
		var acks []int
		for i, u := range p.Updates {
			if u.Kind == store.UpdateComplete && u.Result == nil && times[u.ID] == 1 {
				acks = append(acks, i)
			}
		}
		if len(acks) < 2 {
			acks = nil // one ack: the plain statement is cheaper than the array
		}
		batched := make(map[int]bool, len(acks))
		for _, i := range acks {
			batched[i] = true
		}
		for i, u := range p.Updates {
			if batched[i] {
				continue
			}
			if err := step(); err != nil {
				return err
			}
			var (
				res sql.Result
				err error
			)
			const cond = ` WHERE namespace = ? AND id = ? AND status = 1 AND attempt = ?`
			switch u.Kind {
			case store.UpdateComplete:
				res, err = tx.ExecContext(ctx, `UPDATE jobs SET status = 2, result = ?, finished_at = ?, lease_until = NULL`+cond,
					nullBytes(u.Result), now, p.Namespace, u.ID, u.Attempt)
			case store.UpdateRetry:
				// The job takes its debounce key back only if no other
				// pending job took it while it ran.
				res, err = tx.ExecContext(ctx, `UPDATE jobs SET status = ?, run_at = ?, error = ?, lease_until = NULL, worker = NULL,
					debounce_key = CASE WHEN debounce_key IS NOT NULL AND EXISTS (SELECT 1 FROM jobs h
						WHERE h.namespace = jobs.namespace AND h.debounce_key = jobs.debounce_key AND h.status IN (0, 4))
						THEN NULL ELSE debounce_key END`+cond,
					sqlrow.PendingStatus(u.RunAt, p.Now), sqlrow.RunAtMicros(u.RunAt), nullString(u.Error), p.Namespace, u.ID, u.Attempt)
			case store.UpdateDead:
				noRetry := 0
				if u.NoRetry {
					noRetry = 1
				}
				res, err = tx.ExecContext(ctx, `UPDATE jobs SET status = 3, error = ?, finished_at = ?, lease_until = NULL, no_retry = ?`+cond,
					nullString(u.Error), now, noRetry, p.Namespace, u.ID, u.Attempt)
			case store.UpdateExtend:
				res, err = tx.ExecContext(ctx, `UPDATE jobs SET lease_until = ?`+cond,
					nanos(u.LeaseUntil), p.Namespace, u.ID, u.Attempt)
			case store.UpdateRelease:
				res, err = tx.ExecContext(ctx, `UPDATE jobs SET status = CASE WHEN run_at <= ? THEN 0 ELSE 4 END, attempt = attempt - 1,
					lease_until = NULL, worker = NULL,
					debounce_key = CASE WHEN debounce_key IS NOT NULL AND EXISTS (SELECT 1 FROM jobs h
						WHERE h.namespace = jobs.namespace AND h.debounce_key = jobs.debounce_key AND h.status IN (0, 4))
						THEN NULL ELSE debounce_key END`+cond,
					sqlrow.RunAtMicros(p.Now), p.Namespace, u.ID, u.Attempt)
			default:
				return fmt.Errorf("update %d: unknown kind %d", i, u.Kind)
			}
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			applied[i] = n > 0
		}
		if len(acks) == 0 {
			return nil
		}
		if err := step(); err != nil {
			return err
		}
		arg := make([]byte, 0, 16+len(acks)*40)
		arg = append(arg, '[')
		for k, i := range acks {
			if k > 0 {
				arg = append(arg, ',')
			}
			arg = append(arg, '[')
			arg = appendJSONString(arg, p.Updates[i].ID)
			arg = append(arg, ',')
			arg = strconv.AppendInt(arg, p.Updates[i].Attempt, 10)
			arg = append(arg, ']')
		}
		arg = append(arg, ']')
		rows, err := tx.QueryContext(ctx, ackSQL, now, p.Namespace, string(arg))
		if err != nil {
			return err
		}
		defer rows.Close()
		done := make(map[string]bool, len(acks))
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				return err
			}
			done[id] = true
		}
		if err := rows.Err(); err != nil {
			return err
		}
		for _, i := range acks {
			applied[i] = done[p.Updates[i].ID]
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return applied, nil
}

// ---------------------------------------------------------------------------
// Reads

// JobGet returns one job.
func (s *Store) JobGet(ctx context.Context, namespace, id string) (store.Job, error) {
	return s.jobGet(ctx, s.r, namespace, id)
}

func (s *Store) jobGet(ctx context.Context, q querier, namespace, id string) (store.Job, error) {
	row := q.QueryRowContext(ctx, `SELECT `+jobCols+` FROM jobs WHERE namespace = ? AND id = ?`, namespace, id)
	j, err := scanJob(row)
	if errors.Is(err, sql.ErrNoRows) {
		return j, fmt.Errorf("job %q: %w", id, store.ErrNotFound)
	}
	if err != nil {
		return j, fmt.Errorf("sqlite: JobGet: %w", err)
	}
	return j, nil
}

// JobList lists jobs newest first.
func (s *Store) JobList(ctx context.Context, p store.JobListParams) ([]store.Job, error) {
	query, args, err := listSQL(p)
	if err != nil {
		return nil, err
	}
	return s.jobs(ctx, "JobList", query, args...)
}

// listSQL builds JobList's statement. The planner walks jobs_ns_seq newest
// first and stops at the limit; running jobs, few by nature, are read
// through their own index and sorted instead, so a namespace with a long
// history does not walk it to find them.
func listSQL(p store.JobListParams) (string, []any, error) {
	var b strings.Builder
	args := []any{p.Namespace}
	from := ` FROM jobs`
	if p.Status == api.StatusRunning {
		from = ` FROM jobs INDEXED BY jobs_running`
	}
	b.WriteString(`SELECT ` + jobCols + from + ` WHERE namespace = ?`)
	if p.Status != "" {
		code, ok := sqlrow.StatusCode(p.Status)
		if !ok {
			return "", nil, fmt.Errorf("sqlite: JobList: unknown status %q", p.Status)
		}
		if code == sqlrow.Pending {
			b.WriteString(` AND status IN (0, 4)`)
		} else {
			// A literal: a partial index's condition must be provable
			// from the statement's text.
			b.WriteString(` AND status = ` + strconv.Itoa(code))
		}
	}
	if p.Queue != "" {
		b.WriteString(` AND queue = ?`)
		args = append(args, p.Queue)
	}
	if p.Shed != nil {
		b.WriteString(` AND shed = ?`)
		if *p.Shed {
			args = append(args, 1)
		} else {
			args = append(args, 0)
		}
	}
	if p.BeforeSeq > 0 {
		b.WriteString(` AND seq < ?`)
		args = append(args, p.BeforeSeq)
	}
	limit := p.Limit
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	b.WriteString(` ORDER BY seq DESC LIMIT ?`)
	args = append(args, limit)
	return b.String(), args, nil
}

func (s *Store) jobs(ctx context.Context, op, query string, args ...any) ([]store.Job, error) {
	return queryJobs(ctx, s.r, op, query, args...)
}

func queryJobs(ctx context.Context, q querier, op, query string, args ...any) ([]store.Job, error) {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	defer rows.Close()
	var out []store.Job
	for rows.Next() {
		j, err := scanJob(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: %s: %w", op, err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: %s: %w", op, err)
	}
	return out, nil
}

// JobCount counts by status, each status through its own partial index.
func (s *Store) JobCount(ctx context.Context, namespace string) (store.Counts, error) {
	// One read transaction: the counts are one snapshot.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return store.Counts{}, fmt.Errorf("sqlite: JobCount: %w", err)
	}
	defer tx.Rollback()
	return jobCount(ctx, tx, namespace)
}

// jobCount counts inside q's transaction.
func jobCount(ctx context.Context, tx querier, namespace string) (store.Counts, error) {
	var (
		c         store.Counts
		scheduled int64
	)
	for _, q := range []struct {
		dst   *int64
		query string
	}{
		{&c.Pending, `SELECT COUNT(*) FROM jobs INDEXED BY jobs_claim WHERE namespace = ? AND status = 0`},
		{&scheduled, `SELECT COUNT(*) FROM jobs INDEXED BY jobs_scheduled WHERE namespace = ? AND status = 4`},
		{&c.Running, `SELECT COUNT(*) FROM jobs INDEXED BY jobs_running WHERE namespace = ? AND status = 1`},
		{&c.Completed, `SELECT COUNT(*) FROM jobs INDEXED BY jobs_ns_finished WHERE namespace = ? AND status IN (2, 3) AND status = 2`},
		{&c.Dead, `SELECT COUNT(*) FROM jobs INDEXED BY jobs_ns_finished WHERE namespace = ? AND status IN (2, 3) AND status = 3`},
	} {
		if err := tx.QueryRowContext(ctx, q.query, namespace).Scan(q.dst); err != nil {
			return c, fmt.Errorf("sqlite: JobCount: %w", err)
		}
	}
	c.Pending += scheduled
	return c, nil
}

// JobNextRunAt returns the earliest run_at among the queues' scheduled jobs.
func (s *Store) JobNextRunAt(ctx context.Context, namespace string, queues []string) (time.Time, bool, error) {
	return jobNextRunAt(ctx, s.r, namespace, queues)
}

func jobNextRunAt(ctx context.Context, r querier, namespace string, queues []string) (time.Time, bool, error) {
	var (
		next  time.Time
		found bool
	)
	if len(queues) == 0 {
		var n sql.NullInt64
		if err := r.QueryRowContext(ctx, `SELECT MIN(run_at) FROM jobs INDEXED BY jobs_scheduled_ns
			WHERE namespace = ? AND status = 4`, namespace).Scan(&n); err != nil {
			return time.Time{}, false, fmt.Errorf("sqlite: JobNextRunAt: %w", err)
		}
		return sqlrow.FromRunAtMicros(n.Int64), n.Valid, nil
	}
	for _, q := range queues {
		var n sql.NullInt64
		if err := r.QueryRowContext(ctx, `SELECT MIN(run_at) FROM jobs INDEXED BY jobs_scheduled
			WHERE namespace = ? AND queue = ? AND status = 4`, namespace, q).Scan(&n); err != nil {
			return time.Time{}, false, fmt.Errorf("sqlite: JobNextRunAt: %w", err)
		}
		if t := sqlrow.FromRunAtMicros(n.Int64); n.Valid && (!found || t.Before(next)) {
			next, found = t, true
		}
	}
	return next, found, nil
}

// JobListRunning lists a namespace's running jobs.
func (s *Store) JobListRunning(ctx context.Context, namespace string) ([]store.Job, error) {
	return queryJobs(ctx, s.r, "JobListRunning", listRunningSQL, namespace)
}

// listRunningSQL names its index: left alone, the planner walks the whole
// namespace in seq order through jobs_ns_seq to save sorting a few rows.
const listRunningSQL = `SELECT ` + jobCols + ` FROM jobs INDEXED BY jobs_running WHERE namespace = ? AND status = 1 ORDER BY seq`

// JobRunningNamespaces lists the namespaces with running jobs.
func (s *Store) JobRunningNamespaces(ctx context.Context) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT DISTINCT namespace FROM jobs INDEXED BY jobs_running WHERE status = 1`)
	if err != nil {
		return nil, fmt.Errorf("sqlite: JobRunningNamespaces: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var ns string
		if err := rows.Scan(&ns); err != nil {
			return nil, fmt.Errorf("sqlite: JobRunningNamespaces: %w", err)
		}
		out = append(out, ns)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: JobRunningNamespaces: %w", err)
	}
	return out, nil
}

// JobListDeadRetryable lists dead letters due for an auto-retry.
func (s *Store) JobListDeadRetryable(ctx context.Context, p store.JobListDeadRetryableParams) ([]store.Job, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = -1 // SQLite: no limit
	}
	return s.jobs(ctx, "JobListDeadRetryable", deadRetryableSQL, p.Namespace, p.Queue, nanos(p.DeadBefore), p.MaxReplays, limit)
}

// deadRetryableSQL names its index, as listRunningSQL does.
const deadRetryableSQL = `SELECT ` + jobCols + ` FROM jobs INDEXED BY jobs_ns_finished
	WHERE namespace = ? AND status IN (2, 3) AND status = 3 AND queue = ? AND finished_at <= ? AND shed = 0 AND no_retry = 0 AND dead_replays < ?
	ORDER BY finished_at, seq LIMIT ?`

// ---------------------------------------------------------------------------
// Retention

// JobDeleteFinishedBefore deletes up to Limit finished jobs older than Before.
func (s *Store) JobDeleteFinishedBefore(ctx context.Context, p store.JobDeleteFinishedBeforeParams) (int64, error) {
	code, err := sqlrow.FinishedStatus(p.Status)
	if err != nil {
		return 0, fmt.Errorf("sqlite: %w", err)
	}
	var n int64
	err = s.tx(ctx, "JobDeleteFinishedBefore", func(tx *wtx, step func() error) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM jobs WHERE seq IN (
			SELECT seq FROM jobs INDEXED BY jobs_finished WHERE status IN (2, 3) AND status = ? AND finished_at < ?
			AND namespace NOT IN (SELECT value FROM json_each(?)) ORDER BY finished_at LIMIT ?)`,
			code, nanos(p.Before), skipJSON(p.Skip), p.Limit)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// JobDeleteOverCeiling deletes a namespace's oldest finished jobs beyond Keep.
func (s *Store) JobDeleteOverCeiling(ctx context.Context, p store.JobDeleteOverCeilingParams) (int64, error) {
	code, err := sqlrow.FinishedStatus(p.Status)
	if err != nil {
		return 0, fmt.Errorf("sqlite: %w", err)
	}
	var n int64
	err = s.tx(ctx, "JobDeleteOverCeiling", func(tx *wtx, step func() error) error {
		var total int64
		if err := tx.QueryRowContext(ctx, `SELECT COUNT(*) FROM jobs INDEXED BY jobs_ns_finished WHERE namespace = ? AND status IN (2, 3) AND status = ?`,
			p.Namespace, code).Scan(&total); err != nil {
			return err
		}
		over := total - p.Keep
		if over <= 0 {
			return nil
		}
		if over > int64(p.Limit) {
			over = int64(p.Limit)
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM jobs WHERE seq IN (
			SELECT seq FROM jobs INDEXED BY jobs_ns_finished WHERE namespace = ? AND status IN (2, 3) AND status = ? ORDER BY finished_at, seq LIMIT ?)`,
			p.Namespace, code, over)
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	return n, err
}

// skipJSON is namespaces as a JSON array, for json_each.
func skipJSON(namespaces []string) string {
	b, _ := json.Marshal(append([]string{}, namespaces...))
	return string(b)
}
