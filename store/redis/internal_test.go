package redis

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/internal/testserver"
	"github.com/flexiq/flexiq/store"
	"github.com/flexiq/flexiq/store/sqlite"

	goredis "github.com/redis/go-redis/v9"
)

var testPrefixes atomic.Int64

func openTest(t testing.TB, url string) *Store {
	t.Helper()
	s, err := Open(context.Background(), url, Options{Prefix: fmt.Sprintf("fqi%d:", testPrefixes.Add(1))})
	if err != nil {
		t.Fatal(err)
	}
	s.SetJobFormat(store.JobFormat)
	t.Cleanup(func() { s.Close() })
	return s
}

// splitJobKey is the namespace and id of a job key after its prefix and
// "j:": <len(namespace)>:<namespace>:<id>.
func splitJobKey(k string) (namespace, id string, ok bool) {
	n, rest, ok := strings.Cut(k, ":")
	l, err := strconv.Atoi(n)
	if !ok || err != nil || l < 0 || len(rest) < l+1 || rest[l] != ':' {
		return "", "", false
	}
	return rest[:l], rest[l+1:], true
}

// checkInvariants reads every key of s and checks that the indexes are
// exactly what the job hashes say they should be.
func checkInvariants(t testing.TB, s *Store) {
	t.Helper()
	ctx := context.Background()
	var keys []string
	iter := s.c.Scan(ctx, 0, s.p+"*", 1000).Iterator()
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	// want: index key → member → score ("" for hash values: the value).
	want := map[string]map[string]string{}
	add := func(key, member, score string) {
		if want[key] == nil {
			want[key] = map[string]string{}
		}
		want[key][member] = score
	}
	got := map[string]map[string]string{}
	type dkHold struct{ E, dk string }
	pendingDK := map[dkHold]bool{}
	for _, k := range keys {
		rest := strings.TrimPrefix(k, s.p)
		switch {
		case strings.HasPrefix(rest, "j:"):
			m, err := s.c.HGetAll(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			ns, id, ok := splitJobKey(strings.TrimPrefix(rest, "j:"))
			if !ok {
				t.Fatalf("job key %q is not j:<len>:<namespace>:<id>", k)
			}
			// A hash holds its namespace, id and priority, or none of
			// them (a lean hash: store.JobFormatLean; its order key, ak
			// or am, checked below, holds the priority).
			full := m["namespace"] != "" && m["id"] != "" && m["priority"] != ""
			if lean := m["namespace"] == "" && m["id"] == "" && m["priority"] == ""; full == lean {
				t.Errorf("%s: namespace %q, id %q, priority %q: want all three or none", k, m["namespace"], m["id"], m["priority"])
			}
			if full && (m["namespace"] != ns || m["id"] != id) {
				t.Errorf("job %s/%s stored under %q", m["namespace"], m["id"], k)
			}
			m["id"] = id
			j, err := jobFromMap(m, ns)
			if err != nil {
				t.Fatalf("%s: %v", k, err)
			}
			E := enc(j.Namespace)
			seq := strconv.FormatInt(j.Seq, 10)
			sh := hex16(uint64(j.Seq)) + j.ID
			add(s.p+"st:"+E+":"+string(j.Status), j.ID, seq)
			ak := orderPrefix(j.Priority, j.RunAt)
			am := ak + hex16(uint64(j.Seq)) + fmt.Sprintf("%04x", len(j.Task)) + j.Task + j.ID
			// The hash keeps the order key (ak); one written before ak
			// keeps the whole member (am) instead, never both.
			if gotAK, legacy := m["ak"], m["am"]; (gotAK == "") == (legacy == "") || (gotAK != "" && gotAK != ak) || (legacy != "" && legacy != am) {
				t.Errorf("job %s/%s: ak %q, am %q; want ak %q or am %q", j.Namespace, j.ID, gotAK, legacy, ak, am)
			}
			switch j.Status {
			case api.StatusPending:
				// Available or scheduled; which one depends on when it was
				// last looked at, so record it as either.
				add("pending:"+s.p+"av:"+E+":"+enc(j.Queue)+"|"+s.p+"sc:"+E+":"+enc(j.Queue), j.ID, am+"|"+strconv.FormatInt(j.RunAt.UnixMicro(), 10))
				if j.DebounceKey != "" {
					pendingDK[dkHold{E, j.DebounceKey}] = true
				}
			case api.StatusRunning:
				add(s.p+"run:"+E, j.ID, strconv.FormatInt(j.LeaseUntil.UnixMicro(), 10))
				if j.LeaseUntil.IsZero() {
					t.Errorf("running job %s/%s has no lease", j.Namespace, j.ID)
				}
			case api.StatusCompleted, api.StatusDead:
				fin := strconv.FormatInt(j.FinishedAt.UnixMicro(), 10)
				add(s.p+"fin:"+E+":"+string(j.Status), sh, fin)
				add(s.p+"fin:"+string(j.Status), E+":"+j.ID, fin)
				if j.Status == api.StatusDead && !j.Shed && !j.NoRetry {
					add(s.p+"rt:"+E+":"+enc(j.Queue), sh, fin)
				}
			default:
				t.Errorf("job %s/%s: status %q", j.Namespace, j.ID, j.Status)
			}
			if j.UniqueKey != "" && (j.Status == api.StatusPending || j.Status == api.StatusRunning) {
				if prev, dup := want[s.p+"uk:"+E][j.UniqueKey]; dup {
					t.Errorf("unique key %q held by live jobs %s and %s", j.UniqueKey, prev, j.ID)
				}
				add(s.p+"uk:"+E, j.UniqueKey, j.ID)
			}
			if j.Shed && (j.UniqueKey != "" || j.DebounceKey != "") {
				t.Errorf("shed job %s/%s keeps keys", j.Namespace, j.ID)
			}
		case strings.HasPrefix(rest, "uk:"), strings.HasPrefix(rest, "dk:"):
			m, err := s.c.HGetAll(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			got[k] = m
		case strings.HasPrefix(rest, "st:"), strings.HasPrefix(rest, "av:"), strings.HasPrefix(rest, "sc:"),
			strings.HasPrefix(rest, "scn:"), strings.HasPrefix(rest, "run:"), strings.HasPrefix(rest, "fin:"), strings.HasPrefix(rest, "rt:"):
			zs, err := s.c.ZRangeWithScores(ctx, k, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]string{}
			for _, z := range zs {
				m[z.Member.(string)] = strconv.FormatFloat(z.Score, 'f', -1, 64)
			}
			got[k] = m
		}
	}
	// Pending jobs: in exactly one of their queue's two indexes.
	for k, jobs := range want {
		pair, ok := strings.CutPrefix(k, "pending:")
		if !ok {
			continue
		}
		avKey, scKey, _ := strings.Cut(pair, "|")
		for id, v := range jobs {
			am, us, _ := strings.Cut(v, "|")
			_, inAv := got[avKey][am]
			sc, inSc := got[scKey][id]
			if inAv == inSc {
				t.Errorf("pending job %s: in available %t, in scheduled %t; want exactly one", id, inAv, inSc)
			}
			if inAv {
				add(avKey, am, "0")
			}
			if inSc {
				if sc != us {
					t.Errorf("scheduled job %s: score %s, want %s", id, sc, us)
				}
				add(scKey, id, us)
				// scKey is P sc:E:Q; the namespace's index is P scn:E.
				E := strings.TrimPrefix(scKey, s.p+"sc:")
				n, _ := strconv.Atoi(E[:strings.IndexByte(E, ':')])
				add(s.p+"scn:"+E[:strings.IndexByte(E, ':')+1+n], id, us)
			}
		}
		delete(want, k)
	}
	// Debounce keys: each held by a pending job with that key, and every
	// pending job's key held by one of them.
	for k, m := range got {
		rest, ok := strings.CutPrefix(k, s.p+"dk:")
		if !ok {
			continue
		}
		for dk, id := range m {
			j, err := s.JobGet(ctx, nsOfE(rest), id)
			if err != nil || j.Status != api.StatusPending || j.DebounceKey != dk {
				t.Errorf("debounce key %q held by %s (%+v, %v), not a pending job with that key", dk, id, j.Status, err)
			}
			delete(pendingDK, dkHold{rest, dk})
		}
		delete(got, k)
	}
	for h := range pendingDK {
		t.Errorf("debounce key %q of namespace %s has pending jobs but no holder", h.dk, h.E)
	}
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if !maps.Equal(want[k], got[k]) {
			t.Errorf("index %s:\n\thas  %v\n\twant %v", k, got[k], want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			t.Errorf("index %s should not exist: %v", k, got[k])
		}
	}
}

func nsOfE(E string) string {
	_, ns, _ := strings.Cut(E, ":")
	return ns
}

// TestDifferential runs random operations against this store and the
// SQLite reference backend and requires the same results and the same
// stored state after each, and this store's indexes to stay exact.
func TestDifferential(t *testing.T) {
	url := testserver.Redis(t)
	ops := 200
	if testing.Short() {
		ops = 50
	}
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			ref, err := sqlite.Open(t.Context(), ":memory:", sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer ref.Close()
			d := &differ{t: t, rs: openTest(t, url), ref: ref, r: rand.New(rand.NewPCG(seed, seed*7919)),
				now: time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)}
			for i := range ops {
				d.step(i)
				if t.Failed() {
					t.Fatalf("diverged at op %d (seed %d):\n%s", i, seed, strings.Join(d.log, "\n"))
				}
			}
		})
	}
}

type differ struct {
	t   *testing.T
	rs  *Store
	ref *sqlite.Store
	r   *rand.Rand
	now time.Time
	gen int
	log []string
}

var (
	diffNS     = []string{"a", "b"}
	diffQueues = []string{"q1", "q2", "q3"}
	diffTasks  = []string{"t1", "t2"}
)

func (d *differ) pick(xs []string) string { return xs[d.r.IntN(len(xs))] }

func (d *differ) ms(lo, hi int) time.Duration {
	return time.Duration(lo+d.r.IntN(hi-lo+1)) * time.Millisecond
}

func (d *differ) step(i int) {
	t, ctx := d.t, d.t.Context()
	d.now = d.now.Add(d.ms(0, 3000))
	// As if nodes of older builds came and went: job hashes are then
	// written with their whole member (am, format 0), in full (1) or in
	// an older lean format; JobFormat+1 asks for more than this build
	// writes, which is JobFormat.
	d.rs.SetJobFormat(d.r.IntN(store.JobFormat + 2))
	ns := d.pick(diffNS)
	switch k := d.r.IntN(100); {
	case k < 40:
		p := store.JobEnqueueManyParams{Namespace: ns, Now: d.now}
		for range 1 + d.r.IntN(3) {
			var c store.EnqueueCall
			if d.r.IntN(100) < 15 {
				c.ShedError = "quota: shed"
			}
			if d.r.IntN(100) < 30 {
				for range 1 + d.r.IntN(3) {
					c.ReplayIDs = append(c.ReplayIDs, fmt.Sprintf("j%d", d.r.IntN(12)))
				}
				c.AutoRetry = d.r.IntN(2) == 0
			} else {
				for range 1 + d.r.IntN(4) {
					j := store.NewJob{
						ID:          fmt.Sprintf("j%d", d.r.IntN(12)),
						Queue:       d.pick(diffQueues),
						Task:        d.pick(diffTasks),
						Priority:    int64(d.r.IntN(5) - 2),
						RunAt:       d.now.Add(d.ms(-5000, 5000)),
						MaxAttempts: int64(d.r.IntN(3)),
						UniqueKey:   d.pick([]string{"", "", "u1", "u2"}),
						DebounceKey: d.pick([]string{"", "", "", "d1"}),
					}
					if d.r.IntN(4) > 0 {
						j.Payload = fmt.Appendf(nil, `{"n":%d}`, d.r.IntN(100))
					}
					if d.r.IntN(4) == 0 {
						d.gen++
						j.ID, j.Generated = fmt.Sprintf("g%04d", d.gen), true
					}
					c.Jobs = append(c.Jobs, j)
				}
			}
			p.Calls = append(p.Calls, c)
		}
		got, err1 := d.rs.JobEnqueueMany(ctx, p)
		want, err2 := d.ref.JobEnqueueMany(ctx, p)
		d.same(i, fmt.Sprintf("enqueue %+v", p), got, err1, want, err2)
	case k < 70:
		p := store.JobClaimManyParams{Namespace: ns, Now: d.now}
		for range 1 + d.r.IntN(3) {
			c := store.ClaimSpec{Max: d.r.IntN(4), LeaseUntil: d.now.Add(d.ms(1000, 60000)), Worker: d.pick([]string{"", "w1", "w2"})}
			for range 1 + d.r.IntN(3) {
				c.Queues = append(c.Queues, d.pick(diffQueues))
			}
			p.Claims = append(p.Claims, c)
		}
		if d.r.IntN(5) == 0 {
			p.ExcludeTasks = []string{d.pick(diffTasks)}
		}
		// NoPromote promises that no delayed job is due: set it only where
		// both stores say so.
		if d.r.IntN(3) == 0 {
			p.NoPromote = true
			for _, s := range []store.Store{d.rs, d.ref} {
				next, ok, err := s.JobNextRunAt(ctx, ns, nil)
				if err != nil {
					t.Fatal(err)
				}
				p.NoPromote = p.NoPromote && (!ok || next.After(d.now))
			}
		}
		var verdicts []store.ClaimVerdict
		for range 64 {
			v := store.ClaimTake
			switch x := d.r.IntN(100); {
			case x < 8:
				v = store.ClaimSkipTask
			case x < 14:
				v = store.ClaimSkipQueue
			case x < 18:
				v = store.ClaimStop
			}
			verdicts = append(verdicts, v)
		}
		run := func(s store.Store) ([][]store.Job, []string, error) {
			var asked []string
			q := p
			q.Allow = func(queue, task string) store.ClaimVerdict {
				asked = append(asked, queue+"/"+task)
				return verdicts[(len(asked)-1)%len(verdicts)]
			}
			res, err := s.JobClaimMany(ctx, q)
			return res, asked, err
		}
		got, gotAsked, err1 := run(d.rs)
		want, wantAsked, err2 := run(d.ref)
		d.same(i, fmt.Sprintf("claim %+v", p), stripSeqs(got), err1, stripSeqs(want), err2)
		if !slices.Equal(gotAsked, wantAsked) {
			t.Errorf("op %d: Allow asked %v, reference %v", i, gotAsked, wantAsked)
		}
	case k < 90:
		running, err := d.ref.JobListRunning(ctx, ns)
		if err != nil {
			t.Fatal(err)
		}
		p := store.JobUpdateManyParams{Namespace: ns, Now: d.now}
		for range 1 + d.r.IntN(4) {
			u := store.JobUpdate{ID: fmt.Sprintf("j%d", d.r.IntN(12)), Attempt: int64(1 + d.r.IntN(2)),
				Kind: store.UpdateKind(1 + d.r.IntN(4)), RunAt: d.now.Add(d.ms(0, 5000)), LeaseUntil: d.now.Add(d.ms(1000, 60000)),
				Error: d.pick([]string{"", "boom"}), NoRetry: d.r.IntN(3) == 0}
			if d.r.IntN(3) > 0 {
				u.Result = []byte(`{"ok":true}`)
			}
			if len(running) > 0 && d.r.IntN(4) > 0 {
				j := running[d.r.IntN(len(running))]
				u.ID, u.Attempt = j.ID, j.Attempt
				if j.DebounceKey != "" && u.Kind == store.UpdateRetry {
					// SQLite's unique debounce index refuses a retry while
					// a newer pending job holds the key; not compared.
					u.Kind = store.UpdateDead
				}
			} else if u.Kind == store.UpdateRetry {
				u.Kind = store.UpdateExtend
			}
			p.Updates = append(p.Updates, u)
		}
		got, err1 := d.rs.JobUpdateMany(ctx, p)
		want, err2 := d.ref.JobUpdateMany(ctx, p)
		d.same(i, fmt.Sprintf("update %+v", p), got, err1, want, err2)
	case k < 95:
		p := store.JobDeleteFinishedBeforeParams{Status: api.Status(d.pick([]string{"completed", "dead"})), Before: d.now.Add(-d.ms(0, 20000)), Limit: 1000}
		got, err1 := d.rs.JobDeleteFinishedBefore(ctx, p)
		want, err2 := d.ref.JobDeleteFinishedBefore(ctx, p)
		d.same(i, fmt.Sprintf("delete before %+v", p), got, err1, want, err2)
	default:
		p := store.JobDeleteOverCeilingParams{Namespace: ns, Status: api.Status(d.pick([]string{"completed", "dead"})), Keep: int64(d.r.IntN(4)), Limit: 1 + d.r.IntN(3)}
		got, err1 := d.rs.JobDeleteOverCeiling(ctx, p)
		want, err2 := d.ref.JobDeleteOverCeiling(ctx, p)
		d.same(i, fmt.Sprintf("delete over ceiling %+v", p), got, err1, want, err2)
	}
	if d.r.IntN(4) == 0 {
		d.makeLegacy(ns)
	}
	d.compareState(i)
	checkInvariants(t, d.rs)
}

// makeLegacy rewrites one job hash of ns the way a store from before the
// order key (ak) wrote it, with its whole dispatch-order member (am) and
// every field a lean hash leaves out, so that every later operation meets
// such hashes too.
func (d *differ) makeLegacy(ns string) {
	ctx, c := d.t.Context(), d.rs.c
	keys, err := c.Keys(ctx, d.rs.p+"j:"+enc(ns)+":*").Result()
	if err != nil {
		d.t.Fatal(err)
	}
	slices.Sort(keys)
	d.r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
	for _, k := range keys {
		m, err := c.HMGet(ctx, k, "ak", "seq", "task", "created_at").Result()
		if err != nil {
			d.t.Fatal(err)
		}
		if m[0] == nil {
			continue
		}
		seq, err := strconv.ParseUint(m[1].(string), 10, 64)
		if err != nil {
			d.t.Fatal(err)
		}
		_, id, _ := splitJobKey(strings.TrimPrefix(k, d.rs.p+"j:"))
		ak, task, created := m[0].(string), m[2].(string), m[3].(string)
		am := ak + hex16(seq) + fmt.Sprintf("%04x", len(task)) + task + id
		prio, err := priorityOf(map[string]string{"ak": ak})
		if err != nil {
			d.t.Fatal(err)
		}
		if _, err := c.TxPipelined(ctx, func(p goredis.Pipeliner) error {
			p.HDel(ctx, k, "ak")
			p.HSet(ctx, k, "am", am, "namespace", ns, "id", id, "priority", prio)
			p.HSetNX(ctx, k, "attempt", 0)
			p.HSetNX(ctx, k, "max_attempts", 0)
			p.HSetNX(ctx, k, "run_at_us", created[:len(created)-3]) // created_at (ns) cut to µs
			return nil
		}); err != nil {
			d.t.Fatal(err)
		}
		d.log = append(d.log, fmt.Sprintf("legacy hash %s", id))
		return
	}
}

func stripSeqs(res [][]store.Job) [][]store.Job {
	for _, js := range res {
		for i := range js {
			js[i].Seq = 0
		}
	}
	return res
}

func (d *differ) same(i int, what string, got any, err1 error, want any, err2 error) {
	d.t.Helper()
	if !strings.HasPrefix(what, "state:") {
		d.log = append(d.log, fmt.Sprintf("%d %s: %+v", i, what, want))
	}
	if (err1 == nil) != (err2 == nil) {
		d.t.Errorf("op %d %s: error %v, reference %v", i, what, err1, err2)
		return
	}
	if g, w := fmt.Sprintf("%+v", got), fmt.Sprintf("%+v", want); g != w {
		d.t.Errorf("op %d %s:\n\tgot  %s\n\twant %s", i, what, g, w)
	}
}

// compareState compares everything a reader can see of both namespaces.
func (d *differ) compareState(i int) {
	t, ctx := d.t, d.t.Context()
	for _, ns := range diffNS {
		for _, st := range []api.Status{"", api.StatusPending, api.StatusRunning, api.StatusCompleted, api.StatusDead} {
			p := store.JobListParams{Namespace: ns, Status: st, Limit: 1000}
			got, err1 := d.rs.JobList(ctx, p)
			want, err2 := d.ref.JobList(ctx, p)
			d.same(i, fmt.Sprintf("state: list %+v", p), stripSeqs([][]store.Job{got}), err1, stripSeqs([][]store.Job{want}), err2)
		}
		gc, err1 := d.rs.JobCount(ctx, ns)
		wc, err2 := d.ref.JobCount(ctx, ns)
		d.same(i, "state: counts "+ns, gc, err1, wc, err2)
		gr, err1 := d.rs.JobListRunning(ctx, ns)
		wr, err2 := d.ref.JobListRunning(ctx, ns)
		byID := func(a, b store.Job) int { return strings.Compare(a.ID, b.ID) }
		slices.SortFunc(gr, byID)
		slices.SortFunc(wr, byID)
		d.same(i, "state: running "+ns, stripSeqs([][]store.Job{gr}), err1, stripSeqs([][]store.Job{wr}), err2)
		for _, q := range append(slices.Clone(diffQueues), "") {
			var queues []string
			if q != "" {
				queues = []string{q}
			}
			// Either store may still report a due job that a claim has not
			// moved yet ("it may lie in the past"), and they move them at
			// slightly different times: compare future run_ats only.
			gn, gok, err1 := d.rs.JobNextRunAt(ctx, ns, queues)
			wn, wok, err2 := d.ref.JobNextRunAt(ctx, ns, queues)
			if err1 != nil || err2 != nil {
				t.Fatalf("JobNextRunAt: %v / %v", err1, err2)
			}
			gf, wf := gok && gn.After(d.now), wok && wn.After(d.now)
			if (gf && wf && !gn.Equal(wn)) || (gf && !wok) || (wf && !gok) {
				t.Errorf("op %d: JobNextRunAt(%s, %q) = %v %t, reference %v", i, ns, queues, gn, gok, wn)
			}
			if q == "" {
				continue
			}
			p := store.JobListDeadRetryableParams{Namespace: ns, Queue: q, DeadBefore: d.now.Add(-d.ms(0, 5000)), MaxReplays: 2, Limit: 5}
			gd, err1 := d.rs.JobListDeadRetryable(ctx, p)
			wd, err2 := d.ref.JobListDeadRetryable(ctx, p)
			d.same(i, fmt.Sprintf("state: dead retryable %+v", p), stripSeqs([][]store.Job{gd}), err1, stripSeqs([][]store.Job{wd}), err2)
		}
	}
}

// TestClaimConflictAcrossStores claims from two Store values on the same
// keys at once (as two nodes would): they never hand out a job twice, hand
// out every job, and never hand out a job Allow did not take. (A group
// planned again after a conflict may have had Allow take jobs that another
// claimer got: the gate then counted more than was handed out, which only
// makes that group more cautious.)
func TestClaimConflictAcrossStores(t *testing.T) {
	url := testserver.Redis(t)
	a := openTest(t, url)
	b, err := Open(t.Context(), url, Options{Prefix: a.p})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const jobs = 400
	var batch []store.NewJob
	for i := range jobs {
		batch = append(batch, store.NewJob{ID: fmt.Sprintf("j%03d", i), Queue: []string{"q1", "q2"}[i%2], Task: "t",
			Priority: int64(i % 5), RunAt: base.Add(-time.Minute)})
	}
	if _, err := a.JobEnqueueMany(t.Context(), store.JobEnqueueManyParams{Namespace: "ns", Now: base, Calls: []store.EnqueueCall{{Jobs: batch}}}); err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		owner = map[string]int{}
		wg    sync.WaitGroup
	)
	for w := range 8 {
		s := []*Store{a, b}[w%2]
		wg.Go(func() {
			for {
				took := 0
				res, err := s.JobClaimMany(t.Context(), store.JobClaimManyParams{
					Namespace: "ns", Now: base,
					Claims: []store.ClaimSpec{{Queues: []string{"q1", "q2"}, Max: 1 + w%4, LeaseUntil: base.Add(time.Minute), Worker: strconv.Itoa(w)},
						{Queues: []string{"q2"}, Max: 2, LeaseUntil: base.Add(time.Minute), Worker: strconv.Itoa(w)}},
					Allow: func(string, string) store.ClaimVerdict { took++; return store.ClaimTake },
				})
				if err != nil {
					t.Errorf("worker %d: %v", w, err)
					return
				}
				n := len(res[0]) + len(res[1])
				if n > took {
					t.Errorf("worker %d: Allow took %d, %d handed out", w, took, n)
				}
				if n == 0 {
					return
				}
				mu.Lock()
				for _, js := range res {
					for _, j := range js {
						if prev, dup := owner[j.ID]; dup {
							t.Errorf("job %s handed to workers %d and %d", j.ID, prev, w)
						}
						owner[j.ID] = w
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(owner) != jobs {
		t.Errorf("handed out %d distinct jobs, want %d", len(owner), jobs)
	}
	checkInvariants(t, a)
}

// TestPromotionInChunks makes more scheduled jobs due at once than one
// promotion script moves, and claims them in dispatch order.
func TestPromotionInChunks(t *testing.T) {
	url := testserver.Redis(t)
	// Gated, the claim promotes in scriptPromote; ungated, in the one
	// script that hands out the head of the queue.
	for _, gated := range []bool{false, true} {
		t.Run(fmt.Sprintf("gated=%t", gated), func(t *testing.T) { promotionInChunks(t, url, gated) })
	}
}

func promotionInChunks(t *testing.T, url string, gated bool) {
	s := openTest(t, url)
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	const n = 2*promoteChunk + 17
	var batch []store.NewJob
	for i := range n {
		batch = append(batch, store.NewJob{ID: fmt.Sprintf("j%05d", i), Queue: "q", Task: "t",
			Priority: int64(i % 3), RunAt: base.Add(time.Duration(n-i) * time.Millisecond)})
	}
	if _, err := s.JobEnqueueMany(t.Context(), store.JobEnqueueManyParams{Namespace: "ns", Now: base, Calls: []store.EnqueueCall{{Jobs: batch}}}); err != nil {
		t.Fatal(err)
	}
	next, ok, err := s.JobNextRunAt(t.Context(), "ns", []string{"q"})
	if err != nil || !ok || !next.Equal(base.Add(time.Millisecond)) {
		t.Fatalf("JobNextRunAt = %v %t %v, want %v", next, ok, err, base.Add(time.Millisecond))
	}
	now := base.Add(time.Hour)
	p := store.JobClaimManyParams{Namespace: "ns", Now: now,
		Claims: []store.ClaimSpec{{Queues: []string{"q"}, Max: 5, LeaseUntil: now.Add(time.Minute)}}}
	if gated {
		p.Allow = func(string, string) store.ClaimVerdict { return store.ClaimTake }
	}
	res, err := s.JobClaimMany(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	// Priority 2 first (i%3 == 2), earliest run_at (largest i) first.
	var got []string
	for _, j := range res[0] {
		got = append(got, j.ID)
	}
	want := []string{fmt.Sprintf("j%05d", n-1-(n-1-2)%3), fmt.Sprintf("j%05d", n-1-(n-1-2)%3-3)}
	if len(got) != 5 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("claimed %v, want %v…", got, want)
	}
	if _, ok, _ := s.JobNextRunAt(t.Context(), "ns", []string{"q"}); ok {
		t.Error("JobNextRunAt still finds a scheduled job after every job became due and was promoted")
	}
	c, err := s.JobCount(t.Context(), "ns")
	if err != nil || c.Pending != n-5 || c.Running != 5 {
		t.Errorf("JobCount = %+v, %v", c, err)
	}
	checkInvariants(t, s)
}

// TestExtremes stores priorities, times and names at the edges of their
// ranges and checks dispatch order and round trips.
func TestExtremes(t *testing.T) {
	s := openTest(t, testserver.Redis(t))
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	ns := "ns:with:colons\x00and a nul " + strings.Repeat("é", 40)
	jobs := []store.NewJob{
		{ID: "min", Queue: "q:1", Task: "a", Priority: -1 << 63, RunAt: base.Add(-time.Hour)},
		{ID: "max", Queue: "q:1", Task: "b.c:d-e", Priority: 1<<63 - 1, RunAt: base},
		{ID: "max-earlier", Queue: "q:1", Task: strings.Repeat("t", 128), Priority: 1<<63 - 1, RunAt: base.Add(-time.Nanosecond)},
		{ID: "zero", Queue: "q:1", Task: "a", RunAt: time.Unix(0, 0)},
		{ID: "neg", Queue: "q:1", Task: "a", RunAt: time.Unix(-1, 0)},
		{ID: "id with spaces:and:colons/" + strings.Repeat("x", 90), Queue: "q:1", Task: "a", Priority: 1, RunAt: base,
			Payload: []byte("{\"s\":\"\\u0000 \xe2\x82\xac\"}")},
	}
	if _, err := s.JobEnqueueMany(t.Context(), store.JobEnqueueManyParams{Namespace: ns, Now: base, Calls: []store.EnqueueCall{{Jobs: jobs}}}); err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		got, err := s.JobGet(t.Context(), ns, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		// run_at is kept to the microsecond: max-earlier's comes back a
		// microsecond before max's, still ahead of it.
		if got.Priority != j.Priority || !got.RunAt.Equal(j.RunAt.Truncate(time.Microsecond)) || got.Task != j.Task || got.Queue != j.Queue || string(got.Payload) != string(j.Payload) || got.Namespace != ns {
			t.Errorf("job %s came back as %+v", j.ID, got)
		}
	}
	res, err := s.JobClaimMany(t.Context(), store.JobClaimManyParams{Namespace: ns, Now: base,
		Claims: []store.ClaimSpec{{Queues: []string{"q:1"}, Max: 10, LeaseUntil: base.Add(time.Minute)}}})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, j := range res[0] {
		got = append(got, j.ID)
	}
	want := []string{"max-earlier", "max", jobs[5].ID, "neg", "zero", "min"}
	if !slices.Equal(got, want) {
		t.Errorf("dispatch order %q, want %q", got, want)
	}
	checkInvariants(t, s)
}

// A job hash written before run_at_us holds run_at in nanoseconds: it
// still reads back, and the next write of its run_at moves it to
// run_at_us and drops the old field.
func TestRunAtWrittenInNanosecondsStillReads(t *testing.T) {
	s := openTest(t, testserver.Redis(t))
	ctx := t.Context()
	base := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	later := base.Add(time.Hour + 123456*time.Microsecond)
	if _, err := s.JobEnqueueMany(ctx, store.JobEnqueueManyParams{Namespace: "ns", Now: base, Calls: []store.EnqueueCall{{Jobs: []store.NewJob{
		{ID: "old", Queue: "q", Task: "t", RunAt: later, DebounceKey: "dk"},
	}}}}); err != nil {
		t.Fatal(err)
	}
	jk := s.p + "j:" + enc("ns") + ":old"
	if err := s.c.HSet(ctx, jk, "run_at", strconv.FormatInt(later.UnixNano(), 10)).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.c.HDel(ctx, jk, "run_at_us").Err(); err != nil {
		t.Fatal(err)
	}
	if j, err := s.JobGet(ctx, "ns", "old"); err != nil || !j.RunAt.Equal(later) {
		t.Fatalf("JobGet = %v, %v; want run_at %v", j.RunAt, err, later)
	}
	if next, ok, err := s.JobNextRunAt(ctx, "ns", nil); err != nil || !ok || !next.Equal(later) {
		t.Fatalf("JobNextRunAt = %v, %t, %v; want %v", next, ok, err, later)
	}
	checkInvariants(t, s)

	far := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
	res, err := s.JobEnqueueMany(ctx, store.JobEnqueueManyParams{Namespace: "ns", Now: base, Calls: []store.EnqueueCall{{Jobs: []store.NewJob{
		{ID: "new", Queue: "q", Task: "t", RunAt: far, DebounceKey: "dk"},
	}}}})
	if err != nil || res[0][0].Outcome != api.OutcomeCoalesced {
		t.Fatalf("coalesce: %v, %v", res, err)
	}
	m, err := s.c.HGetAll(ctx, jk).Result()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := m["run_at"]; ok || m["run_at_us"] != strconv.FormatInt(far.UnixMicro(), 10) {
		t.Errorf("after a coalesce the hash holds run_at %q, run_at_us %q; want only run_at_us %d", m["run_at"], m["run_at_us"], far.UnixMicro())
	}
	checkInvariants(t, s)
}

// A small job's hash stays in Redis's compact encoding (a listpack, about
// half the memory of a hash table) through enqueue, claim and ack: none of
// its values is over hash-max-listpack-value (64 bytes by default).
func TestSmallJobsStayCompact(t *testing.T) {
	s := openTest(t, testserver.Redis(t))
	ctx := t.Context()
	now := time.Now()
	n := 0
	next := func() string { n++; return fmt.Sprintf("0193a000-0000-7000-8000-%012x", n) }
	var jobs []store.NewJob
	for i := range 4 {
		jobs = append(jobs, store.NewJob{ID: next(), Generated: true, Queue: "emails", Task: "send-welcome-email",
			Payload: []byte(`{"user_id":12345,"template":"welcome"}`), Priority: int64(i - 2), RunAt: now})
	}
	jobs = append(jobs, store.NewJob{ID: next(), Generated: true, Queue: "emails", Task: "send-welcome-email", RunAt: now.Add(time.Hour)})
	if _, err := s.JobEnqueueMany(ctx, store.JobEnqueueManyParams{Namespace: "acme", Now: now, Calls: []store.EnqueueCall{{Jobs: jobs}}}); err != nil {
		t.Fatal(err)
	}
	compact := func(when string) {
		t.Helper()
		for _, j := range jobs {
			enc, err := s.c.ObjectEncoding(ctx, s.p+"j:"+enc("acme")+":"+j.ID).Result()
			if err != nil {
				t.Fatal(err)
			}
			if enc != "listpack" {
				t.Errorf("%s: job %s is stored as a %s, want a listpack", when, j.ID, enc)
			}
		}
	}
	compact("enqueued")
	got, err := s.JobClaimMany(ctx, store.JobClaimManyParams{Namespace: "acme", Now: now.Add(2 * time.Hour),
		Claims: []store.ClaimSpec{{Queues: []string{"emails"}, Max: 10, LeaseUntil: now.Add(3 * time.Hour), Worker: "worker-1"}}})
	if err != nil || len(got[0]) != len(jobs) {
		t.Fatalf("claim: %d jobs, %v", len(got[0]), err)
	}
	compact("claimed (the scheduled one promoted first)")
	var ups []store.JobUpdate
	for i, j := range got[0] {
		kind := store.UpdateComplete
		if i%2 == 1 {
			kind = store.UpdateRetry
		}
		ups = append(ups, store.JobUpdate{ID: j.ID, Attempt: j.Attempt, Kind: kind, Result: []byte(`{"sent":true}`), RunAt: now.Add(2 * time.Hour)})
	}
	if _, err := s.JobUpdateMany(ctx, store.JobUpdateManyParams{Namespace: "acme", Now: now.Add(2 * time.Hour), Updates: ups}); err != nil {
		t.Fatal(err)
	}
	compact("acked or retried")
	checkInvariants(t, s)
}

// A store never writes a format this build does not know, nor a
// negative one, whatever it is told (a member row is another node's word).
func TestSetJobFormatStaysInTheKnownFormats(t *testing.T) {
	s := &Store{}
	for _, c := range []struct{ set, want int }{
		{-1, 0}, {0, 0}, {store.JobFormatOrderKey, store.JobFormatOrderKey}, {store.JobFormat, store.JobFormat}, {store.JobFormat + 1, store.JobFormat}, {1 << 40, store.JobFormat},
	} {
		s.SetJobFormat(c.set)
		if got := s.formatArg(); got != strconv.Itoa(c.want) {
			t.Errorf("SetJobFormat(%d): scripts get format %s, want %d", c.set, got, c.want)
		}
	}
}

// Every job record format (store.JobFormat) writes the hashes its nodes
// read, and reads back the same jobs: format 0 (a node built before
// formats were told) the whole dispatch-order member am; 1 the order key
// ak; 2 (lean) also leaves out, at enqueue, the namespace, id, priority
// and the attempt of a job never claimed; 3 also max_attempts while 0 and
// run_at_us while it is the job's creation.
func TestJobHashFormats(t *testing.T) {
	url := testserver.Redis(t)
	now := time.Date(2026, 1, 1, 12, 0, 0, 123456789, time.UTC)
	ids := []string{"a", "b", "d", "e", "f", "g"}
	// The claim below takes d (due a second ago once d2 coalesced into
	// it), a and b; d is retried, a dies and is replayed, b is released.
	// The fields each format leaves out, job by job: from 2, what the
	// key and the order key hold, and the attempt of e, f and g (never
	// claimed); from 3, max_attempts while 0 (all but f) and run_at_us
	// while it is the job's creation (f and g, and b, which a release
	// leaves as it was; a retry, a replay and a coalescing set it).
	keyed := []string{"namespace", "id", "priority"}
	unclaimed := append(slices.Clip(keyed), "attempt")
	leftOut := map[int]map[string][]string{
		store.JobFormatLean: {"a": keyed, "b": keyed, "d": keyed, "e": unclaimed, "f": unclaimed, "g": unclaimed},
		store.JobFormatDefaults: {"a": {"max_attempts"}, "b": {"max_attempts", "run_at_us"}, "d": {"max_attempts"},
			"e": {"max_attempts"}, "f": {"run_at_us"}, "g": {"max_attempts", "run_at_us"}},
	}
	var first []store.Job // what format 0 reads back
	for format := range store.JobFormat + 1 {
		t.Run(fmt.Sprintf("format=%d", format), func(t *testing.T) {
			s := openTest(t, url)
			s.SetJobFormat(format)
			ctx := t.Context()
			enqueue := func(jobs ...store.NewJob) {
				t.Helper()
				if _, err := s.JobEnqueueMany(ctx, store.JobEnqueueManyParams{Namespace: "ns", Now: now, Calls: []store.EnqueueCall{{Jobs: jobs}}}); err != nil {
					t.Fatal(err)
				}
			}
			enqueue(store.NewJob{ID: "a", Queue: "q", Task: "t", RunAt: now}, store.NewJob{ID: "b", Queue: "q", Task: "t", RunAt: now},
				store.NewJob{ID: "d", Queue: "q", Task: "t", RunAt: now.Add(time.Minute), DebounceKey: "k"},
				store.NewJob{ID: "e", Queue: "q", Task: "t", RunAt: now.Add(time.Hour), Priority: -7, Payload: []byte(`{"x":1}`)})
			enqueue(store.NewJob{ID: "d2", Queue: "q", Task: "t", RunAt: now.Add(-time.Second), DebounceKey: "k"}) // coalesces into d
			got, err := s.JobClaimMany(ctx, store.JobClaimManyParams{Namespace: "ns", Now: now,
				Claims: []store.ClaimSpec{{Queues: []string{"q"}, Max: 3, LeaseUntil: now.Add(time.Minute)}}})
			if err != nil || len(got[0]) != 3 {
				t.Fatalf("claim: %v, %v", got, err)
			}
			for _, j := range got[0] {
				if j.Namespace != "ns" || !slices.Contains(ids, j.ID) || j.Attempt != 1 {
					t.Errorf("claimed job %s/%s, attempt %d; want ns/<a, b or d>, attempt 1", j.Namespace, j.ID, j.Attempt)
				}
			}
			ups := []store.JobUpdate{
				{ID: got[0][0].ID, Attempt: 1, Kind: store.UpdateRetry, RunAt: now},
				{ID: got[0][1].ID, Attempt: 1, Kind: store.UpdateDead, Error: "boom"},
				{ID: got[0][2].ID, Attempt: 1, Kind: store.UpdateRelease},
			}
			if _, err := s.JobUpdateMany(ctx, store.JobUpdateManyParams{Namespace: "ns", Now: now, Updates: ups}); err != nil {
				t.Fatal(err)
			}
			if _, err := s.JobEnqueueMany(ctx, store.JobEnqueueManyParams{Namespace: "ns", Now: now, Calls: []store.EnqueueCall{{ReplayIDs: []string{got[0][1].ID}}}}); err != nil {
				t.Fatal(err)
			}
			enqueue(store.NewJob{ID: "f", Queue: "q", Task: "t", RunAt: now, Priority: 1 << 40, MaxAttempts: 3},
				store.NewJob{ID: "g", Queue: "q", Task: "t", RunAt: now})

			for _, id := range ids {
				m, err := s.c.HGetAll(ctx, s.p+"j:"+enc("ns")+":"+id).Result()
				if err != nil {
					t.Fatal(err)
				}
				if _, ak := m["ak"]; ak != (format >= store.JobFormatOrderKey) || (m["am"] != "") == ak {
					t.Errorf("job %s (%s) holds ak %q, am %q; format %d wants only %s", id, m["status"], m["ak"], m["am"], format, map[bool]string{true: "ak", false: "am"}[format >= store.JobFormatOrderKey])
				}
				for _, f := range []string{"namespace", "id", "priority", "attempt", "max_attempts", "run_at_us"} {
					want := true
					for lf, out := range leftOut {
						want = want && !(format >= lf && slices.Contains(out[id], f))
					}
					if _, has := m[f]; has != want {
						t.Errorf("job %s (format %d): field %s there %t, want %t", id, format, f, has, want)
					}
				}
			}
			var back []store.Job
			for _, id := range ids {
				j, err := s.JobGet(ctx, "ns", id)
				if err != nil {
					t.Fatal(err)
				}
				back = append(back, j)
			}
			if back[3].Priority != -7 || back[4].Priority != 1<<40 || back[3].Namespace != "ns" || back[3].ID != "e" || back[3].Attempt != 0 {
				t.Errorf("job e read back as %s/%s priority %d attempt %d, f priority %d; want ns/e -7 0, 1<<40", back[3].Namespace, back[3].ID, back[3].Priority, back[3].Attempt, back[4].Priority)
			}
			if g := back[5]; !g.RunAt.Equal(now.Truncate(time.Microsecond)) || g.MaxAttempts != 0 || back[4].MaxAttempts != 3 {
				t.Errorf("job g read back with run_at %v, max_attempts %d (f's %d); want %v, 0 (3)", g.RunAt, g.MaxAttempts, back[4].MaxAttempts, now.Truncate(time.Microsecond))
			}
			if next, ok, err := s.JobNextRunAt(ctx, "ns", nil); err != nil || !ok || !next.Equal(now.Add(time.Hour).Truncate(time.Microsecond)) {
				t.Errorf("next run_at %v, %t, %v; want e's, %v", next, ok, err, now.Add(time.Hour))
			}
			listed, err := s.JobList(ctx, store.JobListParams{Namespace: "ns", Status: api.StatusPending})
			if err != nil || len(listed) != len(ids) {
				t.Fatalf("listed %d pending jobs, %v; want all %d", len(listed), err, len(ids))
			}
			for _, l := range listed {
				if i := slices.Index(ids, l.ID); i < 0 || !reflect.DeepEqual(l, back[i]) {
					t.Errorf("listed %+v, read %+v", l, back[max(i, 0)])
				}
			}
			if format == 0 {
				first = back
			} else if first != nil && !reflect.DeepEqual(back, first) {
				t.Errorf("format %d reads back\n%+v\nformat 0 read\n%+v", format, back, first)
			}
			checkInvariants(t, s)
		})
	}
}

// A claim group's first three conflicts re-plan at once; from the fourth
// it pauses first, and a pause ends with the call's context.
func TestConflictPause(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for attempt := range 3 {
		if err := conflictPause(cancelled, attempt); err != nil {
			t.Errorf("attempt %d: %v, want no pause", attempt, err)
		}
	}
	for _, attempt := range []int{3, 50, 1000} {
		if err := conflictPause(cancelled, attempt); !errors.Is(err, context.Canceled) {
			t.Errorf("attempt %d with its context ended: %v, want context.Canceled", attempt, err)
		}
	}
	if err := conflictPause(context.Background(), 1000); err != nil {
		t.Errorf("attempt 1000: %v, want a pause that ends", err)
	}
}

// The enqueue script's reply is a letter an item and the holders' ids;
// a reply that does not add up is an error, not a guess.
func TestEnqueueReplyLetters(t *testing.T) {
	held := []any{"h1", "h2"}
	want := []api.EnqueueResult{
		{ID: "a", Outcome: api.OutcomeEnqueued}, {ID: "h1", Outcome: api.OutcomeDeduplicated},
		{ID: "c", Outcome: api.OutcomeDeduplicated}, {ID: "h2", Outcome: api.OutcomeCoalesced},
		{ID: "e", Outcome: api.OutcomeShed}, {ID: "f", Outcome: ""},
	}
	for i, code := range []byte("eDdCs-") {
		own := string(rune('a' + i)) // the item's own id
		got, rest, err := enqueueResult(code, own, held)
		if err != nil || got != want[i] {
			t.Fatalf("letter %q of item %q: %+v, %v; want %+v", code, own, got, err, want[i])
		}
		held = rest
	}
	if len(held) != 0 {
		t.Fatalf("holders left: %v", held)
	}
	for _, code := range []byte("xX") {
		if _, _, err := enqueueResult(code, "a", nil); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("unknown outcome %q", code)) {
			t.Fatalf("unknown letter %q: %v", code, err)
		}
	}
	if _, _, err := enqueueResult('D', "a", nil); err == nil || !strings.Contains(err.Error(), "holder") {
		t.Fatalf("holder missing: %v", err)
	}
}

// The enqueue script asks only whether the first job of a group's
// generated ids without keys is stored (scriptEnqueue, "Generated ids"):
// such a job can exist only if this very group was written before. A
// group sent again, whole or after a part of it was written, must still
// write no job twice: each job it wrote comes back deduplicated, the
// rest are enqueued, and the indexes stay exact.
func TestAGroupSentAgainWritesNoJobTwice(t *testing.T) {
	s := openTest(t, testserver.Redis(t))
	ctx := t.Context()
	now := time.Now()
	n := 0
	gen := func(queue string) store.NewJob {
		n++
		return store.NewJob{ID: fmt.Sprintf("0193a000-0000-7000-8000-%012x", n), Generated: true, Queue: queue, Task: "t", RunAt: now}
	}
	// Full and short items of generated ids, a generated id with a unique
	// key and a client's id among them.
	jobs := []store.NewJob{gen("a"), gen("a"), gen("b"), gen("b")}
	keyed := gen("a")
	keyed.UniqueKey = "u"
	jobs = append(jobs, keyed, store.NewJob{ID: "client-1", Queue: "a", Task: "t", RunAt: now}, gen("a"), gen("c"))
	enqueue := func(jobs []store.NewJob) []api.EnqueueResult {
		t.Helper()
		res, err := s.JobEnqueueMany(ctx, store.JobEnqueueManyParams{Namespace: "acme", Now: now,
			Calls: []store.EnqueueCall{{Jobs: jobs}}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	outcomes := func(res []api.EnqueueResult) string {
		var b strings.Builder
		for _, r := range res {
			b.WriteString(string(r.Outcome)[:1])
		}
		return b.String()
	}

	// A part written before (a run that failed after three items), then
	// the whole group.
	if got := outcomes(enqueue(jobs[:3])); got != "eee" {
		t.Fatalf("the first part: %s, want eee", got)
	}
	if got := outcomes(enqueue(jobs)); got != "ddde"+"eeee" {
		t.Fatalf("the group after a part of it was written: %s, want dddeeeee", got)
	}
	checkInvariants(t, s)
	// The whole group again.
	if got := outcomes(enqueue(jobs)); got != "dddd"+"dddd" {
		t.Fatalf("the group sent again: %s, want dddddddd", got)
	}
	checkInvariants(t, s)
	if c, err := s.JobCount(ctx, "acme"); err != nil || c.Pending != int64(len(jobs)) {
		t.Fatalf("pending jobs: %v (%v), want %d", c, err, len(jobs))
	}
}
