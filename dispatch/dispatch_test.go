package dispatch

import (
	"slices"
	"testing"

	"pgregory.net/rapid"
)

func i64(v int64) *int64 { return &v }

func counts(running int64, queue, task map[string]int64) *Counts {
	return &Counts{Running: running, Queue: queue, Task: task}
}

func TestAllow(t *testing.T) {
	tests := []struct {
		name        string
		limits      Limits
		counts      *Counts
		queue, task string
		want        bool
	}{
		{"no limits, nothing running", Limits{}, &Counts{}, "q", "t", true},
		{"no limits, much running", Limits{}, counts(1e9, map[string]int64{"q": 1e9}, map[string]int64{"t": 1e9}), "q", "t", true},
		{"empty cap maps are unlimited", Limits{Queue: map[string]int64{}, Task: map[string]int64{}}, counts(5, map[string]int64{"q": 5}, map[string]int64{"t": 5}), "q", "t", true},

		{"zero max_running dispatches nothing", Limits{MaxRunning: i64(0)}, &Counts{}, "q", "t", false},
		{"zero queue cap dispatches nothing from it", Limits{Queue: map[string]int64{"q": 0}}, &Counts{}, "q", "t", false},
		{"zero queue cap leaves other queues", Limits{Queue: map[string]int64{"q": 0}}, &Counts{}, "other", "t", true},
		{"zero task cap dispatches nothing of it", Limits{Task: map[string]int64{"t": 0}}, &Counts{}, "q", "t", false},
		{"zero task cap leaves other tasks", Limits{Task: map[string]int64{"t": 0}}, &Counts{}, "q", "other", true},

		{"namespace below cap", Limits{MaxRunning: i64(3)}, counts(2, nil, nil), "q", "t", true},
		{"namespace at cap", Limits{MaxRunning: i64(3)}, counts(3, nil, nil), "q", "t", false},
		{"namespace over cap", Limits{MaxRunning: i64(3)}, counts(4, nil, nil), "q", "t", false},

		{"queue below cap", Limits{Queue: map[string]int64{"q": 2}}, counts(1, map[string]int64{"q": 1}, nil), "q", "t", true},
		{"queue at cap", Limits{Queue: map[string]int64{"q": 2}}, counts(2, map[string]int64{"q": 2}, nil), "q", "t", false},
		{"queue cap counts only its queue", Limits{Queue: map[string]int64{"q": 2}}, counts(9, map[string]int64{"other": 9}, nil), "q", "t", true},
		{"uncapped queue beside a full one", Limits{Queue: map[string]int64{"q": 2}}, counts(2, map[string]int64{"q": 2}, nil), "other", "t", true},

		{"task below cap", Limits{Task: map[string]int64{"t": 2}}, counts(1, nil, map[string]int64{"t": 1}), "q", "t", true},
		{"task at cap", Limits{Task: map[string]int64{"t": 2}}, counts(2, nil, map[string]int64{"t": 2}), "q", "t", false},
		{"task cap counts across queues", Limits{Task: map[string]int64{"t": 2}}, counts(2, map[string]int64{"a": 1, "b": 1}, map[string]int64{"t": 2}), "c", "t", false},
		{"uncapped task beside a full one", Limits{Task: map[string]int64{"t": 2}}, counts(2, nil, map[string]int64{"t": 2}), "q", "u", true},
		{"a queue and a task may share a name", Limits{Queue: map[string]int64{"x": 1}}, counts(1, nil, map[string]int64{"x": 1}), "q", "x", true},

		{"all caps below", Limits{MaxRunning: i64(10), Queue: map[string]int64{"q": 5}, Task: map[string]int64{"t": 3}},
			counts(9, map[string]int64{"q": 4}, map[string]int64{"t": 2}), "q", "t", true},
		{"all caps, namespace full", Limits{MaxRunning: i64(10), Queue: map[string]int64{"q": 5}, Task: map[string]int64{"t": 3}},
			counts(10, map[string]int64{"q": 4}, map[string]int64{"t": 2}), "q", "t", false},
		{"all caps, queue full", Limits{MaxRunning: i64(10), Queue: map[string]int64{"q": 5}, Task: map[string]int64{"t": 3}},
			counts(9, map[string]int64{"q": 5}, map[string]int64{"t": 2}), "q", "t", false},
		{"all caps, task full", Limits{MaxRunning: i64(10), Queue: map[string]int64{"q": 5}, Task: map[string]int64{"t": 3}},
			counts(9, map[string]int64{"q": 4}, map[string]int64{"t": 3}), "q", "t", false},
		{"all caps, everything full", Limits{MaxRunning: i64(10), Queue: map[string]int64{"q": 5}, Task: map[string]int64{"t": 3}},
			counts(10, map[string]int64{"q": 5}, map[string]int64{"t": 3}), "q", "t", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := *tc.counts
			if got := tc.limits.Allow(tc.counts, tc.queue, tc.task); got != tc.want {
				t.Fatalf("Allow(%+v, %q, %q) under %+v = %v, want %v", *tc.counts, tc.queue, tc.task, tc.limits, got, tc.want)
			}
			if tc.counts.Running != before.Running || (before.Queue == nil) != (tc.counts.Queue == nil) || (before.Task == nil) != (tc.counts.Task == nil) {
				t.Fatalf("Allow changed the counts from %+v to %+v, want them untouched", before, *tc.counts)
			}
		})
	}
}

func TestNamespaceFullAndQueueFull(t *testing.T) {
	l := Limits{MaxRunning: i64(2), Queue: map[string]int64{"q": 1, "z": 0}}
	c := counts(1, map[string]int64{"q": 1}, nil)
	if l.NamespaceFull(c) {
		t.Fatal("NamespaceFull with 1 of 2 running = true, want false")
	}
	if !l.QueueFull(c, "q") {
		t.Fatal("QueueFull(q) with 1 of 1 running = false, want true")
	}
	if !l.QueueFull(c, "z") {
		t.Fatal("QueueFull(z) with cap 0 = false, want true")
	}
	if l.QueueFull(c, "other") {
		t.Fatal("QueueFull(other) with no cap = true, want false")
	}
	c.Running = 2
	if !l.NamespaceFull(c) {
		t.Fatal("NamespaceFull with 2 of 2 running = false, want true")
	}
	if (Limits{}).NamespaceFull(counts(1e9, nil, nil)) {
		t.Fatal("NamespaceFull with no max_running = true, want false")
	}
	if !(Limits{MaxRunning: i64(0)}).NamespaceFull(&Counts{}) {
		t.Fatal("NamespaceFull with max_running 0 = false, want true")
	}
}

func TestCountsAdd(t *testing.T) {
	var c Counts // the zero value is ready to use
	c.Add("q", "t", 1)
	c.Add("q", "t", 1)
	c.Add("q", "u", 1)
	c.Add("r", "t", 1)
	if c.Running != 4 {
		t.Fatalf("Running = %d, want 4", c.Running)
	}
	if want := map[string]int64{"q": 3, "r": 1}; !mapsEqual(c.Queue, want) {
		t.Fatalf("Queue = %v, want %v", c.Queue, want)
	}
	if want := map[string]int64{"t": 3, "u": 1}; !mapsEqual(c.Task, want) {
		t.Fatalf("Task = %v, want %v", c.Task, want)
	}

	c.Add("q", "u", -1)
	if want := map[string]int64{"t": 3}; !mapsEqual(c.Task, want) {
		t.Fatalf("after the only u job ended, Task = %v, want %v (no zero entries)", c.Task, want)
	}
	c.Add("r", "t", -1)
	if want := map[string]int64{"q": 2}; !mapsEqual(c.Queue, want) {
		t.Fatalf("after the only r job ended, Queue = %v, want %v (no zero entries)", c.Queue, want)
	}
	c.Add("q", "t", -1)
	c.Add("q", "t", -1)
	if c.Running != 0 || len(c.Queue) != 0 || len(c.Task) != 0 {
		t.Fatalf("after every job ended, Counts = %+v, want Running 0 and empty maps", c)
	}
}

func mapsEqual(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func TestFullTasks(t *testing.T) {
	l := Limits{Task: map[string]int64{"b": 1, "a": 0, "c": 5, "d": 2, "e": 1, "f": 3}}
	c := counts(0, nil, map[string]int64{"b": 1, "c": 4, "d": 3, "f": 3, "g": 100})
	want := []string{"a", "b", "d", "f"}
	for i := range 50 { // map order is random: the order must not be
		if got := l.FullTasks(c); !slices.Equal(got, want) {
			t.Fatalf("run %d: FullTasks = %v, want %v (sorted, capped tasks at or over their cap)", i, got, want)
		}
	}
	if got := (Limits{}).FullTasks(c); len(got) != 0 {
		t.Fatalf("FullTasks with no task caps = %v, want none", got)
	}
	if got := l.FullTasks(&Counts{}); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("FullTasks with nothing running = %v, want [a] (cap 0)", got)
	}
}

var (
	rapidQueues = []string{"q1", "q2", "q3"}
	rapidTasks  = []string{"t1", "t2", "t3"}
)

// drawLimits draws caps on rapidQueues and rapidTasks: max_running up to
// maxRunning (or none), each cap up to maxCap.
func drawLimits(t *rapid.T, maxRunning, maxCap int64) Limits {
	var l Limits
	if rapid.Bool().Draw(t, "namespace capped") {
		l.MaxRunning = i64(rapid.Int64Range(0, maxRunning).Draw(t, "max_running"))
	}
	l.Queue = rapid.MapOf(rapid.SampledFrom(rapidQueues), rapid.Int64Range(0, maxCap)).Draw(t, "queue caps")
	l.Task = rapid.MapOf(rapid.SampledFrom(rapidTasks), rapid.Int64Range(0, maxCap)).Draw(t, "task caps")
	return l
}

// TestCapsHold drives Allow and Add with random starts and finishes and
// checks that no cap is ever exceeded and that Counts matches a recount.
func TestCapsHold(t *testing.T) {
	queues, tasks := rapidQueues, rapidTasks
	rapid.Check(t, func(t *rapid.T) {
		l := drawLimits(t, 6, 4)

		var c Counts
		type job struct{ queue, task string }
		var running []job
		for range rapid.IntRange(1, 100).Draw(t, "steps") {
			if len(running) > 0 && rapid.IntRange(0, 2).Draw(t, "finish") == 0 {
				i := rapid.IntRange(0, len(running)-1).Draw(t, "which")
				c.Add(running[i].queue, running[i].task, -1)
				running = slices.Delete(running, i, i+1)
			} else {
				j := job{rapid.SampledFrom(queues).Draw(t, "queue"), rapid.SampledFrom(tasks).Draw(t, "task")}
				if l.Allow(&c, j.queue, j.task) {
					if slices.Contains(l.FullTasks(&c), j.task) || l.NamespaceFull(&c) || l.QueueFull(&c, j.queue) {
						t.Fatalf("Allow(%v) = true but a Full check says no: counts %+v limits %+v", j, c, l)
					}
					c.Add(j.queue, j.task, 1)
					running = append(running, j)
				}
			}
			q, k := map[string]int64{}, map[string]int64{}
			for _, j := range running {
				q[j.queue]++
				k[j.task]++
			}
			if c.Running != int64(len(running)) || !mapsEqual(c.Queue, q) || !mapsEqual(c.Task, k) {
				t.Fatalf("Counts = %+v, want Running %d Queue %v Task %v", c, len(running), q, k)
			}
			if l.MaxRunning != nil && c.Running > *l.MaxRunning {
				t.Fatalf("running %d over max_running %d", c.Running, *l.MaxRunning)
			}
			for name, n := range q {
				if max, ok := l.Queue[name]; ok && n > max {
					t.Fatalf("queue %s runs %d over its cap %d", name, n, max)
				}
			}
			for name, n := range k {
				if max, ok := l.Task[name]; ok && n > max {
					t.Fatalf("task %s runs %d over its cap %d", name, n, max)
				}
			}
		}
	})
}

// TestBindsIsSound checks that when Binds says n more jobs of some queues
// cannot meet a cap, Allow takes every one of any n such jobs; and that it
// says so whenever there are no caps at all.
func TestBindsIsSound(t *testing.T) {
	queues, tasks := rapidQueues, rapidTasks
	rapid.Check(t, func(t *rapid.T) {
		l := drawLimits(t, 12, 8)
		var c Counts
		for range rapid.IntRange(0, 6).Draw(t, "running") {
			c.Add(rapid.SampledFrom(queues).Draw(t, "queue"), rapid.SampledFrom(tasks).Draw(t, "task"), 1)
		}
		claimed := rapid.SliceOfNDistinct(rapid.SampledFrom(queues), 1, 3, rapid.ID[string]).Draw(t, "claimed queues")
		n := rapid.Int64Range(1, 8).Draw(t, "n")
		if len(l.Queue) == 0 && len(l.Task) == 0 && l.MaxRunning == nil && l.Binds(&c, claimed, n) {
			t.Fatalf("Binds with no caps at all")
		}
		if l.Binds(&c, claimed, n) {
			return
		}
		for i := range n {
			q := rapid.SampledFrom(claimed).Draw(t, "job queue")
			task := rapid.SampledFrom(tasks).Draw(t, "job task")
			if !l.Allow(&c, q, task) {
				t.Fatalf("job %d of %d (%s, %s) refused after Binds said no cap could be met: limits %+v counts %+v", i+1, n, q, task, l, c)
			}
			c.Add(q, task, 1)
		}
	})
}

func TestBindsAtTheEdge(t *testing.T) {
	l := Limits{MaxRunning: i64(5), Queue: map[string]int64{"q": 3}, Task: map[string]int64{"t": 4}}
	c := counts(1, map[string]int64{"q": 1}, map[string]int64{"t": 1})
	if l.Binds(c, []string{"q"}, 2) {
		t.Errorf("2 more of q: queue reaches 3, its cap; nothing over it, yet Binds")
	}
	if !l.Binds(c, []string{"q"}, 3) {
		t.Errorf("3 more of q would pass its cap of 3, yet not Binds")
	}
	if !l.Binds(c, []string{"other"}, 4) {
		t.Errorf("4 more would pass task t's cap of 4 (tasks are not known ahead), yet not Binds")
	}
	if !l.Binds(c, []string{"other"}, 5) {
		t.Errorf("5 more would pass max_running 5, yet not Binds")
	}
}
