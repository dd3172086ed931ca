package bus

import (
	"github.com/flexiq/flexiq/api"
)

// Request bodies: the api types, with the shape checks every surface
// shares (api's Validate methods). The actor gets the api type.

type claimRequest api.ClaimRequest

func (r *claimRequest) validate() error { return (*api.ClaimRequest)(r).Validate() }
func (r *claimRequest) body() any       { return (*api.ClaimRequest)(r) }

type heartbeatRequest api.HeartbeatRequest

func (r *heartbeatRequest) validate() error { return (*api.HeartbeatRequest)(r).Validate() }
func (r *heartbeatRequest) body() any       { return (*api.HeartbeatRequest)(r) }

type ackRequest api.AckRequest

func (r *ackRequest) validate() error { return (*api.AckRequest)(r).Validate() }
func (r *ackRequest) body() any       { return (*api.AckRequest)(r) }

// parts splits a batched ack into one ack per entry: the actor decides
// each on its own, and they land in the same step.
func (r *ackRequest) parts() []any {
	parts := (*api.AckRequest)(r).Parts()
	if parts == nil {
		return nil
	}
	out := make([]any, len(parts))
	for i, p := range parts {
		out[i] = p
	}
	return out
}

// gather collects the answers of a batched ack's parts into one reply.
func (r *ackRequest) gather(errs []*api.Error) any { return (*api.AckRequest)(r).Gather(errs) }

type nackRequest api.NackRequest

func (r *nackRequest) validate() error { return (*api.NackRequest)(r).Validate() }
func (r *nackRequest) body() any       { return (*api.NackRequest)(r) }

type eventRequest api.EventRequest

func (r *eventRequest) validate() error { return (*api.EventRequest)(r).Validate() }
func (r *eventRequest) body() any       { return (*api.EventRequest)(r) }

type replayRequest api.ReplayRequest

func (r *replayRequest) validate() error { return (*api.ReplayRequest)(r).Validate() }
func (r *replayRequest) body() any       { return (*api.ReplayRequest)(r) }

type enqueueRequest api.EnqueueRequest

func (r *enqueueRequest) validate() error { return (*api.EnqueueRequest)(r).Validate() }
func (r *enqueueRequest) body() any       { return (*api.EnqueueRequest)(r) }
