package redis

import (
	"context"
	"fmt"
	"hash/maphash"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/store"
	"github.com/flexiq/flexiq/store/internal/claimscan"

	goredis "github.com/redis/go-redis/v9"
)

var statuses = []api.Status{api.StatusPending, api.StatusRunning, api.StatusCompleted, api.StatusDead}

// ---------------------------------------------------------------------------
// Enqueue

// maxTaskLen is the longest task name a dispatch-order member can carry
// (its length is 4 hex digits); the API allows 128 bytes.
const maxTaskLen = 0xffff

// JobEnqueueMany writes a group of calls in one script.
func (s *Store) JobEnqueueMany(ctx context.Context, p store.JobEnqueueManyParams) ([][]api.EnqueueResult, error) {
	const op = "JobEnqueueMany"
	out := make([][]api.EnqueueResult, len(p.Calls))
	n := 0
	for i, c := range p.Calls {
		if len(c.ReplayIDs) > 0 {
			out[i] = make([]api.EnqueueResult, len(c.ReplayIDs))
		} else {
			out[i] = make([]api.EnqueueResult, len(c.Jobs))
		}
		n += len(out[i])
	}
	now, nowUs := nsStr(p.Now), usStr(p.Now)
	args := make([]any, 0, 6+n*enqueueShortNF)
	args = append(args, enc(p.Namespace), p.Namespace, now, nowUs, runAtKey(p.Now), s.formatArg())
	// last is the job of the last full item: a job after it that shares
	// its settings goes as a short item (scriptEnqueue).
	var last *store.NewJob
	var lastShed string // last's call's shed error: its kind, and the S items' extra
	for _, c := range p.Calls {
		if len(c.ReplayIDs) > 0 {
			kind, extra := "R", flag(c.AutoRetry)
			if c.ShedError != "" {
				kind, extra = "X", c.ShedError
			}
			for _, id := range c.ReplayIDs {
				args = append(args, kind, id, "", "", "", "", "", "", "", "", "", "", "", "", extra)
			}
			last = nil // a replay is a full item too: short items after it would take its settings
			continue
		}
		kind, short := "J", "j"
		if c.ShedError != "" {
			kind, short = "S", "s"
		}
		for i := range c.Jobs {
			j := &c.Jobs[i]
			if len(j.Task) > maxTaskLen {
				return nil, wrap(op, fmt.Errorf("job %q: task name of %d bytes, over %d", j.ID, len(j.Task), maxTaskLen))
			}
			var payload any = ""
			hasPayload := j.Payload != nil
			if hasPayload {
				payload = j.Payload
			}
			jk, js := kind, short
			if kind == "J" && j.Generated && !j.Keyed() {
				// An id of ours, no key: the script asks whether the
				// group's first such job is stored, not each one
				// (scriptEnqueue, "Generated ids").
				jk, js = "G", "g"
			}
			if last != nil && lastShed == c.ShedError && sharesSettings(last, j) {
				args = append(args, js, j.ID, flag(hasPayload), payload)
				continue
			}
			runAt := usStr(j.RunAt)
			args = append(args, jk, j.ID, j.Queue, j.Task, flag(hasPayload), payload,
				strconv.FormatInt(j.Priority, 10), runAt, strconv.FormatInt(j.MaxAttempts, 10),
				j.UniqueKey, j.DebounceKey, flag(due(j.RunAt, p.Now)), runAt, orderPrefix(j.Priority, j.RunAt), c.ShedError)
			last, lastShed = j, c.ShedError
		}
	}
	if err := s.fault(op, 1); err != nil {
		return nil, err
	}
	if n == 0 {
		return out, nil
	}
	v, err := s.runFenced(ctx, scriptEnqueue, p.Fence, args...)
	if err != nil {
		return nil, wrap(op, err)
	}
	a, err := toSlice(v)
	if err != nil || len(a) == 0 {
		return nil, wrap(op, fmt.Errorf("reply of %d items for %d jobs: %v", len(a), n, err))
	}
	codes, err := toString(a[0])
	if err != nil || len(codes) != n {
		return nil, wrap(op, fmt.Errorf("reply of %d outcomes for %d jobs: %v", len(codes), n, err))
	}
	held, k := a[1:], 0
	for i, c := range p.Calls {
		for x := range out[i] {
			res, rest, err := enqueueResult(codes[k], itemID(c, x), held)
			if err != nil {
				return nil, wrap(op, err)
			}
			out[i][x], held = res, rest
			k++
		}
	}
	if len(held) > 0 {
		return nil, wrap(op, fmt.Errorf("reply of %d holders more than its outcomes name", len(held)))
	}
	return out, nil
}

// itemID is the id of call c's x-th item of scriptEnqueue: a replayed
// id, or a new job's.
func itemID(c store.EnqueueCall, x int) string {
	if len(c.ReplayIDs) > 0 {
		return c.ReplayIDs[x]
	}
	return c.Jobs[x].ID
}

// enqueueOutcomes are scriptEnqueue's outcome letters.
var enqueueOutcomes = map[byte]api.Outcome{
	'e': api.OutcomeEnqueued, 'd': api.OutcomeDeduplicated, 'c': api.OutcomeCoalesced, 's': api.OutcomeShed, '-': "",
}

// enqueueResult reads one item's outcome letter from scriptEnqueue's
// reply: lower-case, the item's own id; upper-case, the next of held.
func enqueueResult(code byte, id string, held []any) (api.EnqueueResult, []any, error) {
	holder, letter := code >= 'A' && code <= 'Z', code
	if holder {
		letter += 'a' - 'A'
	}
	outcome, ok := enqueueOutcomes[letter]
	if !ok {
		return api.EnqueueResult{}, nil, fmt.Errorf("unknown outcome %q", code)
	}
	if !holder {
		return api.EnqueueResult{ID: id, Outcome: outcome}, held, nil
	}
	if len(held) == 0 {
		return api.EnqueueResult{}, nil, fmt.Errorf("outcome %q names a holder the reply lacks", code)
	}
	h, err := toString(held[0])
	if err != nil {
		return api.EnqueueResult{}, nil, err
	}
	return api.EnqueueResult{ID: h, Outcome: outcome}, held[1:], nil
}

// sharesSettings says new job j can go as a short item after full item
// last (scriptEnqueue): it holds neither key, and everything else the
// script writes but its id and payload is last's. Its due flag, score and
// order key follow from its priority and run_at.
func sharesSettings(last, j *store.NewJob) bool {
	return j.UniqueKey == "" && j.DebounceKey == "" && j.Queue == last.Queue && j.Task == last.Task &&
		j.Priority == last.Priority && j.RunAt.Equal(last.RunAt) && j.MaxAttempts == last.MaxAttempts
}

// ---------------------------------------------------------------------------
// Claim

const (
	// promoteChunk bounds the scheduled jobs one script makes available.
	// The script adds them in one ZADD of 2*promoteChunk arguments, which
	// Lua's unpack must reach (it stops near 8000).
	promoteChunk = 1000
	// maxClaimAttempts bounds the re-plans of a claim group that keeps
	// meeting concurrent claimers.
	maxClaimAttempts = 100
)

// conflictPause waits before the next plan of a claim group whose attempt
// (0-based) met a concurrent claimer: not at all for the first three,
// then a random while of up to 100 µs per attempt, at most 5 ms.
func conflictPause(ctx context.Context, attempt int) error {
	if attempt < 3 {
		return nil
	}
	d := time.Duration(rand.N(min(attempt, 50))+1) * 100 * time.Microsecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cursor walks one queue's available jobs in dispatch order, a page at a
// time.
type cursor struct {
	queue string
	page  []member
	pos   int
	last  string // the last member read: the next page starts after it
	done  bool
}

// claimState is what a claim group has learnt from Allow; it outlives a
// re-plan so that Allow is not asked twice about a job it took.
type claimState struct {
	claimscan.Gate
	taken map[string]bool // ids Allow took
}

// claimPlan is one attempt's choice: the jobs each claim takes.
type claimPlan struct {
	chosen [][]claimed
	n      int
}

type claimed struct {
	queue string
	m     member
}

// JobClaimMany hands out due jobs for each claim, the group in one script.
func (s *Store) JobClaimMany(ctx context.Context, p store.JobClaimManyParams) ([][]store.Job, error) {
	const op = "JobClaimMany"
	mu := &s.claimMu[maphash.String(s.claimSeed, p.Namespace)%uint64(len(s.claimMu))]
	mu.Lock()
	defer mu.Unlock()

	st := &claimState{Gate: claimscan.NewGate(&p), taken: map[string]bool{}}
	var queues []string
	seen := map[string]bool{}
	total := 0
	for _, c := range p.Claims {
		total += max(c.Max, 0)
		for _, q := range c.Queues {
			if !seen[q] {
				seen[q] = true
				queues = append(queues, q)
			}
		}
	}
	step := 0
	fault := func() error { step++; return s.fault(op, step) }
	E := enc(p.Namespace)
	if q, ok := p.OneQueueUngated(); ok && len(p.ExcludeTasks) == 0 {
		if err := fault(); err != nil {
			return nil, err
		}
		out, err := s.claimHead(ctx, E, &p, q)
		return out, wrap(op, err)
	}
	page := min(2*total+16, 1000)
	for attempt := 0; attempt < maxClaimAttempts; attempt++ {
		var cursors map[string]*cursor
		if len(queues) > 0 {
			var err error
			if cursors, err = s.claimHeads(ctx, E, p.Fence, p.Now, queues, page, !p.NoPromote); err != nil {
				return nil, wrap(op, err)
			}
		}
		if err := fault(); err != nil {
			return nil, err
		}
		st.Stopped = false // Allow says so again if it still holds
		plan, err := s.planClaim(ctx, E, p, st, cursors, page)
		if err != nil {
			return nil, wrap(op, err)
		}
		out := make([][]store.Job, len(p.Claims))
		if plan.n == 0 {
			return out, nil
		}
		if err := fault(); err != nil {
			return nil, err
		}
		args := make([]any, 0, 2+4*len(p.Claims)+3*plan.n)
		args = append(args, E, strconv.Itoa(len(p.Claims)))
		for i, c := range p.Claims {
			args = append(args, strconv.Itoa(len(plan.chosen[i])), nsStr(c.LeaseUntil), usStr(c.LeaseUntil), c.Worker)
		}
		for _, cs := range plan.chosen {
			for _, c := range cs {
				args = append(args, c.m.id, c.queue, c.m.raw)
			}
		}
		v, err := s.runFenced(ctx, scriptClaim, p.Fence, args...)
		if err != nil {
			return nil, wrap(op, err)
		}
		a, err := toSlice(v)
		if err != nil || len(a) == 0 {
			return nil, wrap(op, fmt.Errorf("bad reply: %v", err))
		}
		if head, _ := toString(a[0]); head == "conflict" {
			// Plan again: a job was taken or moved meanwhile. After a few
			// conflicts in a row, wait a random while first, so that two
			// nodes claiming at once (while a namespace moves) do not keep
			// taking turns at planning and losing: on a loaded machine one
			// of them could otherwise lose every round.
			if err := conflictPause(ctx, attempt); err != nil {
				return nil, wrap(op, err)
			}
			continue
		}
		if len(a) != 1+plan.n {
			return nil, wrap(op, fmt.Errorf("claimed %d jobs of %d", len(a)-1, plan.n))
		}
		jobs, err := jobsFrom(a[1:], p.Namespace)
		if err != nil {
			return nil, wrap(op, err)
		}
		for i, cs := range plan.chosen {
			if len(cs) > 0 {
				out[i], jobs = jobs[:len(cs):len(cs)], jobs[len(cs):]
			}
		}
		return out, nil
	}
	return nil, wrap(op, fmt.Errorf("gave up after %d attempts: the queues keep changing under the claim", maxClaimAttempts))
}

// claimHead hands out a group OneQueueUngated allows with scriptClaimHead:
// one script, which takes claim after claim the queue's next jobs.
func (s *Store) claimHead(ctx context.Context, E string, p *store.JobClaimManyParams, queue string) ([][]store.Job, error) {
	chunk := 0
	if !p.NoPromote {
		chunk = promoteChunk
	}
	args := make([]any, 0, 5+4*len(p.Claims))
	args = append(args, E, usStr(p.Now), strconv.Itoa(chunk), queue, strconv.Itoa(len(p.Claims)))
	for _, c := range p.Claims {
		args = append(args, strconv.Itoa(max(c.Max, 0)), nsStr(c.LeaseUntil), usStr(c.LeaseUntil), c.Worker)
	}
	for {
		v, err := s.runFenced(ctx, scriptClaimHead, p.Fence, args...)
		if err != nil {
			return nil, err
		}
		a, err := toSlice(v)
		if err != nil || len(a) == 0 {
			return nil, fmt.Errorf("bad reply: %v", err)
		}
		if head, _ := toString(a[0]); head == "more" {
			continue // another chunk of due scheduled jobs to make available
		}
		jobs, err := jobsFrom(a[1:], p.Namespace)
		if err != nil {
			return nil, err
		}
		out := make([][]store.Job, len(p.Claims))
		for i, c := range p.Claims {
			n := min(max(c.Max, 0), len(jobs))
			if n > 0 {
				out[i], jobs = jobs[:n:n], jobs[n:]
			}
		}
		return out, nil
	}
}

// claimHeads makes the queues' due scheduled jobs available (when
// promote) and returns a cursor on each queue holding its first page. Its
// script checks the claim's fence, as the claim script does: both write.
func (s *Store) claimHeads(ctx context.Context, E string, fence *store.Fence, now time.Time, queues []string, page int, promote bool) (map[string]*cursor, error) {
	chunk := 0
	if promote {
		chunk = promoteChunk
	}
	args := make([]any, 0, 4+len(queues))
	args = append(args, E, usStr(now), strconv.Itoa(chunk), strconv.Itoa(page))
	for _, q := range queues {
		args = append(args, q)
	}
	for {
		v, err := s.runFenced(ctx, scriptPromote, fence, args...)
		if err != nil {
			return nil, err
		}
		a, err := toSlice(v)
		if err != nil || len(a) != 1+len(queues) {
			return nil, fmt.Errorf("bad promote reply: %v", err)
		}
		if more, _ := toInt(a[0]); more != 0 {
			continue
		}
		cursors := make(map[string]*cursor, len(queues))
		for i, q := range queues {
			c := &cursor{queue: q}
			if err := c.fill(a[1+i], page); err != nil {
				return nil, err
			}
			cursors[q] = c
		}
		return cursors, nil
	}
}

// fill makes a page read from Redis the cursor's page.
func (c *cursor) fill(v any, page int) error {
	a, err := toSlice(v)
	if err != nil {
		return err
	}
	c.page, c.pos = c.page[:0], 0
	for _, x := range a {
		raw, err := toString(x)
		if err != nil {
			return err
		}
		m, err := parseMember(raw)
		if err != nil {
			return err
		}
		c.page = append(c.page, m)
	}
	c.done = len(c.page) < page
	if len(c.page) > 0 {
		c.last = c.page[len(c.page)-1].raw
	}
	return nil
}

// head returns the cursor's next job not of a skipped task, reading the
// next page when it needs to; nil at the end of the queue.
func (s *Store) head(ctx context.Context, E string, c *cursor, skipTask map[string]bool, page int) (*member, error) {
	for {
		for c.pos < len(c.page) && skipTask[c.page[c.pos].task] {
			c.pos++
		}
		if c.pos < len(c.page) {
			return &c.page[c.pos], nil
		}
		if c.done {
			return nil, nil
		}
		v, err := s.c.Do(ctx, "ZRANGE", s.p+"av:"+E+":"+enc(c.queue), "("+c.last, "+", "BYLEX", "LIMIT", 0, page).Result()
		if err != nil {
			return nil, err
		}
		if err := c.fill(v, page); err != nil {
			return nil, err
		}
	}
}

// planClaim walks the claims' queues in dispatch order asking Allow, as
// the SQLite backend does, and returns the jobs each claim takes.
func (s *Store) planClaim(ctx context.Context, E string, p store.JobClaimManyParams, st *claimState, cursors map[string]*cursor, page int) (claimPlan, error) {
	plan := claimPlan{chosen: make([][]claimed, len(p.Claims))}
	for ci, claim := range p.Claims {
		if st.Stopped {
			break
		}
		var mine []*cursor
		for _, q := range claim.Queues {
			c := cursors[q]
			dup := false
			for _, x := range mine {
				dup = dup || x == c
			}
			if c != nil && !dup {
				mine = append(mine, c)
			}
		}
		for len(plan.chosen[ci]) < claim.Max && !st.Stopped {
			var (
				best *cursor
				bm   *member
			)
			for _, c := range mine {
				if st.SkipQueue[c.queue] {
					continue
				}
				m, err := s.head(ctx, E, c, st.SkipTask, page)
				if err != nil {
					return plan, err
				}
				if m != nil && (bm == nil || m.raw < bm.raw) {
					best, bm = c, m
				}
			}
			if best == nil {
				break
			}
			best.pos++
			if !st.taken[bm.id] {
				if !st.Ask(best.queue, bm.task) {
					continue
				}
				st.taken[bm.id] = true
			}
			plan.chosen[ci] = append(plan.chosen[ci], claimed{queue: best.queue, m: *bm})
			plan.n++
		}
	}
	return plan, nil
}

// ---------------------------------------------------------------------------
// Updates

// JobUpdateMany applies acks, nacks, extensions and expiries in one script.
func (s *Store) JobUpdateMany(ctx context.Context, p store.JobUpdateManyParams) ([]bool, error) {
	const op = "JobUpdateMany"
	args := make([]any, 0, 4+updateNF*len(p.Updates))
	args = append(args, enc(p.Namespace), nsStr(p.Now), usStr(p.Now), s.formatArg())
	for i, u := range p.Updates {
		var kind string
		switch u.Kind {
		case store.UpdateComplete:
			kind = "C"
		case store.UpdateRetry:
			kind = "R"
		case store.UpdateDead:
			kind = "D"
		case store.UpdateExtend:
			kind = "X"
		case store.UpdateRelease:
			kind = "G"
		default:
			return nil, wrap(op, fmt.Errorf("update %d: unknown kind %d", i, u.Kind))
		}
		var result any = ""
		if u.Result != nil {
			result = u.Result
		}
		args = append(args, u.ID, strconv.FormatInt(u.Attempt, 10), kind, flag(u.Result != nil), result, u.Error,
			usStr(u.RunAt), flag(due(u.RunAt, p.Now)), usStr(u.RunAt), runAtKey(u.RunAt),
			nsStr(u.LeaseUntil), usStr(u.LeaseUntil), flag(u.NoRetry))
	}
	if err := s.fault(op, 1); err != nil {
		return nil, err
	}
	applied := make([]bool, len(p.Updates))
	if len(p.Updates) == 0 {
		return applied, nil
	}
	v, err := s.runFenced(ctx, scriptUpdate, p.Fence, args...)
	if err != nil {
		return nil, wrap(op, err)
	}
	a, err := toSlice(v)
	if err != nil || len(a) != len(p.Updates) {
		return nil, wrap(op, fmt.Errorf("reply of %d results for %d updates: %v", len(a), len(p.Updates), err))
	}
	for i, x := range a {
		n, err := toInt(x)
		if err != nil {
			return nil, wrap(op, err)
		}
		applied[i] = n == 1
	}
	return applied, nil
}

// ---------------------------------------------------------------------------
// Reads

// JobGet returns one job.
func (s *Store) JobGet(ctx context.Context, namespace, id string) (store.Job, error) {
	m, err := s.c.HGetAll(ctx, s.p+"j:"+enc(namespace)+":"+id).Result()
	if err != nil {
		return store.Job{}, wrap("JobGet", err)
	}
	if len(m) == 0 {
		return store.Job{}, fmt.Errorf("job %q: %w", id, store.ErrNotFound)
	}
	m["id"] = id // a lean hash leaves it to the key
	j, err := jobFromMap(m, namespace)
	return j, wrap("JobGet", err)
}

// JobList lists jobs newest (highest Seq) first.
func (s *Store) JobList(ctx context.Context, p store.JobListParams) ([]store.Job, error) {
	const op = "JobList"
	sts := statuses
	if p.Status != "" {
		ok := false
		for _, x := range statuses {
			ok = ok || x == p.Status
		}
		if !ok {
			return nil, wrap(op, fmt.Errorf("unknown status %q", p.Status))
		}
		sts = []api.Status{p.Status}
	}
	max := "+inf"
	if p.BeforeSeq > 0 {
		max = "(" + strconv.FormatInt(p.BeforeSeq, 10)
	}
	shed := ""
	if p.Shed != nil {
		shed = flag(*p.Shed)
	}
	args := []any{enc(p.Namespace), max, strconv.Itoa(max0(p.Limit)), p.Queue, shed}
	for _, x := range sts {
		args = append(args, string(x))
	}
	v, err := s.run(ctx, scriptList, args...)
	if err != nil {
		return nil, wrap(op, err)
	}
	jobs, err := jobsFrom(v, p.Namespace)
	return jobs, wrap(op, err)
}

func max0(n int) int {
	if n < 0 {
		return 0
	}
	return n
}

// JobCount counts a namespace's jobs from its status indexes, in one
// MULTI so the counts are one snapshot.
func (s *Store) JobCount(ctx context.Context, namespace string) (store.Counts, error) {
	E := enc(namespace)
	var n [4]*goredis.IntCmd
	_, err := s.c.TxPipelined(ctx, func(pipe goredis.Pipeliner) error {
		for i, st := range statuses {
			n[i] = pipe.ZCard(ctx, s.p+"st:"+E+":"+string(st))
		}
		return nil
	})
	if err != nil {
		return store.Counts{}, wrap("JobCount", err)
	}
	return store.Counts{Pending: n[0].Val(), Running: n[1].Val(), Completed: n[2].Val(), Dead: n[3].Val()}, nil
}

// JobNextRunAt returns the earliest run_at among the queues' (or the
// namespace's) scheduled jobs.
func (s *Store) JobNextRunAt(ctx context.Context, namespace string, queues []string) (time.Time, bool, error) {
	args := []any{enc(namespace)}
	for _, q := range queues {
		args = append(args, q)
	}
	v, err := s.run(ctx, scriptNextRunAt, args...)
	if err != nil {
		return time.Time{}, false, wrap("JobNextRunAt", err)
	}
	a, err := toSlice(v)
	if err != nil {
		return time.Time{}, false, wrap("JobNextRunAt", err)
	}
	var (
		next  time.Time
		found bool
	)
	for _, x := range a {
		str, err := toString(x)
		if err != nil {
			return time.Time{}, false, wrap("JobNextRunAt", err)
		}
		var t time.Time
		switch {
		case strings.HasPrefix(str, "u"):
			t, err = parseMicros(str[1:])
		case strings.HasPrefix(str, "n"):
			t, err = parseTime(str[1:])
		default:
			err = fmt.Errorf("bad run_at %q", str)
		}
		if err != nil {
			return time.Time{}, false, wrap("JobNextRunAt", err)
		}
		if !found || t.Before(next) {
			next, found = t, true
		}
	}
	return next, found, nil
}

// JobListRunning lists a namespace's running jobs.
func (s *Store) JobListRunning(ctx context.Context, namespace string) ([]store.Job, error) {
	v, err := s.run(ctx, scriptListRunning, enc(namespace))
	if err != nil {
		return nil, wrap("JobListRunning", err)
	}
	jobs, err := jobsFrom(v, namespace)
	return jobs, wrap("JobListRunning", err)
}

// JobRunningNamespaces lists the namespaces with running jobs: those whose
// running index (P run:E) exists, since Redis drops an empty sorted set.
// It scans the keyspace (about one round trip per 1 000 keys), which is
// fine for what calls it: a node taking over partitions, or starting.
func (s *Store) JobRunningNamespaces(ctx context.Context) ([]string, error) {
	head := s.p + "run:"
	var out []string
	iter := s.c.ScanType(ctx, 0, globEscape(head)+"*", 1000, "zset").Iterator()
	for iter.Next(ctx) {
		rest := strings.TrimPrefix(iter.Val(), head)
		n, ns, ok := strings.Cut(rest, ":")
		if !ok {
			continue
		}
		if l, err := strconv.Atoi(n); err == nil && l == len(ns) {
			out = append(out, ns)
		}
	}
	if err := iter.Err(); err != nil {
		return nil, wrap("JobRunningNamespaces", err)
	}
	return out, nil
}

// globEscape quotes what SCAN's MATCH pattern would read as a wildcard.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// JobListDeadRetryable lists dead letters due for an auto-retry.
func (s *Store) JobListDeadRetryable(ctx context.Context, p store.JobListDeadRetryableParams) ([]store.Job, error) {
	v, err := s.run(ctx, scriptDeadRetryable, enc(p.Namespace), p.Queue, usStr(p.DeadBefore),
		strconv.FormatInt(p.MaxReplays, 10), strconv.Itoa(max0(p.Limit)))
	if err != nil {
		return nil, wrap("JobListDeadRetryable", err)
	}
	jobs, err := jobsFrom(v, p.Namespace)
	return jobs, wrap("JobListDeadRetryable", err)
}

// ---------------------------------------------------------------------------
// Retention

func finishedStatus(st api.Status) error {
	if st != api.StatusCompleted && st != api.StatusDead {
		return fmt.Errorf("retention works on completed or dead jobs, not %q", st)
	}
	return nil
}

// limitArg is a batch limit for a script: a negative one means none.
func limitArg(n int) string {
	if n < 0 {
		return "-1"
	}
	return strconv.Itoa(n)
}

// JobDeleteFinishedBefore deletes up to Limit finished jobs older than Before.
func (s *Store) JobDeleteFinishedBefore(ctx context.Context, p store.JobDeleteFinishedBeforeParams) (int64, error) {
	const op = "JobDeleteFinishedBefore"
	if err := finishedStatus(p.Status); err != nil {
		return 0, wrap(op, err)
	}
	if err := s.fault(op, 1); err != nil {
		return 0, err
	}
	limit := p.Limit
	if limit < 0 {
		limit = 1 << 30 // no limit
	}
	args := []any{string(p.Status), usStr(p.Before), strconv.Itoa(limit), strconv.Itoa(limit + store.MaxSkipScan)}
	for _, ns := range p.Skip {
		args = append(args, enc(ns))
	}
	v, err := s.run(ctx, scriptDeleteBefore, args...)
	if err != nil {
		return 0, wrap(op, err)
	}
	n, err := toInt(v)
	return n, wrap(op, err)
}

// JobDeleteOverCeiling deletes a namespace's oldest finished jobs beyond Keep.
func (s *Store) JobDeleteOverCeiling(ctx context.Context, p store.JobDeleteOverCeilingParams) (int64, error) {
	const op = "JobDeleteOverCeiling"
	if err := finishedStatus(p.Status); err != nil {
		return 0, wrap(op, err)
	}
	if err := s.fault(op, 1); err != nil {
		return 0, err
	}
	v, err := s.run(ctx, scriptDeleteOverCeiling, enc(p.Namespace), string(p.Status), strconv.FormatInt(p.Keep, 10), limitArg(p.Limit))
	if err != nil {
		return 0, wrap(op, err)
	}
	n, err := toInt(v)
	return n, wrap(op, err)
}
