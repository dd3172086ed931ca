package node

import (
	"context"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/flexiq/flexiq/auth"
	"github.com/flexiq/flexiq/bus"
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
