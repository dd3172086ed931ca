package grpcapi

import (
	"context"
	"fmt"
	"sync/atomic"

	"google.golang.org/grpc/status"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/auth"
	pb "github.com/flexiq/flexiq/grpcapi/flexiqv1"
)

// worker is the Worker service: the calls of fq.v1.claim, heartbeat, ack
// and nack.
type worker struct {
	pb.UnimplementedWorkerServer
	s *Server
}

var _ pb.WorkerServer = worker{}

func (w worker) Claim(ctx context.Context, in *pb.ClaimRequest) (*pb.ClaimResponse, error) {
	who, err := w.s.principal(ctx, auth.ActClaim)
	if err != nil {
		return nil, err
	}
	req := &api.ClaimRequest{Queues: in.GetQueues(), Max: int(in.GetMax()), WaitMS: in.GetWaitMs(), LeaseMS: in.GetLeaseMs(), Worker: in.GetWorker()}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	// The long poll is the actor's: it parks the claim until a job is due
	// or wait_ms has passed, and this handler waits for its answer.
	body, err := w.s.ask(ctx, who.Namespace, actors.OpClaim, req)
	if err != nil {
		return nil, err
	}
	reply, err := replyAs[api.ClaimReply](body)
	if err != nil {
		return nil, err
	}
	return &pb.ClaimResponse{Jobs: jobsOut(reply.Jobs)}, nil
}

func (w worker) Heartbeat(ctx context.Context, in *pb.HeartbeatRequest) (*pb.HeartbeatResponse, error) {
	who, err := w.s.principal(ctx, auth.ActHeartbeat)
	if err != nil {
		return nil, err
	}
	req := &api.HeartbeatRequest{IDs: in.GetIds(), LeaseMS: in.GetLeaseMs()}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	body, err := w.s.ask(ctx, who.Namespace, actors.OpHeartbeat, req)
	if err != nil {
		return nil, err
	}
	reply, err := replyAs[api.HeartbeatReply](body)
	if err != nil {
		return nil, err
	}
	return &pb.HeartbeatResponse{Extended: reply.Extended}, nil
}

func (w worker) Ack(ctx context.Context, in *pb.AckRequest) (*pb.AckResponse, error) {
	who, err := w.s.principal(ctx, auth.ActAck)
	if err != nil {
		return nil, err
	}
	req := &api.AckRequest{ID: in.GetId(), Attempt: in.GetAttempt()}
	if req.Result, err = jsonText("result", in.GetResult()); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	if _, err := w.s.ask(ctx, who.Namespace, actors.OpAck, req); err != nil {
		return nil, err
	}
	return &pb.AckResponse{}, nil
}

func (w worker) AckMany(ctx context.Context, in *pb.AckManyRequest) (*pb.AckManyResponse, error) {
	who, err := w.s.principal(ctx, auth.ActAck)
	if err != nil {
		return nil, err
	}
	req := &api.AckRequest{Acks: make([]api.AckItem, len(in.GetAcks()))}
	for i, a := range in.GetAcks() {
		req.Acks[i] = api.AckItem{ID: a.GetId(), Attempt: a.GetAttempt()}
		if req.Acks[i].Result, err = jsonText(fmt.Sprintf("acks[%d].result", i), a.GetResult()); err != nil {
			return nil, err
		}
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	// Each entry goes to the actor on its own, as on NATS: one lost lease
	// does not fail the others, and the entries land in the same step.
	parts := req.Parts()
	errs := make([]*api.Error, len(parts))
	done := make(chan struct{})
	var left atomic.Int64
	left.Store(int64(len(parts)))
	for i, part := range parts {
		w.s.d.Actors.Send(who.Namespace, &actors.Message{Op: actors.OpAck, Body: part, Reply: func(_ any, e *api.Error) {
			// Each entry is answered once, so each slot has one writer;
			// the last answer lets the handler read them all.
			errs[i] = e
			if left.Add(-1) == 0 {
				close(done)
			}
		}})
	}
	select {
	case <-done:
	case <-ctx.Done():
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	reply := req.Gather(errs)
	out := &pb.AckManyResponse{Results: make([]*pb.AckResult, len(reply.Results))}
	for i, r := range reply.Results {
		out.Results[i] = &pb.AckResult{Id: r.ID, Error: errorOut(r.Error)}
	}
	return out, nil
}

func (w worker) Nack(ctx context.Context, in *pb.NackRequest) (*pb.NackResponse, error) {
	who, err := w.s.principal(ctx, auth.ActNack)
	if err != nil {
		return nil, err
	}
	req := &api.NackRequest{ID: in.GetId(), Error: in.GetError(), Retry: in.Retry, Attempt: in.GetAttempt(), Release: in.GetRelease()}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	body, err := w.s.ask(ctx, who.Namespace, actors.OpNack, req)
	if err != nil {
		return nil, err
	}
	reply, err := replyAs[api.NackReply](body)
	if err != nil {
		return nil, err
	}
	return &pb.NackResponse{Status: statusOut[reply.Status], RunAt: timeOut(reply.RunAt)}, nil
}
