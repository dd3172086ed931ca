package node

import (
	"context"
	"sync"
	"time"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/cluster"
)

// adoption wakes the actors of the namespaces that have running jobs in
// the partitions this node takes over (all of them, on a single node that
// starts). An actor watches the leases of its namespace's running jobs
// only while it is up, and it comes up on a call: without this, the jobs
// a dead node had claimed would stay running until some call for their
// namespace reached the new owner (docs/cluster.md "Failure and
// shutdown").
type adoption struct {
	mu    sync.Mutex
	parts map[int]bool
	all   bool
	kick  chan struct{}
}

func newAdoption() *adoption {
	return &adoption{parts: map[int]bool{}, kick: make(chan struct{}, 1)}
}

// add asks for the namespaces of parts to be woken (all: every one).
func (a *adoption) add(parts []int, all bool) {
	a.mu.Lock()
	for _, p := range parts {
		a.parts[p] = true
	}
	a.all = a.all || all
	a.mu.Unlock()
	select {
	case a.kick <- struct{}{}:
	default:
	}
}

// take returns what was asked since the last take.
func (a *adoption) take() (parts map[int]bool, all bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	parts, all = a.parts, a.all
	a.parts, a.all = map[int]bool{}, false
	return parts, all
}

// adoptRetry is how long a failed listing waits before it is tried again.
const adoptRetry = time.Second

// startAdoption runs the adoption loop until ctx ends; on a single node it
// first wakes every namespace with running jobs (a restart after a crash).
func (n *Node) startAdoption(ctx context.Context) {
	if n.cluster == nil {
		n.adopt.add(nil, true)
	}
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		for {
			select {
			case <-ctx.Done():
				return
			case <-n.adopt.kick:
			}
			parts, all := n.adopt.take()
			if err := n.wakeRunning(ctx, parts, all); err != nil {
				n.log.Warn("cannot list the namespaces with running jobs; trying again", "err", err)
				keep := make([]int, 0, len(parts))
				for p := range parts {
					keep = append(keep, p)
				}
				select {
				case <-ctx.Done():
					return
				case <-time.After(adoptRetry):
				}
				n.adopt.add(keep, all)
			}
		}
	}()
}

// wakeRunning sends OpWake to the namespaces with running jobs that are in
// parts (or all) and that this node owns now.
func (n *Node) wakeRunning(ctx context.Context, parts map[int]bool, all bool) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := n.Store.JobRunningNamespaces(ctx)
	if err != nil {
		return err
	}
	woken := 0
	for _, ns := range list {
		if !all && !parts[cluster.PartitionOf(ns)] {
			continue
		}
		if n.cluster != nil {
			if _, mine := n.cluster.Owner(ns); !mine {
				continue
			}
		}
		n.Actors.Send(ns, &actors.Message{Op: actors.OpWake})
		woken++
	}
	if woken > 0 {
		n.log.Info("woke namespaces with running jobs", "namespaces", woken)
	}
	return nil
}
