package claimscan

import (
	"slices"
	"testing"

	"github.com/flexiq/flexiq/store"
)

// pages serves each queue's jobs a page of two at a time, after the
// cursor's keyset, as a store's page read would.
type pages struct {
	jobs  map[string][]Candidate // in dispatch order
	reads int
}

func (p *pages) read(skip map[string]bool) func(*Cursor) error {
	return func(c *Cursor) error {
		p.reads++
		pri, run, seq := c.After()
		after := Candidate{Seq: seq, Priority: pri, RunAt: run}
		c.Page()
		n := 0
		for _, cd := range p.jobs[c.Queue] {
			if n < 2 && after.Before(&cd) && !skip[cd.Task] {
				c.Add(cd)
				n++
			}
		}
		c.Read(2)
		return nil
	}
}

// A claim takes the best head among its queues, priority first, then
// run_at, then seq, across pages; the gate's skips last for the group and
// a stop ends it.
func TestTakeMergesQueuesInDispatchOrderUnderTheGate(t *testing.T) {
	p := &pages{jobs: map[string][]Candidate{
		"a": {{Seq: 1, Task: "x", Priority: 5, RunAt: 10}, {Seq: 4, Task: "y", Priority: 5, RunAt: 10}, {Seq: 2, Task: "x", Priority: 0, RunAt: 5}, {Seq: 9, Task: "x", Priority: 0, RunAt: 50}},
		"b": {{Seq: 3, Task: "x", Priority: 5, RunAt: 20}, {Seq: 5, Task: "z", Priority: 0, RunAt: 1}, {Seq: 7, Task: "x", Priority: 0, RunAt: 40}},
	}}
	var asked []int64
	allow := func(q, task string) store.ClaimVerdict {
		switch task {
		case "y":
			return store.ClaimSkipTask
		case "z":
			return store.ClaimSkipQueue
		}
		return store.ClaimTake
	}
	g := NewGroup(&store.JobClaimManyParams{Allow: func(q, task string) store.ClaimVerdict {
		asked = append(asked, int64(len(asked)))
		return allow(q, task)
	}})
	read := p.read(g.SkipTask)
	first, err := g.Take([]string{"a", "b", "a"}, 2, read)
	if err != nil {
		t.Fatal(err)
	}
	// 1 (priority 5, run_at 10), then 4 is skipped (task y), then 3.
	if !slices.Equal(first, []int64{1, 3}) {
		t.Fatalf("first claim took %v, want [1 3]", first)
	}
	// The next claim goes on from the same cursors: 5 (queue b's head,
	// run_at 1) skips queue b, so 2 and 9 of queue a follow.
	second, err := g.Take([]string{"b", "a"}, 5, read)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(second, []int64{2, 9}) {
		t.Fatalf("second claim took %v, want [2 9]", second)
	}
	if len(asked) != 6 {
		t.Fatalf("the gate was asked %d times, want 6 (1, 4, 3, 5, 2, 9)", len(asked))
	}
	if g.Stopped {
		t.Fatal("stopped without a stop")
	}

	stop := NewGroup(&store.JobClaimManyParams{ExcludeTasks: []string{"x"}, Allow: func(string, string) store.ClaimVerdict { return store.ClaimStop }})
	if got, _ := stop.Take([]string{"a", "b"}, 3, p.read(stop.SkipTask)); len(got) != 0 || !stop.Stopped {
		t.Fatalf("a stopped group took %v (stopped %v)", got, stop.Stopped)
	}
	if more, _ := stop.Take([]string{"a"}, 3, p.read(stop.SkipTask)); len(more) != 0 {
		t.Fatalf("a claim after the stop took %v", more)
	}
}
