package api

// Shape checks of the worker and event requests. Every surface (the NATS
// subjects, gRPC) decodes into these types and calls these checks, so a
// request is refused with the same message wherever it comes from. A
// check may fill in a default (a claim's max, a lease), which the actor
// then relies on.

// MaxWaitMS bounds a claim's long poll, so a parked claim never outlives a
// client's patience by much.
const MaxWaitMS = 5 * 60 * 1000

// MaxLeaseMS bounds a lease: a day.
const MaxLeaseMS = 24 * 60 * 60 * 1000

// MaxNackErrorBytes bounds a nack's error text; longer text is cut.
const MaxNackErrorBytes = 64 << 10

// Validate checks a claim and fills in its defaults (max 1, the default
// lease).
func (r *ClaimRequest) Validate() error {
	if len(r.Queues) == 0 {
		return InvalidArgument("queues: must name at least one queue")
	}
	for _, q := range r.Queues {
		if err := CheckName("queues", q); err != nil {
			return err
		}
	}
	if r.Max == 0 {
		r.Max = 1
	}
	if r.Max < 1 || r.Max > MaxClaim {
		return InvalidArgument("max: must be 1-%d, got %d", MaxClaim, r.Max)
	}
	if r.WaitMS < 0 || r.WaitMS > MaxWaitMS {
		return InvalidArgument("wait_ms: must be 0-%d, got %d", MaxWaitMS, r.WaitMS)
	}
	if err := checkLease(&r.LeaseMS); err != nil {
		return err
	}
	if len(r.Worker) > MaxIDBytes {
		return InvalidArgument("worker: must be at most %d bytes", MaxIDBytes)
	}
	return nil
}

// checkLease fills in the default lease and bounds it.
func checkLease(ms *int64) error {
	if *ms == 0 {
		*ms = DefaultLeaseMS
	}
	if *ms < 1 || *ms > MaxLeaseMS {
		return InvalidArgument("lease_ms: must be 1-%d, got %d", MaxLeaseMS, *ms)
	}
	return nil
}

// Validate checks a heartbeat and fills in the default lease.
func (r *HeartbeatRequest) Validate() error {
	if len(r.IDs) == 0 {
		return InvalidArgument("ids: must name at least one job")
	}
	if len(r.IDs) > MaxClaim {
		return InvalidArgument("ids: at most %d per heartbeat, got %d", MaxClaim, len(r.IDs))
	}
	return checkLease(&r.LeaseMS)
}

// Validate checks an ack: one id, or a batch of entries (Acks).
func (r *AckRequest) Validate() error {
	if len(r.Acks) > 0 {
		if r.ID != "" || r.Result != nil || r.Attempt != 0 {
			return InvalidArgument("acks: give either id or acks, not both")
		}
		if len(r.Acks) > MaxClaim {
			return InvalidArgument("acks: at most %d per ack, got %d", MaxClaim, len(r.Acks))
		}
		for i, a := range r.Acks {
			if a.ID == "" {
				return InvalidArgument("acks[%d].id: required", i)
			}
			if len(a.Result) > MaxPayloadBytes {
				return InvalidArgument("acks[%d].result: must be at most %d bytes, got %d", i, MaxPayloadBytes, len(a.Result))
			}
		}
		return nil
	}
	if r.ID == "" {
		return InvalidArgument("id: required")
	}
	if len(r.Result) > MaxPayloadBytes {
		return InvalidArgument("result: must be at most %d bytes, got %d", MaxPayloadBytes, len(r.Result))
	}
	return nil
}

// Parts splits a batched ack into one ack per entry, which the actor
// decides each on its own (one lost lease does not fail the others); nil
// for a single ack.
func (r *AckRequest) Parts() []*AckRequest {
	if len(r.Acks) == 0 {
		return nil
	}
	out := make([]*AckRequest, len(r.Acks))
	for i, a := range r.Acks {
		out[i] = &AckRequest{ID: a.ID, Result: a.Result, Attempt: a.Attempt}
	}
	return out
}

// Gather is the reply to a batched ack whose parts were answered with errs
// (nil: completed), in order.
func (r *AckRequest) Gather(errs []*Error) AckReply {
	out := AckReply{Results: make([]AckResult, len(r.Acks))}
	for i, a := range r.Acks {
		out.Results[i] = AckResult{ID: a.ID, Error: errs[i]}
	}
	return out
}

// Validate checks a nack; an error text over MaxNackErrorBytes is cut.
func (r *NackRequest) Validate() error {
	if r.ID == "" {
		return InvalidArgument("id: required")
	}
	if r.Release {
		if r.Error != "" {
			return InvalidArgument("error: a release records no error (it gives back a job never started)")
		}
		if r.Retry != nil && !*r.Retry {
			return InvalidArgument("retry: false cannot go with release (a released job is pending again)")
		}
		return nil
	}
	if len(r.Error) > MaxNackErrorBytes {
		r.Error = r.Error[:MaxNackErrorBytes]
	}
	return nil
}

// Validate checks an event.
func (r *EventRequest) Validate() error {
	if r.Name == "" || len(r.Name) > MaxNameBytes {
		return InvalidArgument("name: must be 1-%d bytes, got %d", MaxNameBytes, len(r.Name))
	}
	if len(r.Payload) > MaxPayloadBytes {
		return InvalidArgument("payload: must be at most %d bytes, got %d", MaxPayloadBytes, len(r.Payload))
	}
	return nil
}
