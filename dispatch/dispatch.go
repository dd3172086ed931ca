// Package dispatch is the gate of docs/quotas.md for handing out a job: the
// namespace's max_running and the queue's and task's max_concurrent. It does
// no IO and reads no clock; the namespace actor owns the counts it checks.
package dispatch

import "sort"

// Limits are the caps that apply to a namespace's dispatch. A nil pointer
// is unlimited; zero dispatches nothing.
type Limits struct {
	MaxRunning *int64
	// Queue and Task hold max_concurrent per queue and per task name.
	Queue map[string]int64
	Task  map[string]int64
}

// Counts are the running jobs of a namespace, in total and per queue and
// task. The zero value is ready to use.
type Counts struct {
	Running int64
	Queue   map[string]int64
	Task    map[string]int64
}

// Allow reports whether one more job of queue and task may run now.
func (l Limits) Allow(c *Counts, queue, task string) bool {
	if l.MaxRunning != nil && c.Running >= *l.MaxRunning {
		return false
	}
	if max, ok := l.Queue[queue]; ok && c.Queue[queue] >= max {
		return false
	}
	if max, ok := l.Task[task]; ok && c.Task[task] >= max {
		return false
	}
	return true
}

// NamespaceFull reports whether the namespace cap alone stops every job.
func (l Limits) NamespaceFull(c *Counts) bool {
	return l.MaxRunning != nil && c.Running >= *l.MaxRunning
}

// QueueFull reports whether queue's cap is reached.
func (l Limits) QueueFull(c *Counts, queue string) bool {
	max, ok := l.Queue[queue]
	return ok && c.Queue[queue] >= max
}

// Binds reports whether handing out n more jobs of queues could meet a
// cap: the namespace's, one of those queues', or any task's (a claim does
// not know its jobs' tasks before it reads them). When it cannot, every
// one of them would be allowed, so a claim need not ask per job.
func (l Limits) Binds(c *Counts, queues []string, n int64) bool {
	if l.MaxRunning != nil && c.Running+n > *l.MaxRunning {
		return true
	}
	for _, q := range queues {
		if max, ok := l.Queue[q]; ok && c.Queue[q]+n > max {
			return true
		}
	}
	for task, max := range l.Task {
		if c.Task[task]+n > max {
			return true
		}
	}
	return false
}

// FullTasks lists the tasks whose cap is reached, so a claim can leave their
// jobs out of its scan instead of reading them and holding them back.
func (l Limits) FullTasks(c *Counts) []string {
	var out []string
	for task, max := range l.Task {
		if c.Task[task] >= max {
			out = append(out, task)
		}
	}
	sort.Strings(out) // map order is random; callers and simulations want it stable
	return out
}

// Add records a job of queue and task starting (delta 1) or ending (-1).
func (c *Counts) Add(queue, task string, delta int64) {
	if c.Queue == nil {
		c.Queue = map[string]int64{}
	}
	if c.Task == nil {
		c.Task = map[string]int64{}
	}
	c.Running += delta
	c.Queue[queue] += delta
	if c.Queue[queue] == 0 {
		delete(c.Queue, queue)
	}
	c.Task[task] += delta
	if c.Task[task] == 0 {
		delete(c.Task, task)
	}
}
