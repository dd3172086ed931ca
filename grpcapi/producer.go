package grpcapi

import (
	"context"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/auth"
	pb "github.com/flexiq/flexiq/grpcapi/flexiqv1"
)

// producer is the Producer service: the calls of fq.v1.enqueue and
// fq.v1.event.
type producer struct {
	pb.UnimplementedProducerServer
	s *Server
}

var _ pb.ProducerServer = producer{}

func (p producer) enqueue(ctx context.Context, jobs []*pb.Job) ([]*pb.EnqueueResult, error) {
	who, err := p.s.principal(ctx, auth.ActEnqueue)
	if err != nil {
		return nil, err
	}
	req, err := enqueueIn(jobs)
	if err != nil {
		return nil, err
	}
	body, err := p.s.ask(ctx, who.Namespace, actors.OpEnqueue, req)
	if err != nil {
		return nil, err
	}
	reply, err := replyAs[api.EnqueueReply](body)
	if err != nil {
		return nil, err
	}
	return resultsOut(reply.Results), nil
}

func (p producer) Enqueue(ctx context.Context, in *pb.EnqueueRequest) (*pb.EnqueueResponse, error) {
	// One job is a call of one: refused in the same words as a batch
	// ("jobs[0].queue: …"), as the Go client's Enqueue is.
	var jobs []*pb.Job
	if in.GetJob() != nil {
		jobs = []*pb.Job{in.GetJob()}
	}
	rs, err := p.enqueue(ctx, jobs)
	if err != nil {
		return nil, err
	}
	if len(rs) != 1 {
		return nil, api.Errorf(api.CodeInternal, "", "enqueue: %d results for 1 job", len(rs))
	}
	return &pb.EnqueueResponse{Result: rs[0]}, nil
}

func (p producer) EnqueueMany(ctx context.Context, in *pb.EnqueueManyRequest) (*pb.EnqueueManyResponse, error) {
	rs, err := p.enqueue(ctx, in.GetJobs())
	if err != nil {
		return nil, err
	}
	return &pb.EnqueueManyResponse{Results: rs}, nil
}

func (p producer) PublishEvent(ctx context.Context, in *pb.PublishEventRequest) (*pb.PublishEventResponse, error) {
	who, err := p.s.principal(ctx, auth.ActEvent)
	if err != nil {
		return nil, err
	}
	req := &api.EventRequest{Name: in.GetName()}
	if req.Payload, err = jsonText("payload", in.GetPayload()); err != nil {
		return nil, err
	}
	if err := req.Validate(); err != nil {
		return nil, err
	}
	body, err := p.s.ask(ctx, who.Namespace, actors.OpEvent, req)
	if err != nil {
		return nil, err
	}
	reply, err := replyAs[api.EnqueueReply](body)
	if err != nil {
		return nil, err
	}
	return &pb.PublishEventResponse{Results: resultsOut(reply.Results)}, nil
}
