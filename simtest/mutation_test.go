package simtest

import (
	"context"
	"testing"
	"time"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/cachebust"
	"github.com/flexiq/flexiq/store"
)

// Each test here breaks one rule on purpose, in a wrapper around the store
// or the quota cache the actors see, and wants the simulator to report that
// rule's invariant. The same seeds pass unbroken in TestSeeds.

// expectViolation plays seeds with tweak until one reports inv, once with
// the actors writing call by call (as on PostgreSQL and Redis) and once
// with each actor step as one transaction (as on SQLite). A tweak that
// sets StepTx itself plays in that mode only.
func expectViolation(t *testing.T, inv string, tweak func(*Config)) {
	t.Helper()
	// Tweaks only set fields, so one applied to an empty Config tells
	// whether it asks for a mode.
	probe := Config{}
	tweak(&probe)
	modes := []bool{false, true}
	if probe.StepTx {
		modes = []bool{true}
	}
	for _, step := range modes {
		name := "calls"
		if step {
			name = "step"
		}
		t.Run(name, func(t *testing.T) {
			for seed := uint64(1); seed <= 30; seed++ {
				s := runSeed(t, seed, 0.5, func(c *Config) {
					c.Faults = FaultConfig{}
					c.KeepGoing = true
					c.StepTx = step
					tweak(c)
				})
				for _, v := range s.Violations() {
					if v.Inv == inv {
						t.Logf("seed %d caught it (first violation: %v)", seed, s.Violations()[0])
						return
					}
				}
			}
			t.Fatalf("no seed reported %s", inv)
		})
	}
}

// mutations override some of a store's methods. Each gets next, the store
// or step transaction it wraps, and must write through it only: in a step,
// a write beside the transaction would wait for the lock the step holds.
type mutations struct {
	enqueue func(ctx context.Context, next actors.Store, p store.JobEnqueueManyParams) ([][]api.EnqueueResult, error)
	claim   func(ctx context.Context, next actors.Store, p store.JobClaimManyParams) ([][]store.Job, error)
	update  func(ctx context.Context, next actors.Store, p store.JobUpdateManyParams) ([]bool, error)
	count   func(ctx context.Context, next actors.Store, ns string) (store.Counts, error)
}

// mutate wraps s with m. When s runs steps as transactions, so does the
// wrapper, and each step transaction is mutated alike.
func mutate(s actors.Store, m mutations) actors.Store {
	w := &storeMutant{Store: s, m: m}
	if sp, ok := s.(interface {
		BeginStep(context.Context) store.StepTx
	}); ok {
		return &steppingMutant{storeMutant: w, begin: sp.BeginStep}
	}
	return w
}

// storeMutant is a store with mutations.
type storeMutant struct {
	actors.Store
	m mutations
}

func (w *storeMutant) JobEnqueueMany(ctx context.Context, p store.JobEnqueueManyParams) ([][]api.EnqueueResult, error) {
	if w.m.enqueue != nil {
		return w.m.enqueue(ctx, w.Store, p)
	}
	return w.Store.JobEnqueueMany(ctx, p)
}

func (w *storeMutant) JobClaimMany(ctx context.Context, p store.JobClaimManyParams) ([][]store.Job, error) {
	if w.m.claim != nil {
		return w.m.claim(ctx, w.Store, p)
	}
	return w.Store.JobClaimMany(ctx, p)
}

func (w *storeMutant) JobUpdateMany(ctx context.Context, p store.JobUpdateManyParams) ([]bool, error) {
	if w.m.update != nil {
		return w.m.update(ctx, w.Store, p)
	}
	return w.Store.JobUpdateMany(ctx, p)
}

func (w *storeMutant) JobCount(ctx context.Context, ns string) (store.Counts, error) {
	if w.m.count != nil {
		return w.m.count(ctx, w.Store, ns)
	}
	return w.Store.JobCount(ctx, ns)
}

// steppingMutant is a storeMutant over a store that runs steps.
type steppingMutant struct {
	*storeMutant
	begin func(context.Context) store.StepTx
}

func (w *steppingMutant) BeginStep(ctx context.Context) store.StepTx {
	tx := w.begin(ctx)
	return &txMutant{StepTx: tx, storeMutant: &storeMutant{Store: tx, m: w.m}}
}

// txMutant is a step transaction with the mutations: the store methods go
// through storeMutant, Commit and Rollback straight to the transaction.
type txMutant struct {
	store.StepTx
	*storeMutant
}

func (t *txMutant) JobEnqueueMany(ctx context.Context, p store.JobEnqueueManyParams) ([][]api.EnqueueResult, error) {
	return t.storeMutant.JobEnqueueMany(ctx, p)
}

func (t *txMutant) JobClaimMany(ctx context.Context, p store.JobClaimManyParams) ([][]store.Job, error) {
	return t.storeMutant.JobClaimMany(ctx, p)
}

func (t *txMutant) JobUpdateMany(ctx context.Context, p store.JobUpdateManyParams) ([]bool, error) {
	return t.storeMutant.JobUpdateMany(ctx, p)
}

func (t *txMutant) JobCount(ctx context.Context, ns string) (store.Counts, error) {
	return t.storeMutant.JobCount(ctx, ns)
}

func (t *txMutant) JobGet(ctx context.Context, ns, id string) (store.Job, error) {
	return t.StepTx.JobGet(ctx, ns, id)
}

func (t *txMutant) JobNextRunAt(ctx context.Context, ns string, queues []string) (time.Time, bool, error) {
	return t.StepTx.JobNextRunAt(ctx, ns, queues)
}

func (t *txMutant) JobListRunning(ctx context.Context, ns string) ([]store.Job, error) {
	return t.StepTx.JobListRunning(ctx, ns)
}

// snapMutant rewrites snapshots on their way to the actors.
type snapMutant struct {
	inner actors.Snapshots
	fn    func(ns string, s cachebust.Snapshot) cachebust.Snapshot
}

func (m *snapMutant) Get(ctx context.Context, ns string, now time.Time) cachebust.Snapshot {
	return m.fn(ns, m.inner.Get(ctx, ns, now))
}

func mutateSnapshots(fn func(ns string, s cachebust.Snapshot) cachebust.Snapshot) func(actors.Snapshots) actors.Snapshots {
	return func(in actors.Snapshots) actors.Snapshots { return &snapMutant{inner: in, fn: fn} }
}

func quotaAll(c *Config, doc string) {
	for _, ns := range c.Namespaces {
		c.World.Quota[ns] = doc
	}
	c.Chaos.QuotaEvery = 0
}

// A gate that ignores max_running: the store takes every due job.
func TestMutationRunningCap(t *testing.T) {
	expectViolation(t, InvRunningCap, func(c *Config) {
		quotaAll(c, `{"max_running":1}`)
		c.WrapStore = func(s actors.Store) actors.Store {
			return mutate(s, mutations{claim: func(ctx context.Context, next actors.Store, p store.JobClaimManyParams) ([][]store.Job, error) {
				p.Allow, p.ExcludeTasks = nil, nil
				return next.JobClaimMany(ctx, p)
			}})
		}
	})
}

// A cache that loses max_pending on the way to the actor.
func TestMutationPendingCap(t *testing.T) {
	expectViolation(t, InvPendingCap, func(c *Config) {
		quotaAll(c, `{"max_pending":3}`)
		c.WrapSnapshots = mutateSnapshots(func(_ string, s cachebust.Snapshot) cachebust.Snapshot {
			s.Quota.MaxPending = nil
			return s
		})
	})
}

// A bucket that never runs out (the rate never reaches admission).
func TestMutationRate(t *testing.T) {
	expectViolation(t, InvRate, func(c *Config) {
		quotaAll(c, `{"enqueue_rate":"2/s"}`)
		c.WrapSnapshots = mutateSnapshots(func(_ string, s cachebust.Snapshot) cachebust.Snapshot {
			s.Quota.EnqueueRate = nil
			return s
		})
	})
}

// A claim that also hands out a shed job.
func TestMutationShedClaimed(t *testing.T) {
	expectViolation(t, InvShedClaimed, func(c *Config) {
		quotaAll(c, `{"max_pending":2,"on_excess":"drop"}`)
		c.WrapStore = func(s actors.Store) actors.Store {
			var shed []store.NewJob
			return mutate(s, mutations{
				enqueue: func(ctx context.Context, next actors.Store, p store.JobEnqueueManyParams) ([][]api.EnqueueResult, error) {
					res, err := next.JobEnqueueMany(ctx, p)
					if err == nil {
						for _, call := range p.Calls {
							if call.ShedError != "" {
								shed = append(shed, call.Jobs...)
							}
						}
					}
					return res, err
				},
				claim: func(ctx context.Context, next actors.Store, p store.JobClaimManyParams) ([][]store.Job, error) {
					res, err := next.JobClaimMany(ctx, p)
					if err == nil && len(shed) > 0 && len(res) > 0 {
						j := shed[0]
						shed = shed[1:]
						res[0] = append(res[0], store.Job{Namespace: p.Namespace, ID: j.ID, Queue: j.Queue, Task: j.Task,
							Status: api.StatusRunning, Attempt: 1, Shed: true, LeaseUntil: p.Claims[0].LeaseUntil})
					}
					return res, err
				},
			})
		}
	})
}

// A write that drops the last job of a batch (and says it landed).
func TestMutationBatchWhole(t *testing.T) {
	expectViolation(t, InvBatchWhole, func(c *Config) {
		quotaAll(c, `{}`)
		c.Load.Batch, c.Load.MaxBatch = 0.8, 4
		c.WrapStore = func(s actors.Store) actors.Store {
			return mutate(s, mutations{enqueue: func(ctx context.Context, next actors.Store, p store.JobEnqueueManyParams) ([][]api.EnqueueResult, error) {
				var dropped []*store.NewJob
				calls := make([]store.EnqueueCall, len(p.Calls))
				for i, call := range p.Calls {
					if n := len(call.Jobs); n > 1 {
						dropped = append(dropped, &call.Jobs[n-1])
						call.Jobs = call.Jobs[:n-1]
					} else {
						dropped = append(dropped, nil)
					}
					calls[i] = call
				}
				p.Calls = calls
				res, err := next.JobEnqueueMany(ctx, p)
				for i := range res {
					if j := dropped[i]; j != nil {
						res[i] = append(res[i], api.EnqueueResult{ID: j.ID, Outcome: api.OutcomeEnqueued})
					}
				}
				return res, err
			}})
		}
	})
}

// A write that lands a job twice is a batch written twice.
func TestMutationWrittenTwice(t *testing.T) {
	expectViolation(t, InvBatchWhole, func(c *Config) {
		quotaAll(c, `{}`)
		c.WrapStore = func(s actors.Store) actors.Store {
			return mutate(s, mutations{enqueue: func(ctx context.Context, next actors.Store, p store.JobEnqueueManyParams) ([][]api.EnqueueResult, error) {
				res, err := next.JobEnqueueMany(ctx, p)
				if err == nil && len(p.Calls) == 1 && len(p.Calls[0].Jobs) == 1 && p.Calls[0].Jobs[0].Generated {
					again := p
					again.Calls = []store.EnqueueCall{{Jobs: []store.NewJob{p.Calls[0].Jobs[0]}}}
					again.Calls[0].Jobs[0].ID += "-again"
					_, _ = next.JobEnqueueMany(ctx, again)
				}
				return res, err
			}})
		}
	})
}

// A write that acknowledges a job it never stored.
func TestMutationLostEnqueue(t *testing.T) {
	expectViolation(t, InvLost, func(c *Config) {
		quotaAll(c, `{}`)
		c.WrapStore = func(s actors.Store) actors.Store {
			n := 0
			return mutate(s, mutations{enqueue: func(ctx context.Context, next actors.Store, p store.JobEnqueueManyParams) ([][]api.EnqueueResult, error) {
				n++
				if n%5 == 0 && len(p.Calls) == 1 && len(p.Calls[0].Jobs) == 1 && p.Calls[0].ShedError == "" {
					return [][]api.EnqueueResult{{{ID: p.Calls[0].Jobs[0].ID, Outcome: api.OutcomeEnqueued}}}, nil
				}
				return next.JobEnqueueMany(ctx, p)
			}})
		}
	})
}

// stepMutant is a step transaction whose commit may lie.
type stepMutant struct {
	store.StepTx
	commit func(ctx context.Context) error
}

func (m *stepMutant) Commit(ctx context.Context) error { return m.commit(ctx) }

// A step commit that reports success but rolled back: every answer of the
// step claims what never happened.
func TestMutationStepCommitLies(t *testing.T) {
	expectViolation(t, InvLost, func(c *Config) {
		quotaAll(c, `{}`)
		c.StepTx = true
		n := 0
		c.WrapStep = func(tx store.StepTx) store.StepTx {
			return &stepMutant{StepTx: tx, commit: func(ctx context.Context) error {
				if n++; n%7 == 0 {
					tx.Rollback()
					return nil
				}
				return tx.Commit(ctx)
			}}
		}
	})
}

// A cache that never refreshes: quota changes never arrive, broadcast or
// TTL.
func TestMutationQuotaTTL(t *testing.T) {
	expectViolation(t, InvTTL, func(c *Config) {
		c.Chaos.QuotaEvery = c.TTL
		c.WrapSnapshots = func(in actors.Snapshots) actors.Snapshots {
			first := map[string]cachebust.Snapshot{}
			return &snapMutant{inner: in, fn: func(ns string, s cachebust.Snapshot) cachebust.Snapshot {
				if f, ok := first[ns]; ok {
					return f
				}
				first[ns] = s
				return s
			}}
		}
	})
}

// A namespace whose quota does not decode, run anyway.
func TestMutationFailClosed(t *testing.T) {
	expectViolation(t, InvFailClosed, func(c *Config) {
		c.Chaos.Corrupt = 0.6
		c.WrapSnapshots = mutateSnapshots(func(_ string, s cachebust.Snapshot) cachebust.Snapshot {
			s.Err = nil
			return s
		})
	})
}

// One namespace's unreadable quota stopping every namespace.
func TestMutationIsolation(t *testing.T) {
	expectViolation(t, InvIsolation, func(c *Config) {
		c.Chaos.Corrupt = 0.6
		c.WrapSnapshots = func(in actors.Snapshots) actors.Snapshots {
			var stop *api.Error
			return &snapMutant{inner: in, fn: func(_ string, s cachebust.Snapshot) cachebust.Snapshot {
				if s.Err != nil {
					stop = s.Err
				}
				if stop != nil {
					s.Err = stop
				}
				return s
			}}
		}
	})
}

// A claim that takes held-back jobs too and puts them back: their attempt
// moved though no worker got them.
func TestMutationHeldBackAttempt(t *testing.T) {
	expectViolation(t, InvAttempt, func(c *Config) {
		quotaAll(c, `{"max_running":1}`)
		c.WrapStore = func(s actors.Store) actors.Store {
			return mutate(s, mutations{claim: func(ctx context.Context, next actors.Store, p store.JobClaimManyParams) ([][]store.Job, error) {
				var forced []bool // per job taken, in order: was it held back?
				if allow := p.Allow; allow != nil {
					p.Allow = func(queue, task string) store.ClaimVerdict {
						v := allow(queue, task)
						forced = append(forced, v != store.ClaimTake)
						return store.ClaimTake
					}
				}
				p.ExcludeTasks = nil
				res, err := next.JobClaimMany(ctx, p)
				if err != nil {
					return res, err
				}
				k := 0
				var back store.JobUpdateManyParams
				back.Namespace, back.Now = p.Namespace, p.Now
				for ci := range res {
					var keep []store.Job
					for _, j := range res[ci] {
						if k < len(forced) && forced[k] {
							back.Updates = append(back.Updates, store.JobUpdate{ID: j.ID, Attempt: j.Attempt, Kind: store.UpdateRetry, RunAt: p.Now})
						} else {
							keep = append(keep, j)
						}
						k++
					}
					res[ci] = keep
				}
				if len(back.Updates) > 0 {
					if _, err := next.JobUpdateMany(ctx, back); err != nil {
						return nil, err
					}
				}
				return res, nil
			}})
		}
	})
}

// Counts read wrong at load: the actor's counts drift from the store.
func TestMutationCounts(t *testing.T) {
	expectViolation(t, InvCounts, func(c *Config) {
		c.Chaos.RestartEvery = c.TTL
		c.WrapStore = func(s actors.Store) actors.Store {
			return mutate(s, mutations{count: func(ctx context.Context, next actors.Store, ns string) (store.Counts, error) {
				n, err := next.JobCount(ctx, ns)
				if n.Pending > 0 {
					n.Pending--
				}
				return n, err
			}})
		}
	})
}

// Lease expiries that never reach the store: slots stay taken.
func TestMutationLease(t *testing.T) {
	expectViolation(t, InvLease, func(c *Config) {
		c.Load.Crash = 0.3
		c.WrapStore = func(s actors.Store) actors.Store {
			return mutate(s, mutations{update: func(ctx context.Context, next actors.Store, p store.JobUpdateManyParams) ([]bool, error) {
				var keep []store.JobUpdate
				var idx []int
				for i, u := range p.Updates {
					if u.Error != leaseExpired {
						keep = append(keep, u)
						idx = append(idx, i)
					}
				}
				out := make([]bool, len(p.Updates))
				for i := range out {
					out[i] = true
				}
				if len(keep) == 0 {
					return out, nil
				}
				p.Updates = keep
				applied, err := next.JobUpdateMany(ctx, p)
				for k, i := range idx {
					if k < len(applied) {
						out[i] = applied[k]
					}
				}
				return out, err
			}})
		}
	})
}

// Retries without backoff.
func TestMutationBackoff(t *testing.T) {
	expectViolation(t, InvBackoff, func(c *Config) {
		c.Load.Nack = 0.5
		c.WrapStore = func(s actors.Store) actors.Store {
			return mutate(s, mutations{update: func(ctx context.Context, next actors.Store, p store.JobUpdateManyParams) ([]bool, error) {
				ups := make([]store.JobUpdate, len(p.Updates))
				for i, u := range p.Updates {
					if u.Kind == store.UpdateRetry {
						u.RunAt = p.Now
					}
					ups[i] = u
				}
				p.Updates = ups
				return next.JobUpdateMany(ctx, p)
			}})
		}
	})
}

// An actor that panics is rebuilt, but the simulator reports it.
func TestMutationPanic(t *testing.T) {
	expectViolation(t, InvPanic, func(c *Config) {
		c.WrapSnapshots = func(in actors.Snapshots) actors.Snapshots {
			n := 0
			return &snapMutant{inner: in, fn: func(_ string, s cachebust.Snapshot) cachebust.Snapshot {
				n++
				if n == 50 {
					panic("injected")
				}
				return s
			}}
		}
	})
}

// TestKnownBugs shows each product bug the simulator tolerates by default
// still happens. When one is fixed this test fails: remove its tolerance
// (KnownBugs) and its case here.
func TestKnownBugs(t *testing.T) {
	cases := []struct {
		bug, inv string
		tweak    func(*Config)
	}{
		{BugBucketForgotten, InvRate, func(c *Config) {
			quotaAll(c, `{"enqueue_rate":"5/m"}`)
			c.Chaos.RestartEvery, c.Chaos.MoveEvery = time.Second, time.Second
			c.Faults = FaultConfig{}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.bug, func(t *testing.T) {
			for seed := uint64(1); seed <= 40; seed++ {
				s := runSeed(t, seed, 0.5, func(c *Config) {
					tc.tweak(c)
					c.Tolerate = KnownBugs()
					delete(c.Tolerate, tc.bug)
				})
				if v := s.Violations(); len(v) > 0 && v[0].Inv == tc.inv {
					t.Logf("seed %d: %v", seed, v[0])
					return
				}
			}
			t.Fatalf("%s no longer shows (as %s) in 40 seeds: fixed? Remove its tolerance", tc.bug, tc.inv)
		})
	}
}
