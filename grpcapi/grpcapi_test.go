package grpcapi

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	reflectpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/admin"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/auth"
	pb "github.com/flexiq/flexiq/grpcapi/flexiqv1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeAuth knows three tokens of namespace acme.
type fakeAuth struct{}

func (fakeAuth) Authenticate(_ context.Context, header string) (auth.Principal, *api.Error) {
	roles := map[string]auth.Role{"Bearer admin": auth.RoleAdmin, "Bearer producer": auth.RoleProducer, "Bearer worker": auth.RoleWorker}
	role, ok := roles[header]
	if !ok {
		return auth.Principal{}, api.Unauthenticated()
	}
	return auth.Principal{TokenID: "tok_" + string(role), Namespace: "acme", Role: role}, nil
}

// fakeActors hands every message to answer, on the test's terms.
type fakeActors struct {
	mu     sync.Mutex
	answer func(ns string, m *actors.Message)
}

func (f *fakeActors) Send(ns string, m *actors.Message) {
	f.mu.Lock()
	answer := f.answer
	f.mu.Unlock()
	answer(ns, m)
}

func (f *fakeActors) set(answer func(ns string, m *actors.Message)) {
	f.mu.Lock()
	f.answer = answer
	f.mu.Unlock()
}

// fakeAdmin answers the Admin calls; each records what it was given.
type fakeAdmin struct {
	mu      sync.Mutex
	got     []string
	health  *api.Error
	setErr  error
	filters []admin.JobFilter
}

func (a *fakeAdmin) record(s string) {
	a.mu.Lock()
	a.got = append(a.got, s)
	a.mu.Unlock()
}

func (a *fakeAdmin) Quota(_ context.Context, ns string) (admin.QuotaReply, error) {
	a.record("quota " + ns)
	return admin.QuotaReply{Namespace: ns, Quota: json.RawMessage(`{"max_pending":3}`), Revision: 4}, nil
}

func (a *fakeAdmin) Usage(_ context.Context, ns string) (admin.UsageReply, error) {
	return admin.UsageReply{QuotaReply: admin.QuotaReply{Namespace: ns, Quota: json.RawMessage(`{}`)}, Usage: admin.Usage{Pending: 1, Running: 2, Archived: 3, Dead: 4}}, nil
}

func (a *fakeAdmin) SetQuota(_ context.Context, p auth.Principal, doc []byte) (admin.QuotaReply, error) {
	a.record("set " + p.TokenID + " " + string(doc))
	return admin.QuotaReply{Namespace: p.Namespace, Quota: doc, Revision: 5}, a.setErr
}

func (a *fakeAdmin) PatchQuota(_ context.Context, p auth.Principal, patch []byte) (admin.QuotaReply, error) {
	a.record("patch " + string(patch))
	return admin.QuotaReply{Namespace: p.Namespace, Quota: patch, Revision: 6}, nil
}

func (a *fakeAdmin) ClearQuota(_ context.Context, p auth.Principal) (admin.QuotaReply, error) {
	a.record("clear")
	return admin.QuotaReply{Namespace: p.Namespace, Quota: json.RawMessage(`{}`), Revision: 7}, nil
}

func (a *fakeAdmin) Jobs(_ context.Context, _ string, f admin.JobFilter) (admin.JobsReply, error) {
	a.mu.Lock()
	a.filters = append(a.filters, f)
	a.mu.Unlock()
	return admin.JobsReply{Jobs: []api.Job{{ID: "d1", Queue: "q", Task: "t", Status: api.StatusDead, DeadMeta: json.RawMessage(`{"shed":"quota"}`)}}}, nil
}

func (a *fakeAdmin) Replay(_ context.Context, _ string, req *api.ReplayRequest) (any, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return api.EnqueueReply{Results: []api.EnqueueResult{{ID: req.IDs[0], Outcome: api.OutcomeEnqueued}}}, nil
}

func (a *fakeAdmin) Health(context.Context) *api.Error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.health
}

// rig is a server on an in-memory listener and a client connection to it.
type rig struct {
	srv    *Server
	actors *fakeActors
	admin  *fakeAdmin
	conn   *grpc.ClientConn
	served chan error
}

func newRig(t *testing.T) *rig {
	t.Helper()
	r := &rig{actors: &fakeActors{}, admin: &fakeAdmin{}, served: make(chan error, 1)}
	r.actors.set(func(string, *actors.Message) { t.Error("no message expected") })
	r.srv = New(Deps{Auth: fakeAuth{}, Actors: r.actors, Admin: r.admin})
	ln := bufconn.Listen(1 << 20)
	go func() { r.served <- r.srv.Serve(ln) }()
	conn, err := grpc.NewClient("passthrough:///flexiq",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return ln.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	r.conn = conn
	t.Cleanup(func() {
		conn.Close()
		r.srv.Stop(context.Background())
		if err := <-r.served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return r
}

func as(token string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), MetadataAuthorization, "Bearer "+token)
}

// wantStatus checks that err is the status of e: its code, its message
// exactly, and ErrorInfo{reason, domain flexiq}.
func wantStatus(t *testing.T, err error, code codes.Code, reason api.Reason, message string) {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || err == nil {
		t.Fatalf("error %v, want a status %s %q", err, code, message)
	}
	if st.Code() != code || st.Message() != message {
		t.Fatalf("status %s %q, want %s %q", st.Code(), st.Message(), code, message)
	}
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	if info == nil || info.GetDomain() != "flexiq" || info.GetReason() != string(reason) {
		t.Fatalf("details %v, want ErrorInfo{reason %q, domain flexiq}", st.Details(), reason)
	}
}

// Every api code becomes the gRPC code of the same name, the message
// travels unchanged, the reason and domain ride in ErrorInfo, and
// FromStatus gives the same api.Error back.
func TestStatusCarriesCodeReasonAndMessage(t *testing.T) {
	for _, tc := range []struct {
		code api.Code
		want codes.Code
	}{
		{api.CodeInvalidArgument, codes.InvalidArgument},
		{api.CodeFailedPrecondition, codes.FailedPrecondition},
		{api.CodeUnauthenticated, codes.Unauthenticated},
		{api.CodePermissionDenied, codes.PermissionDenied},
		{api.CodeNotFound, codes.NotFound},
		{api.CodeAlreadyExists, codes.AlreadyExists},
		{api.CodeAborted, codes.Aborted},
		{api.CodeResourceExhausted, codes.ResourceExhausted},
		{api.CodeInternal, codes.Internal},
		{api.CodeUnavailable, codes.Unavailable},
	} {
		e := &api.Error{Code: tc.code, Reason: api.ReasonQueueFull, Message: "queue 'q' is full: 2 pending >= max_pending 2 <&>"}
		st := Status(e)
		wantStatus(t, st.Err(), tc.want, api.ReasonQueueFull, e.Message)
		if back := FromStatus(st); *back != *e {
			t.Errorf("FromStatus(Status(%+v)) = %+v", e, back)
		}
	}
	if got := Code("NO_SUCH_CODE"); got != codes.Unknown {
		t.Errorf("an unknown code maps to %s, want Unknown", got)
	}
	// A status from elsewhere keeps its code and message, with no reason.
	if e := FromStatus(status.New(codes.DeadlineExceeded, "too slow")); e.Code != "DEADLINE_EXCEEDED" || e.Reason != "" || e.Message != "too slow" {
		t.Errorf("FromStatus(deadline) = %+v", e)
	}
}

// A call without a token, or with an unknown one, is refused as the bus
// refuses it; a role that may not make the call is refused in the words
// of every surface. Neither reaches an actor.
func TestAuthentication(t *testing.T) {
	r := newRig(t)
	prod := pb.NewProducerClient(r.conn)
	_, err := prod.Enqueue(context.Background(), &pb.EnqueueRequest{Job: &pb.Job{Queue: "q", Task: "t"}})
	wantStatus(t, err, codes.Unauthenticated, "", api.Unauthenticated().Message)
	_, err = prod.Enqueue(as("nobody"), &pb.EnqueueRequest{Job: &pb.Job{Queue: "q", Task: "t"}})
	wantStatus(t, err, codes.Unauthenticated, "", api.Unauthenticated().Message)
	_, err = prod.Enqueue(as("worker"), &pb.EnqueueRequest{Job: &pb.Job{Queue: "q", Task: "t"}})
	wantStatus(t, err, codes.PermissionDenied, "", "a worker token may not enqueue")
	_, err = pb.NewWorkerClient(r.conn).Claim(as("producer"), &pb.ClaimRequest{Queues: []string{"q"}})
	wantStatus(t, err, codes.PermissionDenied, "", "a producer token may not claim jobs")
	_, err = pb.NewAdminClient(r.conn).GetQuota(as("producer"), &pb.GetQuotaRequest{})
	wantStatus(t, err, codes.PermissionDenied, "", "a producer token may not read the quota")
}

// A request is refused by the api types' own checks, in their words,
// before it reaches an actor; JSON text that is not JSON is BAD_REQUEST
// naming its field.
func TestRequestsAreCheckedLikeNATSOnes(t *testing.T) {
	r := newRig(t)
	prod, work := pb.NewProducerClient(r.conn), pb.NewWorkerClient(r.conn)
	for _, tc := range []struct {
		name   string
		call   func() error
		reason api.Reason
		msg    string
	}{
		{"no job", func() error {
			_, err := prod.Enqueue(as("producer"), &pb.EnqueueRequest{})
			return err
		}, "", "jobs: must hold at least one job"},
		{"bad queue", func() error {
			_, err := prod.EnqueueMany(as("producer"), &pb.EnqueueManyRequest{Jobs: []*pb.Job{{Queue: "q", Task: "t"}, {Queue: "bad queue", Task: "t"}}})
			return err
		}, "", `jobs[1].queue: must be 1-128 bytes of [A-Za-z0-9._:-], got "bad queue"`},
		{"payload not JSON", func() error {
			_, err := prod.Enqueue(as("producer"), &pb.EnqueueRequest{Job: &pb.Job{Queue: "q", Task: "t", Payload: "nope"}})
			return err
		}, api.ReasonBadRequest, "jobs[0].payload: not valid JSON: invalid character 'o' in literal null (expecting 'u')"},
		{"run_at nanos", func() error {
			_, err := prod.Enqueue(as("producer"), &pb.EnqueueRequest{Job: &pb.Job{Queue: "q", Task: "t", RunAt: &timestamppb.Timestamp{Seconds: 1, Nanos: -1}}})
			return err
		}, api.ReasonBadRequest, "jobs[0].run_at: nanos must be 0-999999999, got -1"},
		{"event name", func() error {
			_, err := prod.PublishEvent(as("producer"), &pb.PublishEventRequest{})
			return err
		}, "", "name: must be 1-128 bytes, got 0"},
		{"claim queues", func() error {
			_, err := work.Claim(as("worker"), &pb.ClaimRequest{})
			return err
		}, "", "queues: must name at least one queue"},
		{"claim wait", func() error {
			_, err := work.Claim(as("worker"), &pb.ClaimRequest{Queues: []string{"q"}, WaitMs: api.MaxWaitMS + 1})
			return err
		}, "", "wait_ms: must be 0-300000, got 300001"},
		{"heartbeat ids", func() error {
			_, err := work.Heartbeat(as("worker"), &pb.HeartbeatRequest{})
			return err
		}, "", "ids: must name at least one job"},
		{"ack id", func() error {
			_, err := work.Ack(as("worker"), &pb.AckRequest{})
			return err
		}, "", "id: required"},
		{"ack result", func() error {
			_, err := work.Ack(as("worker"), &pb.AckRequest{Id: "j", Result: "{"})
			return err
		}, api.ReasonBadRequest, "result: not valid JSON: unexpected end of JSON input"},
		{"ack many id", func() error {
			_, err := work.AckMany(as("worker"), &pb.AckManyRequest{Acks: []*pb.AckItem{{Id: "a"}, {}}})
			return err
		}, "", "acks[1].id: required"},
		{"nack id", func() error {
			_, err := work.Nack(as("worker"), &pb.NackRequest{})
			return err
		}, "", "id: required"},
		{"replay ids", func() error {
			_, err := pb.NewAdminClient(r.conn).ReplayDead(as("admin"), &pb.ReplayDeadRequest{Ids: []string{""}})
			return err
		}, "", "ids: must not hold an empty id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantStatus(t, tc.call(), codes.InvalidArgument, tc.reason, tc.msg)
		})
	}
}

// A valid call reaches the namespace's actor as the api request the NATS
// service would send (defaults filled in by the same checks), and the
// actor's answer comes back converted.
func TestCallsReachTheActor(t *testing.T) {
	r := newRig(t)
	runAt := time.Date(2030, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
	msgs := make(chan *actors.Message, 1)
	r.actors.set(func(ns string, m *actors.Message) {
		if ns != "acme" {
			t.Errorf("sent to namespace %q, want the token's", ns)
		}
		msgs <- m
		switch m.Op {
		case actors.OpEnqueue:
			m.Reply(api.EnqueueReply{Results: []api.EnqueueResult{{ID: "j1", Outcome: api.OutcomeShed}}}, nil)
		case actors.OpClaim:
			m.Reply(api.ClaimReply{Jobs: []api.Job{{ID: "j1", Queue: "q", Task: "t", Payload: json.RawMessage(`{"a": 1}`), Status: api.StatusRunning, Attempt: 1, LeaseUntil: &runAt}}}, nil)
		case actors.OpNack:
			m.Reply(api.NackReply{Status: api.StatusPending, RunAt: &runAt}, nil)
		}
	})
	three := int64(3)
	res, err := pb.NewProducerClient(r.conn).Enqueue(as("producer"), &pb.EnqueueRequest{Job: &pb.Job{
		Id: "j1", Queue: "q", Task: "t", Payload: `{"a": 1}`, Priority: 7, RunAt: timestamppb.New(runAt),
		MaxAttempts: &three, UniqueKey: "u", Debounce: &pb.Debounce{Key: "k", WindowMs: 5},
	}})
	if err != nil || res.GetResult().GetId() != "j1" || res.GetResult().GetOutcome() != pb.Outcome_OUTCOME_SHED {
		t.Fatalf("enqueue = %v, %v", res, err)
	}
	m := <-msgs
	req, ok := m.Body.(*api.EnqueueRequest)
	if m.Op != actors.OpEnqueue || !ok || len(req.Jobs) != 1 {
		t.Fatalf("actor got %s %#v", m.Op, m.Body)
	}
	j := req.Jobs[0]
	if j.ID != "j1" || j.Queue != "q" || j.Task != "t" || string(j.Payload) != `{"a": 1}` || j.Priority != 7 ||
		j.RunAt == nil || !j.RunAt.Equal(runAt) || *j.MaxAttempts != 3 || j.UniqueKey != "u" || *j.Debounce != (api.Debounce{Key: "k", WindowMS: 5}) {
		t.Fatalf("actor got job %+v", j)
	}

	claimed, err := pb.NewWorkerClient(r.conn).Claim(as("worker"), &pb.ClaimRequest{Queues: []string{"q"}})
	if err != nil || len(claimed.GetJobs()) != 1 {
		t.Fatalf("claim = %v, %v", claimed, err)
	}
	if c := (<-msgs).Body.(*api.ClaimRequest); c.Max != 1 || c.LeaseMS != api.DefaultLeaseMS {
		t.Fatalf("claim reached the actor as %+v, want the defaults filled in", c)
	}
	if got := claimed.GetJobs()[0]; got.GetPayload() != `{"a": 1}` || got.GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING ||
		got.GetAttempt() != 1 || !got.GetLeaseUntil().AsTime().Equal(runAt) {
		t.Fatalf("claimed job %v", got)
	}

	retry := false
	nack, err := pb.NewWorkerClient(r.conn).Nack(as("worker"), &pb.NackRequest{Id: "j1", Error: "boom", Retry: &retry, Attempt: 1})
	if err != nil || nack.GetStatus() != pb.JobStatus_JOB_STATUS_PENDING || !nack.GetRunAt().AsTime().Equal(runAt) {
		t.Fatalf("nack = %v, %v", nack, err)
	}
	if n := (<-msgs).Body.(*api.NackRequest); n.ID != "j1" || n.Error != "boom" || n.Retry == nil || *n.Retry || n.Attempt != 1 {
		t.Fatalf("nack reached the actor as %+v", n)
	}
}

// A call is a client's: its quota refusal may be paced (Message.Paced),
// and held no longer than its deadline less the time to answer it.
func TestCallsArePacedWithinTheirDeadline(t *testing.T) {
	r := newRig(t)
	msgs := make(chan *actors.Message, 2)
	r.actors.set(func(_ string, m *actors.Message) {
		msgs <- m
		m.Reply(api.EnqueueReply{Results: []api.EnqueueResult{{ID: "j1", Outcome: api.OutcomeEnqueued}}}, nil)
	})
	ctx, cancel := context.WithTimeout(as("producer"), 5*time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	if _, err := pb.NewProducerClient(r.conn).Enqueue(ctx, &pb.EnqueueRequest{Job: &pb.Job{Queue: "q", Task: "t"}}); err != nil {
		t.Fatal(err)
	}
	m := <-msgs
	// The server's deadline is the time left when sent, counted from
	// when it arrived: a little later than the client's.
	if want := deadline.Add(-answerMargin); !m.Paced || m.AnswerBy.After(want.Add(answerMargin/2)) || m.AnswerBy.Before(want.Add(-time.Second)) {
		t.Fatalf("paced %v, answer by %v before the deadline; want true, %v", m.Paced, deadline.Sub(m.AnswerBy), answerMargin)
	}
	if _, err := pb.NewProducerClient(r.conn).Enqueue(as("producer"), &pb.EnqueueRequest{Job: &pb.Job{Queue: "q", Task: "t"}}); err != nil {
		t.Fatal(err)
	}
	if m := <-msgs; !m.Paced || !m.AnswerBy.IsZero() {
		t.Fatalf("without a deadline: paced %v, answer by %v; want true, none", m.Paced, m.AnswerBy)
	}
}

// A refusal from the actor is the caller's status, and an AckMany sends
// each entry on its own and answers each in order.
func TestActorRefusalsAndBatchedAcks(t *testing.T) {
	r := newRig(t)
	full := api.Errorf(api.CodeResourceExhausted, api.ReasonQueueFull, "queue 'q' is full: 1 pending >= max_pending 1")
	var acked []string
	r.actors.set(func(_ string, m *actors.Message) {
		switch m.Op {
		case actors.OpEnqueue:
			m.Reply(nil, full)
		case actors.OpAck:
			a := m.Body.(*api.AckRequest)
			acked = append(acked, a.ID+":"+string(a.Result))
			if a.ID == "lost" {
				m.Reply(nil, api.LeaseLost(a.ID))
				return
			}
			m.Reply(api.Empty{}, nil)
		}
	})
	_, err := pb.NewProducerClient(r.conn).Enqueue(as("producer"), &pb.EnqueueRequest{Job: &pb.Job{Queue: "q", Task: "t"}})
	wantStatus(t, err, codes.ResourceExhausted, api.ReasonQueueFull, full.Message)

	res, err := pb.NewWorkerClient(r.conn).AckMany(as("worker"), &pb.AckManyRequest{Acks: []*pb.AckItem{
		{Id: "a", Result: `"r"`, Attempt: 1}, {Id: "lost", Attempt: 2}, {Id: "b"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(acked, ",") != `a:"r",lost:,b:` {
		t.Fatalf("actor got acks %v, want one per entry in order", acked)
	}
	got := res.GetResults()
	if len(got) != 3 || got[0].GetId() != "a" || got[0].GetError() != nil || got[2].GetError() != nil ||
		got[1].GetId() != "lost" || got[1].GetError().GetCode() != "ABORTED" || got[1].GetError().GetReason() != "LEASE_LOST" ||
		got[1].GetError().GetMessage() != "job 'lost' is not running under this lease" {
		t.Fatalf("ack many = %v", got)
	}
}

// A long poll waits for the actor's answer however long it takes; the
// caller giving up ends it with the caller's status.
func TestClaimWaitsForTheActor(t *testing.T) {
	r := newRig(t)
	parked := make(chan *actors.Message, 2)
	r.actors.set(func(_ string, m *actors.Message) { parked <- m })
	type result struct {
		resp *pb.ClaimResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, err := pb.NewWorkerClient(r.conn).Claim(as("worker"), &pb.ClaimRequest{Queues: []string{"q"}, WaitMs: 60_000})
		done <- result{resp, err}
	}()
	m := <-parked
	select {
	case res := <-done:
		t.Fatalf("claim answered %v before the actor did", res)
	default:
	}
	m.Reply(api.ClaimReply{Jobs: []api.Job{{ID: "late"}}}, nil)
	if res := <-done; res.err != nil || len(res.resp.GetJobs()) != 1 || res.resp.GetJobs()[0].GetId() != "late" {
		t.Fatalf("claim = %v", res)
	}

	ctx, cancel := context.WithCancel(as("worker"))
	go func() {
		_, err := pb.NewWorkerClient(r.conn).Claim(ctx, &pb.ClaimRequest{Queues: []string{"q"}, WaitMs: 60_000})
		done <- result{err: err}
	}()
	m = <-parked
	cancel()
	if res := <-done; status.Code(res.err) != codes.Canceled {
		t.Fatalf("cancelled claim = %v, want Canceled", res.err)
	}
	m.Reply(api.ClaimReply{}, nil) // the actor answers later: nobody waits, nothing blocks
}

// Stop refuses new calls at once but answers the ones in flight: a claim
// parked in its actor gets the actor's answer, and Serve returns only
// after it was sent.
func TestStopAnswersCallsInFlight(t *testing.T) {
	r := newRig(t)
	parked := make(chan *actors.Message, 1)
	r.actors.set(func(_ string, m *actors.Message) { parked <- m })
	done := make(chan error, 1)
	go func() {
		resp, err := pb.NewWorkerClient(r.conn).Claim(as("worker"), &pb.ClaimRequest{Queues: []string{"q"}, WaitMs: 60_000})
		if err == nil && len(resp.GetJobs()) != 1 {
			err = errors.New("no job")
		}
		done <- err
	}()
	m := <-parked
	r.srv.Stop(context.Background())
	// New calls are refused (or, racing the stop, told it is going away).
	if hs, err := healthgrpc.NewHealthClient(r.conn).Check(context.Background(), &healthgrpc.HealthCheckRequest{}); err == nil && hs.GetStatus() == healthgrpc.HealthCheckResponse_SERVING {
		t.Error("a stopping server says SERVING")
	}
	select {
	case err := <-r.served:
		t.Fatalf("Serve returned (%v) with a call in flight", err)
	default:
	}
	m.Reply(api.ClaimReply{Jobs: []api.Job{{ID: "j"}}}, nil) // as the actors answer when they stop
	if err := <-done; err != nil {
		t.Fatalf("claim in flight at stop: %v, want its answer", err)
	}
	if err := <-r.served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	r.served <- nil // for the cleanup
}

// Stop's context bounds it: calls still in flight when it ends are cut.
func TestStopCutsCallsWhenItsContextEnds(t *testing.T) {
	r := newRig(t)
	parked := make(chan *actors.Message, 1)
	r.actors.set(func(_ string, m *actors.Message) { parked <- m })
	done := make(chan error, 1)
	go func() {
		_, err := pb.NewWorkerClient(r.conn).Claim(as("worker"), &pb.ClaimRequest{Queues: []string{"q"}, WaitMs: 60_000})
		done <- err
	}()
	m := <-parked
	ctx, cancel := context.WithCancel(context.Background())
	r.srv.Stop(ctx)
	cancel()
	if err := <-done; status.Code(err) != codes.Unavailable {
		t.Fatalf("claim cut at stop: %v, want Unavailable", err)
	}
	if err := <-r.served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	r.served <- nil
	m.Reply(api.ClaimReply{}, nil)
}

// The Admin service runs the admin door's code with the caller's
// principal and JSON documents as text.
func TestAdminService(t *testing.T) {
	r := newRig(t)
	c := pb.NewAdminClient(r.conn)
	q, err := c.GetQuota(as("admin"), &pb.GetQuotaRequest{})
	if err != nil || q.GetQuota().GetNamespace() != "acme" || q.GetQuota().GetDocument() != `{"max_pending":3}` || q.GetQuota().GetRevision() != 4 {
		t.Fatalf("get quota = %v, %v", q, err)
	}
	if s, err := c.SetQuota(as("admin"), &pb.SetQuotaRequest{Document: `{"max_pending":9}`}); err != nil || s.GetQuota().GetRevision() != 5 {
		t.Fatalf("set quota = %v, %v", s, err)
	}
	if p, err := c.PatchQuota(as("admin"), &pb.PatchQuotaRequest{Patch: `{"max_pending":null}`}); err != nil || p.GetQuota().GetRevision() != 6 {
		t.Fatalf("patch quota = %v, %v", p, err)
	}
	if cl, err := c.ClearQuota(as("admin"), &pb.ClearQuotaRequest{}); err != nil || cl.GetQuota().GetRevision() != 7 {
		t.Fatalf("clear quota = %v, %v", cl, err)
	}
	if got := strings.Join(r.admin.got, "|"); got != `quota acme|set tok_admin {"max_pending":9}|patch {"max_pending":null}|clear` {
		t.Fatalf("admin calls %s", got)
	}
	r.admin.setErr = api.Errorf(api.CodeInvalidArgument, api.ReasonInvalidQuota, "max_pending: must be >= 0, got -1")
	_, err = c.SetQuota(as("admin"), &pb.SetQuotaRequest{Document: `{"max_pending":-1}`})
	wantStatus(t, err, codes.InvalidArgument, api.ReasonInvalidQuota, "max_pending: must be >= 0, got -1")

	u, err := c.GetUsage(as("admin"), &pb.GetUsageRequest{})
	if err != nil || u.GetUsage().GetPending() != 1 || u.GetUsage().GetRunning() != 2 || u.GetUsage().GetArchived() != 3 || u.GetUsage().GetDead() != 4 {
		t.Fatalf("usage = %v, %v", u, err)
	}
	if _, err := c.ListDead(as("admin"), &pb.ListDeadRequest{}); err != nil {
		t.Fatal(err)
	}
	dead, err := c.ListDead(as("admin"), &pb.ListDeadRequest{Queue: "q", Shed: true, Limit: 5})
	if err != nil || len(dead.GetJobs()) != 1 || dead.GetJobs()[0].GetDeadMeta() != `{"shed":"quota"}` || dead.GetJobs()[0].GetStatus() != pb.JobStatus_JOB_STATUS_DEAD {
		t.Fatalf("list dead = %v, %v", dead, err)
	}
	f0, f1 := r.admin.filters[0], r.admin.filters[1]
	if f0.Status != api.StatusDead || f0.Shed != nil || f0.Limit != nil || f1.Queue != "q" || f1.Shed == nil || !*f1.Shed || f1.Limit == nil || *f1.Limit != 5 {
		t.Fatalf("filters %+v %+v", f0, f1)
	}
	rep, err := c.ReplayDead(as("admin"), &pb.ReplayDeadRequest{Ids: []string{"d1"}})
	if err != nil || rep.GetResults()[0].GetId() != "d1" || rep.GetResults()[0].GetOutcome() != pb.Outcome_OUTCOME_ENQUEUED {
		t.Fatalf("replay = %v, %v", rep, err)
	}
}

// The health service needs no token and says NOT_SERVING when the node
// cannot reach its store or NATS; reflection lists the flexiq.v1
// services.
func TestHealthAndReflection(t *testing.T) {
	r := newRig(t)
	hc := healthgrpc.NewHealthClient(r.conn)
	for _, svc := range []string{"", "flexiq.v1.Producer", "flexiq.v1.Worker", "flexiq.v1.Admin"} {
		if hs, err := hc.Check(context.Background(), &healthgrpc.HealthCheckRequest{Service: svc}); err != nil || hs.GetStatus() != healthgrpc.HealthCheckResponse_SERVING {
			t.Fatalf("health of %q = %v, %v", svc, hs, err)
		}
	}
	r.admin.mu.Lock()
	r.admin.health = api.Errorf(api.CodeUnavailable, "", "store unreachable")
	r.admin.mu.Unlock()
	if hs, err := hc.Check(context.Background(), &healthgrpc.HealthCheckRequest{}); err != nil || hs.GetStatus() != healthgrpc.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("health with the store down = %v, %v", hs, err)
	}

	stream, err := reflectpb.NewServerReflectionClient(r.conn).ServerReflectionInfo(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectpb.ServerReflectionRequest{MessageRequest: &reflectpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	_ = stream.CloseSend()
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	for _, want := range []string{"flexiq.v1.Producer", "flexiq.v1.Worker", "flexiq.v1.Admin", "grpc.health.v1.Health"} {
		if !strings.Contains(strings.Join(names, " "), want) {
			t.Fatalf("reflection lists %v, want %s", names, want)
		}
	}
}

// Every status and outcome the api names has its enum value.
func TestEnumsCoverTheAPI(t *testing.T) {
	for _, s := range []api.Status{api.StatusPending, api.StatusRunning, api.StatusCompleted, api.StatusDead} {
		if statusOut[s] == pb.JobStatus_JOB_STATUS_UNSPECIFIED {
			t.Errorf("status %s has no enum value", s)
		}
	}
	for _, o := range []api.Outcome{api.OutcomeEnqueued, api.OutcomeDeduplicated, api.OutcomeCoalesced, api.OutcomeShed} {
		if outcomeOut[o] == pb.Outcome_OUTCOME_UNSPECIFIED {
			t.Errorf("outcome %s has no enum value", o)
		}
	}
}
