package bus

import (
	"github.com/flexiq/flexiq/api"
)

// Request bodies with their shape checks. The actor gets the api type.

type claimRequest api.ClaimRequest

// maxWait bounds a long poll, so a parked claim never outlives a client's
// patience by much.
const maxWait = 5 * 60 * 1000

func (r *claimRequest) validate() error {
	if len(r.Queues) == 0 {
		return api.InvalidArgument("queues: must name at least one queue")
	}
	for _, q := range r.Queues {
		if err := api.CheckName("queues", q); err != nil {
			return err
		}
	}
	if r.Max == 0 {
		r.Max = 1
	}
	if r.Max < 1 || r.Max > api.MaxClaim {
		return api.InvalidArgument("max: must be 1-%d, got %d", api.MaxClaim, r.Max)
	}
	if r.WaitMS < 0 || r.WaitMS > maxWait {
		return api.InvalidArgument("wait_ms: must be 0-%d, got %d", maxWait, r.WaitMS)
	}
	if err := checkLease(&r.LeaseMS); err != nil {
		return err
	}
	if len(r.Worker) > api.MaxIDBytes {
		return api.InvalidArgument("worker: must be at most %d bytes", api.MaxIDBytes)
	}
	return nil
}

func (r *claimRequest) body() any { return (*api.ClaimRequest)(r) }

// maxLease bounds a lease: a day.
const maxLease = 24 * 60 * 60 * 1000

func checkLease(ms *int64) error {
	if *ms == 0 {
		*ms = api.DefaultLeaseMS
	}
	if *ms < 1 || *ms > maxLease {
		return api.InvalidArgument("lease_ms: must be 1-%d, got %d", maxLease, *ms)
	}
	return nil
}

type heartbeatRequest api.HeartbeatRequest

func (r *heartbeatRequest) validate() error {
	if len(r.IDs) == 0 {
		return api.InvalidArgument("ids: must name at least one job")
	}
	if len(r.IDs) > api.MaxClaim {
		return api.InvalidArgument("ids: at most %d per heartbeat, got %d", api.MaxClaim, len(r.IDs))
	}
	return checkLease(&r.LeaseMS)
}

func (r *heartbeatRequest) body() any { return (*api.HeartbeatRequest)(r) }

type ackRequest api.AckRequest

func (r *ackRequest) validate() error {
	if len(r.Acks) > 0 {
		if r.ID != "" || r.Result != nil || r.Attempt != 0 {
			return api.InvalidArgument("acks: give either id or acks, not both")
		}
		if len(r.Acks) > api.MaxClaim {
			return api.InvalidArgument("acks: at most %d per ack, got %d", api.MaxClaim, len(r.Acks))
		}
		for i, a := range r.Acks {
			if a.ID == "" {
				return api.InvalidArgument("acks[%d].id: required", i)
			}
			if len(a.Result) > api.MaxPayloadBytes {
				return api.InvalidArgument("acks[%d].result: must be at most %d bytes, got %d", i, api.MaxPayloadBytes, len(a.Result))
			}
		}
		return nil
	}
	if r.ID == "" {
		return api.InvalidArgument("id: required")
	}
	if len(r.Result) > api.MaxPayloadBytes {
		return api.InvalidArgument("result: must be at most %d bytes, got %d", api.MaxPayloadBytes, len(r.Result))
	}
	return nil
}

func (r *ackRequest) body() any { return (*api.AckRequest)(r) }

// parts splits a batched ack into one ack per entry: the actor decides
// each on its own, and they land in the same step.
func (r *ackRequest) parts() []any {
	if len(r.Acks) == 0 {
		return nil
	}
	out := make([]any, len(r.Acks))
	for i, a := range r.Acks {
		out[i] = &api.AckRequest{ID: a.ID, Result: a.Result, Attempt: a.Attempt}
	}
	return out
}

// gather collects the answers of a batched ack's parts into one reply.
func (r *ackRequest) gather(errs []*api.Error) any {
	out := api.AckReply{Results: make([]api.AckResult, len(r.Acks))}
	for i, a := range r.Acks {
		out.Results[i] = api.AckResult{ID: a.ID, Error: errs[i]}
	}
	return out
}

type nackRequest api.NackRequest

// maxErrorBytes bounds a nack's error text.
const maxErrorBytes = 64 << 10

func (r *nackRequest) validate() error {
	if r.ID == "" {
		return api.InvalidArgument("id: required")
	}
	if len(r.Error) > maxErrorBytes {
		r.Error = r.Error[:maxErrorBytes]
	}
	return nil
}

func (r *nackRequest) body() any { return (*api.NackRequest)(r) }

type eventRequest api.EventRequest

func (r *eventRequest) validate() error {
	if r.Name == "" || len(r.Name) > api.MaxNameBytes {
		return api.InvalidArgument("name: must be 1-%d bytes, got %d", api.MaxNameBytes, len(r.Name))
	}
	if len(r.Payload) > api.MaxPayloadBytes {
		return api.InvalidArgument("payload: must be at most %d bytes, got %d", api.MaxPayloadBytes, len(r.Payload))
	}
	return nil
}

func (r *eventRequest) body() any { return (*api.EventRequest)(r) }

type replayRequest api.ReplayRequest

func (r *replayRequest) validate() error { return (*api.ReplayRequest)(r).Validate() }

func (r *replayRequest) body() any { return (*api.ReplayRequest)(r) }

type enqueueRequest api.EnqueueRequest

func (r *enqueueRequest) validate() error { return (*api.EnqueueRequest)(r).Validate() }
func (r *enqueueRequest) body() any       { return (*api.EnqueueRequest)(r) }
