package bus

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/auth"
)

// Sender delivers a message to a namespace's actor (actors.System).
type Sender interface {
	Send(ns string, m *actors.Message)
}

// Authenticator resolves the Authorization header (auth.Authenticator).
type Authenticator interface {
	Authenticate(ctx context.Context, header string) (auth.Principal, *api.Error)
}

// Service is the flexiq micro service on one connection.
type Service struct {
	nc     *nats.Conn
	svc    micro.Service
	sender Sender
	authn  Authenticator
	log    *slog.Logger
	ctx    context.Context

	// ownSubs is how many subscriptions the service added (endpoints and
	// the $SRV verbs): Stop waits until draining has removed them.
	ownSubs  int
	inflight atomic.Int64
}

// NewService adds the flexiq service to nc: every subject of SPEC §7 in
// queue group "flexiq".
func NewService(ctx context.Context, nc *nats.Conn, nodeID string, sender Sender, authn Authenticator, log *slog.Logger) (*Service, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Service{nc: nc, sender: sender, authn: authn, log: log, ctx: ctx}
	before := nc.NumSubscriptions()
	svc, err := micro.AddService(nc, micro.Config{
		Name:        api.ServiceName,
		Version:     api.ServiceVersion,
		Description: "FlexiQ multi-tenant job queue, protocol v1",
		QueueGroup:  api.QueueGroup,
		Metadata:    map[string]string{"node": nodeID},
	})
	if err != nil {
		return nil, fmt.Errorf("add flexiq service: %w", err)
	}
	s.svc = svc
	endpoints := []struct {
		name, subject string
		h             micro.HandlerFunc
	}{
		{"enqueue", api.SubjectEnqueue, s.handle(actors.OpEnqueue, auth.Produce, "enqueue", func() validator { return &enqueueRequest{} })},
		{"claim", api.SubjectClaim, s.handle(actors.OpClaim, auth.Work, "claim jobs", func() validator { return &claimRequest{} })},
		{"heartbeat", api.SubjectHeartbeat, s.handle(actors.OpHeartbeat, auth.Work, "heartbeat", func() validator { return &heartbeatRequest{} })},
		{"ack", api.SubjectAck, s.handle(actors.OpAck, auth.Work, "ack", func() validator { return &ackRequest{} })},
		{"nack", api.SubjectNack, s.handle(actors.OpNack, auth.Work, "nack", func() validator { return &nackRequest{} })},
		{"event", api.SubjectEvent, s.handle(actors.OpEvent, auth.Produce, "publish events", func() validator { return &eventRequest{} })},
		{"dead_replay", api.SubjectDeadReplay, s.handle(actors.OpReplay, auth.Admin, "replay dead letters", func() validator { return &replayRequest{} })},
	}
	for _, e := range endpoints {
		if err := svc.AddEndpoint(e.name, e.h, micro.WithEndpointSubject(e.subject)); err != nil {
			_ = svc.Stop()
			return nil, fmt.Errorf("add endpoint %s: %w", e.subject, err)
		}
	}
	s.ownSubs = nc.NumSubscriptions() - before
	return s, nil
}

// validator is a request body that can check its own shape and says what
// the actor receives.
type validator interface {
	validate() error
	body() any
}

// handle builds an endpoint's handler. It never blocks on the namespace:
// the actor answers later by publishing to the reply subject itself.
func (s *Service) handle(op actors.Op, perm auth.Permission, what string, newBody func() validator) micro.HandlerFunc {
	return func(req micro.Request) {
		p, aerr := s.authn.Authenticate(s.ctx, req.Headers().Get(api.HeaderAuthorization))
		if aerr != nil {
			s.fail(req, aerr)
			return
		}
		if aerr := p.Check(perm, what); aerr != nil {
			s.fail(req, aerr)
			return
		}
		v := newBody()
		if err := api.Decode(req.Data(), v); err != nil {
			s.fail(req, api.FromError(err))
			return
		}
		if err := v.validate(); err != nil {
			s.fail(req, api.FromError(err))
			return
		}
		reply := req.Reply()
		s.inflight.Add(1)
		if sp, ok := v.(splitter); ok {
			if parts := sp.parts(); parts != nil {
				s.sendParts(p.Namespace, op, reply, sp, parts)
				return
			}
		}
		s.sender.Send(p.Namespace, &actors.Message{
			Op:   op,
			Body: v.body(),
			Reply: func(body any, e *api.Error) {
				defer s.inflight.Add(-1)
				s.publishReply(reply, body, e)
			},
		})
	}
}

// splitter is a request that carries several independent requests (a
// batched ack): parts are sent to the actor one by one and gather turns
// their answers into the one reply.
type splitter interface {
	parts() []any
	gather(errs []*api.Error) any
}

func (s *Service) sendParts(ns string, op actors.Op, reply string, sp splitter, parts []any) {
	errs := make([]*api.Error, len(parts))
	var left atomic.Int64
	left.Store(int64(len(parts)))
	for i, part := range parts {
		s.sender.Send(ns, &actors.Message{
			Op:   op,
			Body: part,
			Reply: func(_ any, e *api.Error) {
				// Each part is answered once, so each slot is written by
				// one goroutine; the last answer publishes.
				errs[i] = e
				if left.Add(-1) == 0 {
					defer s.inflight.Add(-1)
					s.publishReply(reply, sp.gather(errs), nil)
				}
			},
		})
	}
}

// fail answers synchronously through micro, so its stats count the error.
func (s *Service) fail(req micro.Request, e *api.Error) {
	body, _ := api.Marshal(api.ErrorBody{Error: e})
	if err := req.Error(strconv.Itoa(api.HTTPStatus(e.Code)), errorHeader(e), body); err != nil {
		s.log.Debug("cannot answer request", "err", err)
	}
}

// errorHeader is the Nats-Service-Error value: the message (micro refuses
// an empty description).
func errorHeader(e *api.Error) string {
	if e.Message == "" {
		return string(e.Code)
	}
	return e.Message
}

// publishReply answers asynchronously. It publishes on the connection
// itself rather than through micro.Request, whose bookkeeping is not safe
// to touch once the handler has returned.
func (s *Service) publishReply(reply string, body any, e *api.Error) {
	if reply == "" {
		return
	}
	msg := &nats.Msg{Subject: reply}
	if e != nil {
		msg.Header = nats.Header{}
		msg.Header.Set(api.HeaderErrorCode, strconv.Itoa(api.HTTPStatus(e.Code)))
		msg.Header.Set(api.HeaderError, errorHeader(e))
		msg.Data, _ = api.Marshal(api.ErrorBody{Error: e})
	} else {
		data, err := api.Marshal(body)
		if err != nil {
			s.log.Error("cannot encode reply", "err", err)
			data, _ = api.Marshal(api.ErrorBody{Error: api.Errorf(api.CodeInternal, "", "internal error")})
		}
		msg.Data = data
	}
	if err := s.nc.PublishMsg(msg); err != nil {
		s.log.Warn("cannot publish reply", "err", err)
	}
}

// Stop stops taking requests: every endpoint's subscription is drained, so
// requests already delivered to this node still reach their actors. It
// returns when the drain is done (or ctx ends). The actors then answer
// what they hold; the connection must stay open until they have.
func (s *Service) Stop(ctx context.Context) error {
	target := s.nc.NumSubscriptions() - s.ownSubs
	if err := s.svc.Stop(); err != nil {
		return fmt.Errorf("stop flexiq service: %w", err)
	}
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for s.nc.NumSubscriptions() > target && !s.nc.IsClosed() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// Inflight reports requests handed to actors and not yet answered.
func (s *Service) Inflight() int64 { return s.inflight.Load() }
