package auth

import "github.com/flexiq/flexiq/api"

// Action is a call that more than one surface offers: the permission it
// needs and how a refusal names it ("a worker token may not enqueue").
// The surfaces check the same Action, so a role that may not make a call
// is refused with the same message over NATS, HTTP and gRPC.
type Action struct {
	Perm Permission
	// What completes "a <role> token may not …".
	What string
}

// The actions shared by the NATS subjects, the admin door and gRPC.
var (
	ActEnqueue   = Action{Produce, "enqueue"}
	ActEvent     = Action{Produce, "publish events"}
	ActClaim     = Action{Work, "claim jobs"}
	ActHeartbeat = Action{Work, "heartbeat"}
	ActAck       = Action{Work, "ack"}
	ActNack      = Action{Work, "nack"}
	ActReplay    = Action{Admin, "replay dead letters"}

	ActReadQuota   = Action{Admin, "read the quota"}
	ActSetQuota    = Action{Admin, "set the quota"}
	ActChangeQuota = Action{Admin, "change the quota"}
	ActClearQuota  = Action{Admin, "clear the quota"}
	ActReadUsage   = Action{Admin, "read usage"}
	ActListJobs    = Action{Admin, "list jobs"}
)

// Allow returns PERMISSION_DENIED unless p may do a.
func (p Principal) Allow(a Action) *api.Error { return p.Check(a.Perm, a.What) }
