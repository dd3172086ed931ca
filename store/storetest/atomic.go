package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/store"
)

// checkAtomic proves a write lands whole or not at all. After setup, it
// runs op with a fault injected at step 0, 1, 2, … of the backend's
// Faults.Fault calls, and after each failed run requires op's error to wrap
// the injected one and the store to read exactly as before. Once op runs
// with no fault left to fire, verify checks what it wrote. The same store
// serves every run, so a backend that leaves a broken transaction behind
// fails too.
func checkAtomic(t *testing.T, newStore Factory, keys []string, setup func(t *testing.T, s store.Store), op func(s store.Store) error, verify func(t *testing.T, s store.Store)) {
	t.Helper()
	f := &faultInjector{}
	s := newStore(t, f)
	setup(t, s)
	before := snapshot(t, s, keys)
	for step := 0; ; step++ {
		if step > 1000 {
			t.Fatalf("op still faulting after %d steps", step)
		}
		f.arm(step)
		err := op(s)
		calls, fired := f.disarm()
		if !fired {
			if err != nil {
				t.Fatalf("op failed with no fault injected (%d fault points): %v", len(calls), err)
			}
			if len(calls) == 0 {
				t.Errorf("the backend never called Faults.Fault during this write, so its atomicity is untested; call it between the write's steps")
			}
			t.Logf("%d fault points: %s", len(calls), strings.Join(calls, " "))
			verify(t, s)
			return
		}
		if !errors.Is(err, errInjected) {
			t.Errorf("fault at step %d (%s): op returned %v, want the injected error", step, calls[step], err)
		}
		if after := snapshot(t, s, keys); after != before {
			t.Fatalf("fault at step %d (%s) left the store changed:\n%s", step, calls[step], lineDiff(before, after))
		}
	}
}

// snapshot renders everything the suite's atomicity cases can touch: the
// jobs and counts of both namespaces, every live setting, the settings under
// keys (tombstones included) and the audit trail.
func snapshot(t *testing.T, s store.Store, keys []string) string {
	t.Helper()
	var b strings.Builder
	for _, ns := range []string{nsA, nsB} {
		fmt.Fprintf(&b, "counts %s %+v\n", ns, counts(t, s, ns))
		for _, j := range listAll(t, s, ns) {
			fmt.Fprintf(&b, "job %s/%s seq=%d queue=%s task=%s payload=%s prio=%d run_at=%s max=%d attempt=%d status=%s uk=%q dk=%q lease=%s worker=%q err=%q result=%s meta=%s created=%s finished=%s shed=%t noretry=%t replays=%d\n",
				j.Namespace, j.ID, j.Seq, j.Queue, j.Task, canonJSON(j.Payload), j.Priority, canonTime(j.RunAt), j.MaxAttempts, j.Attempt, j.Status,
				j.UniqueKey, j.DebounceKey, canonTime(j.LeaseUntil), j.Worker, j.Error, canonJSON(j.Result), canonJSON(j.DeadMeta),
				canonTime(j.CreatedAt), canonTime(j.FinishedAt), j.Shed, j.NoRetry, j.DeadReplays)
		}
	}
	for _, st := range settingList(t, s, "") {
		fmt.Fprintf(&b, "setting %s\n", canonSetting(st))
	}
	for _, k := range keys {
		st, err := s.SettingGet(t.Context(), k)
		switch {
		case errors.Is(err, store.ErrNotFound):
			fmt.Fprintf(&b, "get %s: not found\n", k)
		case err != nil:
			t.Fatalf("SettingGet(%q): %v", k, err)
		default:
			fmt.Fprintf(&b, "get %s\n", canonSetting(st))
		}
	}
	for _, ns := range []string{nsA, nsB, ""} {
		for _, e := range auditList(t, s, ns, 1000) {
			fmt.Fprintf(&b, "audit %q id=%d %+v at=%s before=%s after=%s\n", ns, e.ID, e.AuditRecord, canonTime(e.At), canonJSON(e.Before), canonJSON(e.After))
		}
	}
	return b.String()
}

func canonSetting(st store.Setting) string {
	return fmt.Sprintf("%s rev=%d value=%s updated=%s", st.Key, st.Revision, canonJSON(st.Value), canonTime(st.UpdatedAt))
}

func canonTime(x time.Time) string {
	if x.IsZero() {
		return "zero"
	}
	return x.Truncate(time.Microsecond).UTC().Format(time.RFC3339Nano)
}

func canonJSON(b []byte) string {
	if len(b) == 0 {
		return "nil"
	}
	var v any
	if json.Unmarshal(b, &v) != nil {
		return fmt.Sprintf("%q", b)
	}
	out, _ := json.Marshal(v)
	return string(out)
}

// lineDiff lists the lines only in a (-) and only in b (+).
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out []string
	for _, l := range strings.Split(a, "\n") {
		if !mb[l] {
			out = append(out, "\t- "+l)
		}
	}
	for _, l := range strings.Split(b, "\n") {
		if !ma[l] {
			out = append(out, "\t+ "+l)
		}
	}
	return strings.Join(out, "\n")
}

func exerciseAtomicity(t *testing.T, newStore Factory) {
	t.Run("JobEnqueueManyGroup", func(t *testing.T) {
		now := at(time.Minute)
		var res [][]api.EnqueueResult
		checkAtomic(t, newStore, nil,
			func(t *testing.T, s store.Store) {
				mustEnqueue(t, s, nsA, base,
					with(newJob("deb"), func(j *store.NewJob) {
						j.Queue = "qdeb"
						j.DebounceKey = "dk"
						j.RunAt = at(time.Hour)
						j.Payload = []byte(`{"v":1}`)
					}),
					with(newJob("uh"), func(j *store.NewJob) { j.Queue = "qu"; j.UniqueKey = "uk"; j.RunAt = at(time.Hour) }),
				)
				killJob(t, s, nsA, at(-time.Hour), with(newJob("dead1"), func(j *store.NewJob) { j.Queue = "qd1" }), false)
				killJob(t, s, nsA, at(-time.Hour), with(newJob("dead2"), func(j *store.NewJob) { j.Queue = "qd2" }), false)
				killJob(t, s, nsA, at(-time.Hour), with(newJob("dead3"), func(j *store.NewJob) { j.Queue = "qd3"; j.UniqueKey = "uk3" }), false)
				mustEnqueue(t, s, nsB, base, newJob("n1"))
			},
			func(s store.Store) error {
				var err error
				res, err = s.JobEnqueueMany(t.Context(), store.JobEnqueueManyParams{Namespace: nsA, Now: now, Calls: []store.EnqueueCall{
					{Jobs: []store.NewJob{
						newJob("n1"),
						with(newJob("01JH00000000000000000000G1"), func(j *store.NewJob) { j.Generated = true }),
						with(newJob("dup"), func(j *store.NewJob) { j.UniqueKey = "uk" }),
						with(newJob("coal"), func(j *store.NewJob) {
							j.DebounceKey = "dk"
							j.RunAt = at(2 * time.Hour)
							j.Payload = []byte(`{"v":2}`)
						}),
						with(newJob("n1"), func(j *store.NewJob) { j.Payload = []byte(`{"again":true}`) }),
						with(newJob("u2"), func(j *store.NewJob) { j.UniqueKey = "uk2" }),
					}},
					{ShedError: shedError, Jobs: []store.NewJob{
						with(newJob("s1"), func(j *store.NewJob) { j.UniqueKey = "uk4" }),
						newJob("s2"),
					}},
					{ReplayIDs: []string{"dead1"}},
					{ReplayIDs: []string{"dead2"}, AutoRetry: true},
					{ReplayIDs: []string{"dead3"}, ShedError: shedError},
					{Jobs: []store.NewJob{with(newJob("after"), func(j *store.NewJob) { j.UniqueKey = "uk4" })}},
				}})
				return err
			},
			func(t *testing.T, s store.Store) {
				want := [][]api.EnqueueResult{
					{{ID: "n1", Outcome: api.OutcomeEnqueued}, {ID: "01JH00000000000000000000G1", Outcome: api.OutcomeEnqueued},
						{ID: "uh", Outcome: api.OutcomeDeduplicated}, {ID: "deb", Outcome: api.OutcomeCoalesced},
						{ID: "n1", Outcome: api.OutcomeDeduplicated}, {ID: "u2", Outcome: api.OutcomeEnqueued}},
					{{ID: "s1", Outcome: api.OutcomeShed}, {ID: "s2", Outcome: api.OutcomeShed}},
					{{ID: "dead1", Outcome: api.OutcomeEnqueued}},
					{{ID: "dead2", Outcome: api.OutcomeEnqueued}},
					{{ID: "dead3", Outcome: api.OutcomeShed}},
					{{ID: "after", Outcome: api.OutcomeEnqueued}},
				}
				if fmt.Sprint(res) != fmt.Sprint(want) {
					t.Errorf("results %v, want %v", res, want)
				}
				wantCounts(t, s, nsA, store.Counts{Pending: 8, Dead: 3})
				wantCounts(t, s, nsB, store.Counts{Pending: 1})
				wantJSON(t, "coalesced payload", getJob(t, s, nsA, "deb").Payload, `{"v":2}`)
				wantJSON(t, "n1 payload", getJob(t, s, nsA, "n1").Payload, `{"id":"n1"}`)
				if j := getJob(t, s, nsA, "dead2"); j.DeadReplays != 1 || j.Status != api.StatusPending {
					t.Errorf("dead2: status %s DeadReplays %d, want pending 1", j.Status, j.DeadReplays)
				}
				if j := getJob(t, s, nsA, "dead3"); !j.Shed || j.UniqueKey != "" {
					t.Errorf("dead3: shed %t unique key %q, want shed and stripped", j.Shed, j.UniqueKey)
				}
			})
	})

	t.Run("JobClaimManyGroup", func(t *testing.T) {
		var res [][]store.Job
		checkAtomic(t, newStore, nil,
			func(t *testing.T, s store.Store) {
				mustEnqueue(t, s, nsA, base,
					with(newJob("a"), func(j *store.NewJob) { j.Queue = "q1"; j.Priority = 5 }),
					with(newJob("b"), func(j *store.NewJob) { j.Queue = "q2"; j.Priority = 4 }),
					with(newJob("c"), func(j *store.NewJob) { j.Queue = "q1"; j.Priority = 3; j.Task = "capped" }),
					with(newJob("d"), func(j *store.NewJob) { j.Queue = "q2"; j.Priority = 2 }),
					with(newJob("e"), func(j *store.NewJob) { j.Queue = "q2"; j.Priority = 1 }),
					with(newJob("f"), func(j *store.NewJob) { j.Queue = "q1"; j.Priority = 0 }),
				)
				mustEnqueue(t, s, nsB, base, with(newJob("other"), func(j *store.NewJob) { j.Queue = "q1" }))
			},
			func(s store.Store) error {
				var err error
				res, err = s.JobClaimMany(t.Context(), store.JobClaimManyParams{
					Namespace: nsA,
					Now:       base,
					Claims: []store.ClaimSpec{
						{Queues: []string{"q1", "q2"}, Max: 2, LeaseUntil: at(time.Minute), Worker: "w1"},
						{Queues: []string{"q2", "q1"}, Max: 3, LeaseUntil: at(2 * time.Minute), Worker: "w2"},
					},
					Allow: func(queue, task string) store.ClaimVerdict {
						if task == "capped" {
							return store.ClaimSkipTask
						}
						return store.ClaimTake
					},
				})
				return err
			},
			func(t *testing.T, s store.Store) {
				if len(res) != 2 {
					t.Fatalf("%d claim results, want 2", len(res))
				}
				wantIDs(t, "first claim", res[0], "a", "b")
				wantIDs(t, "second claim", res[1], "d", "e", "f")
				wantCounts(t, s, nsA, store.Counts{Pending: 1, Running: 5})
				wantCounts(t, s, nsB, store.Counts{Pending: 1})
			})
	})

	t.Run("JobUpdateManyGroup", func(t *testing.T) {
		var applied []bool
		now := at(time.Minute)
		checkAtomic(t, newStore, nil,
			func(t *testing.T, s store.Store) {
				for _, id := range []string{"a", "b", "c", "d", "e"} {
					runJob(t, s, nsA, base, with(newJob(id), func(j *store.NewJob) { j.Queue = "q-" + id }))
				}
			},
			func(s store.Store) error {
				var err error
				applied, err = s.JobUpdateMany(t.Context(), store.JobUpdateManyParams{Namespace: nsA, Now: now, Updates: []store.JobUpdate{
					{ID: "a", Attempt: 1, Kind: store.UpdateComplete, Result: []byte(`{"ok":1}`)},
					{ID: "b", Attempt: 1, Kind: store.UpdateRetry, Error: "later", RunAt: at(time.Hour)},
					{ID: "c", Attempt: 1, Kind: store.UpdateDead, Error: "bad", NoRetry: true},
					{ID: "d", Attempt: 1, Kind: store.UpdateExtend, LeaseUntil: at(time.Hour)},
					{ID: "e", Attempt: 7, Kind: store.UpdateComplete},
				}})
				return err
			},
			func(t *testing.T, s store.Store) {
				if want := []bool{true, true, true, true, false}; fmt.Sprint(applied) != fmt.Sprint(want) {
					t.Errorf("applied %v, want %v", applied, want)
				}
				wantCounts(t, s, nsA, store.Counts{Pending: 1, Running: 2, Completed: 1, Dead: 1})
				wantTime(t, "d's lease", getJob(t, s, nsA, "d").LeaseUntil, at(time.Hour))
			})
	})

	key := "quota:ns:4:acme"
	t.Run("SettingPutUpdateWithAudit", func(t *testing.T) {
		checkAtomic(t, newStore, []string{key},
			func(t *testing.T, s store.Store) {
				putSetting(t, s, store.SettingPutParams{Key: key, Value: []byte(`{"max_pending":1}`), Now: base, Audit: quotaAudit(nsA, "quota.set")})
			},
			func(s store.Store) error {
				_, err := s.SettingPut(t.Context(), store.SettingPutParams{Key: key, Value: []byte(`{"max_pending":2}`), Now: at(time.Minute), IfRevision: i64(1), Audit: quotaAudit(nsA, "quota.set")})
				return err
			},
			func(t *testing.T, s store.Store) {
				wantSetting(t, "setting", getSetting(t, s, key), key, `{"max_pending":2}`, 2, at(time.Minute))
				if e := auditList(t, s, nsA, 10); len(e) != 2 || !sameJSON(e[0].Before, []byte(`{"max_pending":1}`)) {
					t.Errorf("audit after the write: %+v, want two entries, the newest from max_pending 1", e)
				}
			})
	})

	t.Run("SettingPutCreateWithAudit", func(t *testing.T) {
		checkAtomic(t, newStore, []string{key},
			func(t *testing.T, s store.Store) {},
			func(s store.Store) error {
				_, err := s.SettingPut(t.Context(), store.SettingPutParams{Key: key, Value: []byte(`{"max_pending":2}`), Now: base, IfRevision: i64(0), Audit: quotaAudit(nsA, "quota.set")})
				return err
			},
			func(t *testing.T, s store.Store) {
				wantSetting(t, "setting", getSetting(t, s, key), key, `{"max_pending":2}`, 1, base)
				if e := auditList(t, s, nsA, 10); len(e) != 1 {
					t.Errorf("audit after the write: %d entries, want 1", len(e))
				}
			})
	})

	t.Run("SettingDeleteWithAudit", func(t *testing.T) {
		checkAtomic(t, newStore, []string{key},
			func(t *testing.T, s store.Store) {
				putSetting(t, s, store.SettingPutParams{Key: key, Value: []byte(`{"max_pending":1}`), Now: base, Audit: quotaAudit(nsA, "quota.set")})
			},
			func(s store.Store) error {
				_, err := s.SettingPut(t.Context(), store.SettingPutParams{Key: key, Now: at(time.Minute), Audit: quotaAudit(nsA, "quota.clear")})
				return err
			},
			func(t *testing.T, s store.Store) {
				wantSetting(t, "setting", getSetting(t, s, key), key, "", 2, at(time.Minute))
				if e := auditList(t, s, nsA, 10); len(e) != 2 || e[0].After != nil {
					t.Errorf("audit after the delete: %+v, want two entries, the newest with After nil", e)
				}
			})
	})
}
