package node

import (
	"context"
	"time"

	"github.com/flexiq/flexiq/alarm"
	"github.com/flexiq/flexiq/maintenance"
	"github.com/flexiq/flexiq/retention"
)

// sweepEvery is how often periodic schedules and the dead-letter
// auto-retry sweep are checked (docs/admin-api.md: at least every second).
const sweepEvery = time.Second

// startMaintenance starts this node's maintenance: the retention leader,
// periodic fires and the dead-letter auto-retry sweep. On one node the node
// is always the leader; in a cluster the holder of the maintenance lease
// is (cluster.Cluster), and calls for namespaces owned elsewhere go to
// their owners (bus.RoutedSender).
func (n *Node) startMaintenance(ctx context.Context) {
	leader := n.leader()
	n.Cleaner = retention.New(retention.Config{
		ArchiveTTL: n.cfg.ArchiveTTL, DeadTTL: n.cfg.DeadTTL,
		Interval: n.cfg.CleanupInterval, Batch: n.cfg.CleanupBatch,
	}, n.Store, leader, n.Metrics, n.log, time.Now)
	periodic := maintenance.NewPeriodic(n.Store, n.sender, n.Metrics, n.log)
	retry := maintenance.NewAutoRetry(n.Store, n.sender, n.log)
	n.bg.Add(3)
	go func() {
		defer n.bg.Done()
		n.Cleaner.Run(ctx)
	}()
	go func() {
		defer n.bg.Done()
		maintenance.Loop(ctx, sweepEvery, leader, time.Now, n.log, "periodic fires", func(ctx context.Context, now time.Time) error {
			_, err := periodic.RunOnce(ctx, now)
			return err
		})
	}()
	go func() {
		defer n.bg.Done()
		maintenance.Loop(ctx, sweepEvery, leader, time.Now, n.log, "dead-letter auto-retry", func(ctx context.Context, now time.Time) error {
			_, err := retry.RunOnce(ctx, now)
			return err
		})
	}()
}

// startUsage samples the usage history and evaluates the quota alarms
// (docs/alarms.md) every SampleInterval. It runs on every node, maintenance
// or not: each node evaluates the namespaces it owns, the only node that
// sees their enqueue rate, so every namespace has one evaluator.
func (n *Node) startUsage(ctx context.Context) {
	eval := alarm.New(alarm.Config{
		Store: n.Store, Rates: n.History, Live: n.History, Observer: n.Metrics, Log: n.log,
		Owns: func(ns string) bool { return n.OwnerOf(ns) == n.cfg.NodeID },
	})
	n.bg.Add(1)
	go func() {
		defer n.bg.Done()
		maintenance.Loop(ctx, n.History.Interval(), retention.AlwaysLeader{}, time.Now, n.log, "usage sample and quota alarms", func(ctx context.Context, now time.Time) error {
			n.History.Sample(now)
			_, err := eval.RunOnce(ctx, now)
			return err
		})
	}()
}
