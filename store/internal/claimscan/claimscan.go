// Package claimscan is the walk of a group of claims that the SQL stores
// (PostgreSQL and SQLite) share. Each queue's available jobs are read a
// page at a time in dispatch order (priority, highest first, then run_at,
// then enqueue order); a claim takes the best head among its queues, one
// job at a time, and the namespace's gate (store.JobClaimManyParams.Allow)
// decides each job: take it, skip its task or its queue for the rest of
// the group, or stop the group. The stores read the pages and write what
// was taken; the order and the gate are decided here, once.
package claimscan

import (
	"math"
	"slices"

	"github.com/flexiq/flexiq/store"
)

// Candidate is an available job as a page lists it.
type Candidate struct {
	Seq      int64
	Task     string
	Priority int64
	RunAt    int64 // µs, as stored
}

// Before reports whether a goes out before b: priority desc, run_at, seq.
func (a *Candidate) Before(b *Candidate) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	if a.RunAt != b.RunAt {
		return a.RunAt < b.RunAt
	}
	return a.Seq < b.Seq
}

// Cursor walks one queue's available jobs in dispatch order, a page at a
// time, leaving out skipped tasks.
type Cursor struct {
	Queue string
	page  []Candidate
	pos   int // next candidate in page
	last  *Candidate
	done  bool
}

// After is the keyset the next page starts after. Before the first page
// it sits ahead of every job: priority MaxInt64 with run_at MinInt64 still
// lets jobs of priority MaxInt64 in.
func (c *Cursor) After() (priority, runAt, seq int64) {
	if c.last == nil {
		return math.MaxInt64, math.MinInt64, math.MinInt64
	}
	return c.last.Priority, c.last.RunAt, c.last.Seq
}

// Page empties the cursor's page for a read to refill through Add.
func (c *Cursor) Page() { c.page, c.pos = c.page[:0], 0 }

// Add appends a job the page read listed.
func (c *Cursor) Add(cd Candidate) { c.page = append(c.page, cd) }

// Read ends a page read that asked for limit jobs: a shorter page is the
// queue's last.
func (c *Cursor) Read(limit int) {
	if len(c.page) < limit {
		c.done = true
	}
	if len(c.page) > 0 {
		last := c.page[len(c.page)-1]
		c.last = &last
	}
}

// Gate is what a group's claims have learnt from the namespace's gate
// (store.JobClaimManyParams.Allow) as they take jobs in turn: the tasks
// and queues it skipped (and the tasks the group excludes), and whether
// it stopped the group. The Redis store, whose walk differs, asks it too.
type Gate struct {
	SkipTask  map[string]bool
	SkipQueue map[string]bool
	Stopped   bool
	allow     func(queue, task string) store.ClaimVerdict
}

// NewGate starts the gate of p's group.
func NewGate(p *store.JobClaimManyParams) Gate {
	g := Gate{SkipTask: map[string]bool{}, SkipQueue: map[string]bool{}, allow: p.Allow}
	for _, t := range p.ExcludeTasks {
		g.SkipTask[t] = true
	}
	return g
}

// Ask says whether a job of task in queue is taken; when it is not, the
// gate's verdict is kept (the task or queue skipped, or the group
// stopped).
func (g *Gate) Ask(queue, task string) bool {
	verdict := store.ClaimTake
	if g.allow != nil {
		verdict = g.allow(queue, task)
	}
	switch verdict {
	case store.ClaimSkipTask:
		g.SkipTask[task] = true
	case store.ClaimSkipQueue:
		g.SkipQueue[queue] = true
	case store.ClaimStop:
		g.Stopped = true
	default:
		return true
	}
	return false
}

// Group is what a group's claims share as they take jobs in turn: the
// gate, and the cursors (a page read for one claim serves the next, so a
// group of small claims reads each queue's head once).
type Group struct {
	Gate
	cursors map[string]*Cursor
}

// NewGroup starts the walk of p's claims.
func NewGroup(p *store.JobClaimManyParams) *Group {
	return &Group{Gate: NewGate(p), cursors: map[string]*Cursor{}}
}

// Cursor is queue q's cursor; made says it is new to the group.
func (g *Group) Cursor(q string) (c *Cursor, made bool) {
	if c = g.cursors[q]; c != nil {
		return c, false
	}
	c = &Cursor{Queue: q}
	g.cursors[q] = c
	return c, true
}

// Take takes up to max jobs for one claim from its queues' cursors, in
// dispatch order, asking the gate of each; read refills a cursor whose
// page ran out (it calls Page, Add and Read). It returns the seqs taken.
func (g *Group) Take(queues []string, max int, read func(*Cursor) error) ([]int64, error) {
	var mine []*Cursor
	for _, q := range queues {
		if c, _ := g.Cursor(q); !slices.Contains(mine, c) {
			mine = append(mine, c)
		}
	}
	var taken []int64
	for len(taken) < max && !g.Stopped {
		// The best head among the claim's queues, refilling pages as
		// they run out.
		var best *Cursor
		for _, c := range mine {
			if g.SkipQueue[c.Queue] {
				continue
			}
			for c.pos < len(c.page) && g.SkipTask[c.page[c.pos].Task] {
				c.pos++
			}
			if c.pos >= len(c.page) && !c.done {
				if err := read(c); err != nil {
					return nil, err
				}
			}
			if c.pos >= len(c.page) {
				continue
			}
			if best == nil || c.page[c.pos].Before(&best.page[best.pos]) {
				best = c
			}
		}
		if best == nil {
			break
		}
		cd := best.page[best.pos]
		best.pos++
		if g.Ask(best.Queue, cd.Task) {
			taken = append(taken, cd.Seq)
		}
	}
	return taken, nil
}
