package node

import "context"

// startMaintenance starts the maintenance loops of this node (retention
// leader, dead-letter auto-retry, periodic fires).
func (n *Node) startMaintenance(ctx context.Context) {
	_ = ctx
}
