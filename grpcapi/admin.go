package grpcapi

import (
	"context"

	"github.com/flexiq/flexiq/admin"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/auth"
	pb "github.com/flexiq/flexiq/grpcapi/flexiqv1"
)

// adminService is the Admin service: the admin door's quota, usage and
// dead-letter calls, run by the admin door's own code.
type adminService struct {
	pb.UnimplementedAdminServer
	s *Server
}

var _ pb.AdminServer = adminService{}

func (a adminService) GetQuota(ctx context.Context, _ *pb.GetQuotaRequest) (*pb.GetQuotaResponse, error) {
	who, err := a.s.principal(ctx, auth.ActReadQuota)
	if err != nil {
		return nil, err
	}
	q, err := a.s.d.Admin.Quota(ctx, who.Namespace)
	if err != nil {
		return nil, err
	}
	return &pb.GetQuotaResponse{Quota: quotaOut(q)}, nil
}

func (a adminService) SetQuota(ctx context.Context, in *pb.SetQuotaRequest) (*pb.SetQuotaResponse, error) {
	who, err := a.s.principal(ctx, auth.ActSetQuota)
	if err != nil {
		return nil, err
	}
	q, err := a.s.d.Admin.SetQuota(ctx, who, []byte(in.GetDocument()))
	if err != nil {
		return nil, err
	}
	return &pb.SetQuotaResponse{Quota: quotaOut(q)}, nil
}

func (a adminService) PatchQuota(ctx context.Context, in *pb.PatchQuotaRequest) (*pb.PatchQuotaResponse, error) {
	who, err := a.s.principal(ctx, auth.ActChangeQuota)
	if err != nil {
		return nil, err
	}
	q, err := a.s.d.Admin.PatchQuota(ctx, who, []byte(in.GetPatch()))
	if err != nil {
		return nil, err
	}
	return &pb.PatchQuotaResponse{Quota: quotaOut(q)}, nil
}

func (a adminService) ClearQuota(ctx context.Context, _ *pb.ClearQuotaRequest) (*pb.ClearQuotaResponse, error) {
	who, err := a.s.principal(ctx, auth.ActClearQuota)
	if err != nil {
		return nil, err
	}
	q, err := a.s.d.Admin.ClearQuota(ctx, who)
	if err != nil {
		return nil, err
	}
	return &pb.ClearQuotaResponse{Quota: quotaOut(q)}, nil
}

func (a adminService) GetUsage(ctx context.Context, _ *pb.GetUsageRequest) (*pb.GetUsageResponse, error) {
	who, err := a.s.principal(ctx, auth.ActReadUsage)
	if err != nil {
		return nil, err
	}
	u, err := a.s.d.Admin.Usage(ctx, who.Namespace)
	if err != nil {
		return nil, err
	}
	return &pb.GetUsageResponse{Quota: quotaOut(u.QuotaReply), Usage: &pb.Usage{
		Pending: u.Usage.Pending, Running: u.Usage.Running, Archived: u.Usage.Archived, Dead: u.Usage.Dead,
	}}, nil
}

func (a adminService) ListDead(ctx context.Context, in *pb.ListDeadRequest) (*pb.ListDeadResponse, error) {
	who, err := a.s.principal(ctx, auth.ActListJobs)
	if err != nil {
		return nil, err
	}
	f := admin.JobFilter{Status: api.StatusDead, Queue: in.GetQueue()}
	if in.GetShed() {
		shed := true
		f.Shed = &shed
	}
	if in.GetLimit() != 0 {
		limit := int(in.GetLimit())
		f.Limit = &limit
	}
	jobs, err := a.s.d.Admin.Jobs(ctx, who.Namespace, f)
	if err != nil {
		return nil, err
	}
	return &pb.ListDeadResponse{Jobs: jobsOut(jobs.Jobs)}, nil
}

func (a adminService) ReplayDead(ctx context.Context, in *pb.ReplayDeadRequest) (*pb.ReplayDeadResponse, error) {
	who, err := a.s.principal(ctx, auth.ActReplay)
	if err != nil {
		return nil, err
	}
	body, err := a.s.d.Admin.Replay(ctx, who.Namespace, &api.ReplayRequest{IDs: in.GetIds()})
	if err != nil {
		return nil, err
	}
	reply, err := replyAs[api.EnqueueReply](body)
	if err != nil {
		return nil, err
	}
	return &pb.ReplayDeadResponse{Results: resultsOut(reply.Results)}, nil
}
