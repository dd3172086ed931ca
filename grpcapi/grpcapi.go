// Package grpcapi is FlexiQ's gRPC surface: the flexiq.v1 Producer, Worker
// and Admin services of proto/flexiq/v1/flexiq.proto (generated code in
// flexiqv1), with the standard health and reflection services.
//
// It adds no rules of its own. A call is authenticated by the bus's
// authenticator from the "authorization" metadata ("Bearer <token>"),
// checked against the same auth.Action as on the other surfaces, decoded
// into the api request types and refused by their Validate methods, and
// handed to the namespace's actor exactly as the NATS service hands it;
// Admin calls run the admin door's own code (admin.Server). Unlike a NATS
// handler, a gRPC handler may block, so each waits for the actor's answer
// (or its context). A refusal is rendered once, by Status: the api code as
// the status code, the message unchanged, and a google.rpc.ErrorInfo with
// the reason and domain "flexiq".
package grpcapi

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/reflection"
	"google.golang.org/grpc/status"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/admin"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/auth"
	pb "github.com/flexiq/flexiq/grpcapi/flexiqv1"
)

// Sender delivers a message to a namespace's actor (the node's sender, as
// the NATS service and the admin door use).
type Sender interface {
	Send(ns string, m *actors.Message)
}

// Authenticator resolves an authorization value (auth.Authenticator).
type Authenticator interface {
	Authenticate(ctx context.Context, header string) (auth.Principal, *api.Error)
}

// Admin is the admin door's code for the calls the Admin service offers
// (admin.Server).
type Admin interface {
	Quota(ctx context.Context, ns string) (admin.QuotaReply, error)
	Usage(ctx context.Context, ns string) (admin.UsageReply, error)
	SetQuota(ctx context.Context, p auth.Principal, doc []byte) (admin.QuotaReply, error)
	PatchQuota(ctx context.Context, p auth.Principal, patch []byte) (admin.QuotaReply, error)
	ClearQuota(ctx context.Context, p auth.Principal) (admin.QuotaReply, error)
	Jobs(ctx context.Context, ns string, f admin.JobFilter) (admin.JobsReply, error)
	Replay(ctx context.Context, ns string, req *api.ReplayRequest) (any, error)
	// Health is nil while the node reaches its store and NATS.
	Health(ctx context.Context) *api.Error
}

// Deps are the gRPC surface's collaborators.
type Deps struct {
	Auth   Authenticator
	Actors Sender
	Admin  Admin
	Log    *slog.Logger
}

// MetadataAuthorization is the metadata key of the bearer token.
const MetadataAuthorization = "authorization"

// maxMessage bounds a request, as the bus's MaxPayload bounds a NATS one:
// a batch of jobs, each payload up to 1 MiB.
const maxMessage = 16 << 20

// Server is the gRPC surface of one node.
type Server struct {
	d      Deps
	srv    *grpc.Server
	health *health.Server

	stopOnce sync.Once
	// stopped is closed once a stop has answered every call in flight.
	stopped chan struct{}
}

// New builds the server with the flexiq.v1 services, health and
// reflection. opts are added to the server's own (tests add credentials
// or interceptors).
func New(d Deps, opts ...grpc.ServerOption) *Server {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	s := &Server{d: d, health: health.NewServer(), stopped: make(chan struct{})}
	opts = append([]grpc.ServerOption{
		grpc.MaxRecvMsgSize(maxMessage),
		grpc.ChainUnaryInterceptor(s.renderErrors),
	}, opts...)
	s.srv = grpc.NewServer(opts...)
	pb.RegisterProducerServer(s.srv, producer{s: s})
	pb.RegisterWorkerServer(s.srv, worker{s: s})
	pb.RegisterAdminServer(s.srv, adminService{s: s})
	for _, name := range []string{"", pb.Producer_ServiceDesc.ServiceName, pb.Worker_ServiceDesc.ServiceName, pb.Admin_ServiceDesc.ServiceName} {
		s.health.SetServingStatus(name, healthgrpc.HealthCheckResponse_SERVING)
	}
	healthgrpc.RegisterHealthServer(s.srv, healthService{Server: s.health, check: d.Admin.Health})
	// Reflection needs no token, like the health service: it shows the
	// schema, which is public (proto/flexiq/v1), and lets grpcurl and
	// other tools discover it.
	reflection.Register(s.srv)
	return s
}

// GRPC is the underlying server, for registering more services before
// Serve.
func (s *Server) GRPC() *grpc.Server { return s.srv }

// Serve serves ln until Stop, and returns once Stop has answered every
// call in flight (or cut them when its context ended).
func (s *Server) Serve(ln net.Listener) error {
	err := s.srv.Serve(ln)
	if err != nil && !errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("grpc: %w", err)
	}
	<-s.stopped
	return nil
}

// Stop stops taking calls and returns at once; the calls in flight are
// answered as they finish, and Serve returns when the last one is. It does
// not wait for them because on a node the actors answer the longest of
// them (a claim's long poll) only when they stop, after this; the node
// waits for Serve instead. When ctx ends first the remaining calls are cut
// (they fail with UNAVAILABLE).
func (s *Server) Stop(ctx context.Context) {
	s.stopOnce.Do(func() {
		s.health.Shutdown()
		cut := context.AfterFunc(ctx, s.srv.Stop)
		go func() {
			s.srv.GracefulStop()
			cut()
			close(s.stopped)
		}()
	})
}

// principal authenticates the call and checks that it may do a.
func (s *Server) principal(ctx context.Context, a auth.Action) (auth.Principal, error) {
	var header string
	if md, ok := metadata.FromIncomingContext(ctx); ok {
		if v := md.Get(MetadataAuthorization); len(v) > 0 {
			header = v[0]
		}
	}
	p, e := s.d.Auth.Authenticate(ctx, header)
	if e != nil {
		return p, e
	}
	if e := p.Allow(a); e != nil {
		return p, e
	}
	return p, nil
}

// answerMargin is how long before a call's deadline a held refusal is
// answered: the time for the answer to reach the caller.
const answerMargin = 50 * time.Millisecond

// ask hands a request to ns's actor, as the NATS service does, and waits
// for the answer or the end of the call.
func (s *Server) ask(ctx context.Context, ns string, op actors.Op, body any) (any, error) {
	// A client's call, as on the bus: its quota refusals are paced, and
	// held no longer than its deadline allows, so the caller gets the
	// refusal rather than DEADLINE_EXCEEDED.
	send := func(ns string, m *actors.Message) {
		m.Paced = true
		if dl, ok := ctx.Deadline(); ok {
			m.AnswerBy = dl.Add(-answerMargin)
		}
		s.d.Actors.Send(ns, m)
	}
	out, err := actors.Ask(ctx, send, ns, op, body)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil, status.FromContextError(ctx.Err()).Err()
	}
	return out, err
}

// renderErrors turns every error a flexiq.v1 handler returns into its
// status (Status); an error that is already a status (the end of the
// call's context, the health service's) passes as it is.
func (s *Server) renderErrors(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	resp, err := h(ctx, req)
	if err == nil {
		return resp, nil
	}
	if e, ok := api.AsError(err); ok {
		return nil, Status(e).Err()
	}
	if _, ok := status.FromError(err); ok {
		return nil, err
	}
	s.d.Log.Error("grpc call failed", "method", info.FullMethod, "err", err)
	return nil, Status(api.FromError(err)).Err()
}

// healthService answers the health check with the admin door's health
// (store and NATS reachable) while the server serves.
type healthService struct {
	*health.Server
	check func(context.Context) *api.Error
}

func (h healthService) Check(ctx context.Context, in *healthgrpc.HealthCheckRequest) (*healthgrpc.HealthCheckResponse, error) {
	resp, err := h.Server.Check(ctx, in)
	if err != nil || resp.GetStatus() != healthgrpc.HealthCheckResponse_SERVING {
		return resp, err
	}
	if h.check != nil && h.check(ctx) != nil {
		return &healthgrpc.HealthCheckResponse{Status: healthgrpc.HealthCheckResponse_NOT_SERVING}, nil
	}
	return resp, nil
}
