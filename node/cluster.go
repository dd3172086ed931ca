package node

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/auth"
	"github.com/flexiq/flexiq/bus"
	"github.com/flexiq/flexiq/cluster"
	"github.com/flexiq/flexiq/retention"
	"github.com/flexiq/flexiq/store"
	"github.com/flexiq/flexiq/store/open"
)

// clusterSecret returns the cluster secret: given, read from
// <data-dir>/cluster.secret, or generated there (mode 0600) on first
// start. Every node of a cluster must be given the same one.
func clusterSecret(cfg Config) (string, error) {
	if cfg.ClusterSecret != "" {
		return cfg.ClusterSecret, nil
	}
	return loadOrCreateSecret(filepath.Join(cfg.DataDir, "cluster.secret"), "fq_cluster_", "cluster secret")
}

// ClusterSecretOf returns cfg's cluster secret as Start would (given,
// read, or generated into the data dir).
func ClusterSecretOf(cfg Config) (string, error) {
	if err := secureDataDir(cfg.DataDir, slog.New(slog.DiscardHandler)); err != nil {
		return "", err
	}
	return clusterSecret(cfg)
}

// tokenForgetter is what a revocation broadcast reaches: the request
// authenticator's cache and the embedded server's open connections.
type tokenForgetter struct {
	n *Node
}

func (f tokenForgetter) Forget(tokenID string) {
	f.n.authn.Forget(tokenID)
	if f.n.natsAuth != nil {
		f.n.natsAuth.Revoked(tokenID)
	}
	if f.n.callout != nil {
		f.n.callout.Revoked(tokenID)
	}
}

// startCallout serves the external server's auth callout (bus.Callout),
// with a system-account connection for kicking revoked tokens'
// connections when the server's configuration grants one.
func (n *Node) startCallout(authn *auth.Authenticator) {
	sys, err := bus.ConnectSys(n.cfg.NATSURL, n.secret, "flexiq-node-sys-"+n.cfg.NodeID)
	if err != nil {
		n.log.Warn("no system-account connection to the NATS server: a revoked token's open connections will not be closed, though its requests are refused", "err", err)
	}
	n.sysNC = sys
	n.callout, err = bus.ServeCallout(n.nc, sys, n.secret, authn, n.log)
	if err != nil {
		n.log.Warn("cannot serve the NATS auth callout", "err", err)
	}
}

// sweepConnections closes, every period, the connections of tokens
// revoked while their broadcast was lost.
func (n *Node) sweepConnections(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if n.natsAuth != nil {
				n.natsAuth.Sweep(ctx)
			}
			if n.callout != nil {
				n.callout.Sweep(ctx)
			}
		}
	}
}

// startCluster joins the cluster when the store can be shared: the node
// takes part in placement and leadership (cluster.Cluster) before it
// serves. On SQLite it is alone: every namespace is its own and it leads.
func (n *Node) startCluster(ctx context.Context) error {
	cs, ok := n.Store.(store.ClusterStore)
	if !ok || open.IsSQLite(n.cfg.Store) {
		return nil
	}
	n.cluster = cluster.New(cluster.Config{
		Node: n.cfg.NodeID, Maintenance: n.cfg.Maintenance, Store: cs, Log: n.log,
		Info: func() store.MemberInfo {
			info := store.MemberInfo{}
			if n.Actors != nil { // nil in the first round, run by Start
				info.Owned = n.Actors.Len()
			}
			if u, ok := n.adminURL.Load().(string); ok {
				info.Admin = u
			}
			return info
		},
		OnMembers: func(members []store.Member) {
			// A job record format newer than some live node reads waits
			// until every node reads it (a rolling upgrade).
			if f, ok := n.Store.(jobFormatter); ok {
				f.SetJobFormat(store.FormatEveryMemberReads(members))
			}
		},
		OnGained: func(parts []int) { n.adopt.add(parts, false) },
		OnLost: func(leases []string) {
			lost := map[int]bool{}
			for _, l := range leases {
				if p, ok := cluster.PartitionOfLease(l); ok {
					lost[p] = true
				}
			}
			evictCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			moved := func(ns string) bool { return lost[cluster.PartitionOf(ns)] }
			n.Actors.Evict(evictCtx, moved)
			n.History.Forget(moved)
		},
		Reachable: n.reachable(), JoinWait: n.cfg.ClusterJoinWait,
	})
	// The first round places this node before it takes calls; runCluster
	// starts the loop once the actors exist.
	n.cluster.Tick(ctx)
	return nil
}

// jobFormatter is a store that writes a newer job record format once
// every node on it reads that (the Redis store, store.JobFormat).
type jobFormatter interface{ SetJobFormat(format int) }

// reachable tells whether another node takes calls on this node's bus
// now: its embedded server knows the member's internal subscription,
// which crossed a route. With an external NATS server the routes are
// that server's, and every member counts as reachable (nil).
func (n *Node) reachable() func(node string) bool {
	if n.server == nil {
		return nil
	}
	acc := n.server.GlobalAccount()
	return func(node string) bool { return acc.SubscriptionInterest(api.SubjectInternalOp(node)) }
}

func (n *Node) runCluster() {
	if n.cluster == nil {
		return
	}
	n.clusterBG.Add(1)
	go func() {
		defer n.clusterBG.Done()
		n.cluster.Run(n.clusterCtx)
	}()
}

// leaveCluster hands this node's namespaces over (docs/cluster.md,
// SIGTERM): it stops acting for them, lets its actors answer what they
// hold, releases its leases, and keeps taking forwarded calls (passing
// them on) until the others have seen it go.
func (n *Node) leaveCluster(ctx context.Context) error {
	err := n.cluster.Leave(ctx, func(ctx context.Context) {
		if err := n.Actors.Stop(ctx); err != nil {
			n.log.Warn("actors did not stop in time", "err", err)
		}
	})
	n.clusterCancel()
	n.clusterBG.Wait()
	// Nodes that have not ticked since still forward here: pass those
	// calls on for a few of their ticks.
	t := time.NewTimer(3 * clusterTick)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return err
}

// clusterTick is how often a node heartbeats and renews its leases.
const clusterTick = 250 * time.Millisecond

// Cluster is the node's cluster view (nil on a single node).
func (n *Node) Cluster() *cluster.Cluster { return n.cluster }

// ClusterStatus is what GET /v1/cluster shows.
func (n *Node) ClusterStatus() cluster.Status {
	if n.cluster != nil {
		return n.cluster.Status()
	}
	st := cluster.Status{Node: n.cfg.NodeID, Members: []cluster.MemberStatus{{
		ID: n.cfg.NodeID, Ready: true, Owned: n.Actors.Len(), Maintenance: n.cfg.Maintenance, Partitions: cluster.Partitions,
	}}}
	if n.cfg.Maintenance {
		st.Leader = n.cfg.NodeID
	}
	return st
}

// OwnerOf is the node holding ns's actor, as this node sees it.
func (n *Node) OwnerOf(ns string) string {
	if n.cluster == nil {
		return n.cfg.NodeID
	}
	owner, _ := n.cluster.Owner(ns)
	return owner
}

// leader says whether this node leads maintenance now.
func (n *Node) leader() retention.Leader {
	if n.cluster != nil {
		return n.cluster
	}
	return retention.AlwaysLeader{}
}

// ClusterAddr is the embedded server's route listener ("" without one).
func (n *Node) ClusterAddr() string {
	if n.server == nil {
		return ""
	}
	if a := n.server.ClusterAddr(); a != nil {
		return a.String()
	}
	return ""
}

// Clustered reports whether the node shares its store with others (it
// takes part in placement).
func (n *Node) Clustered() bool { return n.cluster != nil }

// clusterMetrics exports how many calls this node passed on to their
// namespace's owner: with clients that follow the owner's partition hint
// it stays near zero (docs/cluster.md "Calls go straight to the owner");
// and how many live members it cannot pass calls to.
func (n *Node) clusterMetrics() {
	n.Metrics.Registry.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "flexiq_cluster_unreachable_members",
		Help: "Live members of the cluster this node has no route to on the bus (docs/cluster.md): calls for the namespaces they own wait, then fail, here.",
	}, func() float64 { return float64(len(n.cluster.Unreachable())) }))
	n.Metrics.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "flexiq_calls_forwarded_total",
		Help: "Client calls this node forwarded to the node owning their namespace.",
	}, func() float64 { return float64(n.service.Forwarded()) }))
}
