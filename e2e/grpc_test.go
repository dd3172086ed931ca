package e2e

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthgrpc "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/stats"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/flexiq/flexiq/api"
	pb "github.com/flexiq/flexiq/grpcapi/flexiqv1"
)

// A gRPC caller does what a Go client over NATS and an operator over HTTP
// do, on the same node and the same data: each write is seen on the other
// surfaces, and the quota it sets is enforced on them.
func TestGRPCSurface(t *testing.T) {
	e := start(t)
	tn := e.tenant("acme")
	conn := e.grpcConn()
	prod, work, adm := pb.NewProducerClient(conn), pb.NewWorkerClient(conn), pb.NewAdminClient(conn)

	// Admin: the admin door's quota operations, audited like its own.
	set, err := adm.SetQuota(withToken(t, tn.admin), &pb.SetQuotaRequest{Document: `{"max_pending":100,"on_excess":"reject"}`})
	if err != nil || set.GetQuota().GetNamespace() != "acme" || set.GetQuota().GetRevision() != 1 {
		t.Fatalf("set quota = %v, %v", set, err)
	}
	patched, err := adm.PatchQuota(withToken(t, tn.admin), &pb.PatchQuotaRequest{Patch: `{"on_excess":null,"max_pending":3}`})
	if err != nil || patched.GetQuota().GetRevision() != 2 {
		t.Fatalf("patch quota = %v, %v", patched, err)
	}
	jsonEqual(t, []byte(patched.GetQuota().GetDocument()), `{"max_pending":3}`)
	u := e.usage(tn.admin)
	jsonEqual(t, u.Quota, `{"max_pending":3}`)
	if u.Revision != 2 {
		t.Fatalf("HTTP sees revision %d, want 2", u.Revision)
	}
	var audit struct {
		Entries []struct{ Action, Target string }
	}
	e.mustDo(http.StatusOK, "GET", "/v1/audit", tn.admin, nil, &audit)
	if len(audit.Entries) != 2 || audit.Entries[0].Action != "quota.set" || audit.Entries[0].Target != "acme" {
		t.Fatalf("audit %+v, want both gRPC writes", audit.Entries)
	}

	// Producer: jobs read back over HTTP as sent; the quota set over gRPC
	// holds on NATS.
	runAt := time.Date(2031, 2, 3, 4, 5, 6, 123456000, time.UTC)
	many, err := prod.EnqueueMany(withToken(t, tn.producer), &pb.EnqueueManyRequest{Jobs: []*pb.Job{
		{Id: "later", Queue: "q", Task: "t", Payload: `{"to": "a@example.com"}`, RunAt: timestamppb.New(runAt), Priority: 5},
		{Id: "now", Queue: "q", Task: "t", Payload: `[1,2]`},
	}})
	if err != nil || len(many.GetResults()) != 2 || many.GetResults()[1].GetId() != "now" || many.GetResults()[1].GetOutcome() != pb.Outcome_OUTCOME_ENQUEUED {
		t.Fatalf("enqueue many = %v, %v", many, err)
	}
	j := e.job(tn.admin, "later")
	if j.RunAt == nil || !j.RunAt.Equal(runAt) || j.Priority != 5 {
		t.Fatalf("job over HTTP: %+v", j)
	}
	jsonEqual(t, j.Payload, `{"to":"a@example.com"}`)
	one, err := prod.Enqueue(withToken(t, tn.producer), &pb.EnqueueRequest{Job: &pb.Job{Queue: "q", Task: "t"}})
	if err != nil || one.GetResult().GetId() == "" {
		t.Fatalf("enqueue = %v, %v", one, err)
	}
	_, err = tn.p.Enqueue(ctx(t), job("q", "t"))
	wantAPIError(t, err, api.CodeResourceExhausted, api.ReasonQueueFull, "queue 'q' is full: 3 pending >= max_pending 3")
	if _, err := adm.ClearQuota(withToken(t, tn.admin), &pb.ClearQuotaRequest{}); err != nil {
		t.Fatal(err)
	}
	addTrigger(t, e, tn.admin, "order.created", "mail", "confirm")
	ev, err := prod.PublishEvent(withToken(t, tn.producer), &pb.PublishEventRequest{Name: "order.created", Payload: `{"order":7}`})
	if err != nil || len(ev.GetResults()) != 1 || ev.GetResults()[0].GetOutcome() != pb.Outcome_OUTCOME_ENQUEUED {
		t.Fatalf("publish event = %v, %v", ev, err)
	}

	// Worker: a long poll is answered as soon as a job arrives (enqueued
	// over NATS until the parked claim takes one, without a fixed sleep).
	type claimed struct {
		resp *pb.ClaimResponse
		err  error
	}
	ch := make(chan claimed, 1)
	go func() {
		resp, err := work.Claim(withToken(t, tn.worker), &pb.ClaimRequest{Queues: []string{"fresh"}, WaitMs: 20000, Worker: "g1"})
		ch <- claimed{resp, err}
	}()
	var c claimed
	for c.resp == nil && c.err == nil {
		enqueue(t, tn.p, job("fresh", "t"))
		select {
		case c = <-ch:
		case <-time.After(50 * time.Millisecond):
		}
	}
	if c.err != nil || len(c.resp.GetJobs()) != 1 || c.resp.GetJobs()[0].GetQueue() != "fresh" ||
		c.resp.GetJobs()[0].GetStatus() != pb.JobStatus_JOB_STATUS_RUNNING || c.resp.GetJobs()[0].GetLeaseUntil() == nil {
		t.Fatalf("long poll = %v, %v", c.resp, c.err)
	}

	got, err := work.Claim(withToken(t, tn.worker), &pb.ClaimRequest{Queues: []string{"q"}, Max: 10, LeaseMs: 60000})
	if err != nil || len(got.GetJobs()) != 2 { // "now" and the one without id: "later" is not due
		t.Fatalf("claim = %v, %v", got, err)
	}
	a, b := got.GetJobs()[0], got.GetJobs()[1]
	hb, err := work.Heartbeat(withToken(t, tn.worker), &pb.HeartbeatRequest{Ids: []string{a.GetId(), "gone"}})
	if err != nil || len(hb.GetExtended()) != 1 || hb.GetExtended()[0] != a.GetId() {
		t.Fatalf("heartbeat = %v, %v", hb, err)
	}
	acks, err := work.AckMany(withToken(t, tn.worker), &pb.AckManyRequest{Acks: []*pb.AckItem{
		{Id: a.GetId(), Attempt: a.GetAttempt(), Result: `{"sent":true}`},
		{Id: "no-such-job"},
		{Id: b.GetId(), Attempt: b.GetAttempt() + 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := acks.GetResults()
	if len(r) != 3 || r[0].GetError() != nil || r[1].GetError().GetReason() != string(api.ReasonUnknownJob) ||
		r[2].GetError().GetCode() != string(api.CodeAborted) || r[2].GetError().GetReason() != string(api.ReasonLeaseLost) {
		t.Fatalf("ack many = %v", r)
	}
	if j := e.job(tn.admin, a.GetId()); j.Status != api.StatusCompleted || string(j.Result) != `{"sent":true}` {
		t.Fatalf("acked job over HTTP: %s %s", j.Status, j.Result)
	}
	retry := false
	nack, err := work.Nack(withToken(t, tn.worker), &pb.NackRequest{Id: b.GetId(), Attempt: b.GetAttempt(), Error: "boom", Retry: &retry})
	if err != nil || nack.GetStatus() != pb.JobStatus_JOB_STATUS_DEAD {
		t.Fatalf("nack = %v, %v", nack, err)
	}

	// Dead letters: listed and replayed through admission.
	dead, err := adm.ListDead(withToken(t, tn.admin), &pb.ListDeadRequest{Queue: "q"})
	if err != nil || len(dead.GetJobs()) != 1 || dead.GetJobs()[0].GetId() != b.GetId() || dead.GetJobs()[0].GetError() != "boom" {
		t.Fatalf("list dead = %v, %v", dead, err)
	}
	if shed, err := adm.ListDead(withToken(t, tn.admin), &pb.ListDeadRequest{Shed: true}); err != nil || len(shed.GetJobs()) != 0 {
		t.Fatalf("list shed = %v, %v", shed, err)
	}
	_, err = adm.ListDead(withToken(t, tn.admin), &pb.ListDeadRequest{Limit: 10001})
	if e := grpcRefusal(t, err); e.Message != `limit: must be an integer 1-10000, got "10001"` {
		t.Fatalf("list dead over the limit: %+v", e)
	}
	rep, err := adm.ReplayDead(withToken(t, tn.admin), &pb.ReplayDeadRequest{Ids: []string{b.GetId()}})
	if err != nil || rep.GetResults()[0].GetOutcome() != pb.Outcome_OUTCOME_ENQUEUED {
		t.Fatalf("replay = %v, %v", rep, err)
	}
	usage, err := adm.GetUsage(withToken(t, tn.admin), &pb.GetUsageRequest{})
	if err != nil {
		t.Fatal(err)
	}
	hu := e.usage(tn.admin)
	if usage.GetUsage().GetPending() != hu.Usage.Pending || usage.GetUsage().GetDead() != 0 || usage.GetUsage().GetArchived() != 1 || usage.GetQuota().GetRevision() != 3 {
		t.Fatalf("usage over gRPC %v, over HTTP %+v", usage, hu)
	}

	// Health needs no token.
	for _, svc := range []string{"", "flexiq.v1.Producer", "flexiq.v1.Worker", "flexiq.v1.Admin"} {
		hs, err := healthgrpc.NewHealthClient(conn).Check(ctx(t), &healthgrpc.HealthCheckRequest{Service: svc})
		if err != nil || hs.GetStatus() != healthgrpc.HealthCheckResponse_SERVING {
			t.Fatalf("health %q = %v, %v", svc, hs, err)
		}
	}
}

// sentSignal closes sent once a call's request message has gone out on
// the wire.
type sentSignal struct {
	sent chan struct{}
	once atomic.Bool
}

func (s *sentSignal) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }
func (s *sentSignal) HandleRPC(_ context.Context, st stats.RPCStats) {
	if _, ok := st.(*stats.OutPayload); ok && !s.once.Swap(true) {
		close(s.sent)
	}
}
func (s *sentSignal) TagConn(ctx context.Context, _ *stats.ConnTagInfo) context.Context { return ctx }
func (s *sentSignal) HandleConn(context.Context, stats.ConnStats)                       {}

// signalledConn is a gRPC connection to addr whose first call's request
// closes the signal's sent once it has gone out.
func signalledConn(t *testing.T, addr string) (*grpc.ClientConn, *sentSignal) {
	t.Helper()
	sig := &sentSignal{sent: make(chan struct{})}
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStatsHandler(sig))
	if err != nil {
		t.Fatal(err)
	}
	return conn, sig
}

// A node that stops answers a gRPC long poll in flight (with no jobs, as
// its actors answer every parked claim) instead of holding its stop for
// the poll's minute or dropping the call.
func TestGRPCLongPollAnsweredWhenTheNodeStops(t *testing.T) {
	// The claim must have reached the node before the stop begins; the
	// client can only tell that it went out. A stop that won the race
	// refuses the call instead (UNAVAILABLE): try again on a fresh node.
	for try := 0; ; try++ {
		e := start(t)
		tn := e.tenant("acme")
		conn, sig := signalledConn(t, e.node.GRPCAddr())
		done := make(chan error, 1)
		go func() {
			resp, err := pb.NewWorkerClient(conn).Claim(withToken(t, tn.worker), &pb.ClaimRequest{Queues: []string{"q"}, WaitMs: 60_000})
			if err == nil && len(resp.GetJobs()) != 0 {
				t.Errorf("claim at stop got jobs %v", resp.GetJobs())
			}
			done <- err
		}()
		<-sig.sent
		// A round trip on the same connection after the claim went out:
		// the node has read the claim by the time it answers this.
		if _, err := healthgrpc.NewHealthClient(conn).Check(ctx(t), &healthgrpc.HealthCheckRequest{}); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		e.stop()
		if took := time.Since(began); took > 4*time.Second {
			t.Fatalf("stop took %v with a long poll in flight", took)
		}
		err := <-done
		conn.Close()
		if err == nil {
			return
		}
		if status.Code(err) != codes.Unavailable || try == 4 {
			t.Fatalf("claim in flight at stop: %v, want its answer", err)
		}
		t.Logf("try %d: the stop won the race: %v", try, err)
	}
}

// A gRPC worker that cancels its long poll leaves no claim behind: a job
// enqueued afterwards goes to the next claim, at its first attempt, not to
// the cancelled one (whose lease would run out with an attempt spent).
func TestGRPCCancelledLongPollTakesNoJob(t *testing.T) {
	e := start(t)
	tn := e.tenant("acme")
	conn, sig := signalledConn(t, e.node.GRPCAddr())
	defer conn.Close()
	work := pb.NewWorkerClient(conn)
	pollCtx, cancel := context.WithCancel(withToken(t, tn.worker))
	done := make(chan error, 1)
	go func() {
		_, err := work.Claim(pollCtx, &pb.ClaimRequest{Queues: []string{"q"}, WaitMs: 60_000, LeaseMs: 60_000})
		done <- err
	}()
	<-sig.sent
	cancel()
	if err := <-done; status.Code(err) != codes.Canceled {
		t.Fatalf("cancelled claim: %v", err)
	}
	// The node reads a connection's frames in order: by the time it
	// answers this, it has seen the cancel.
	if _, err := healthgrpc.NewHealthClient(conn).Check(ctx(t), &healthgrpc.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pb.NewProducerClient(conn).Enqueue(withToken(t, tn.producer), &pb.EnqueueRequest{Job: &pb.Job{Queue: "q", Task: "t"}}); err != nil {
		t.Fatal(err)
	}
	resp, err := work.Claim(withToken(t, tn.worker), &pb.ClaimRequest{Queues: []string{"q"}, WaitMs: 5_000, LeaseMs: 60_000})
	if err != nil || len(resp.GetJobs()) != 1 || resp.GetJobs()[0].GetAttempt() != 1 {
		t.Fatalf("the next claim: %v, %v; want the job at its first attempt", resp, err)
	}
}

// The same over NATS with the Go client: a caller that leaves a long poll
// gets its error at once, and the job the node hands to that poll is given
// back (the client releases it), so the next claim gets it at its first
// attempt instead of after its lease.
func TestNATSCancelledLongPollTakesNoJob(t *testing.T) {
	e := start(t)
	tn := e.tenant("acme")
	pollCtx, cancel := context.WithCancel(context.Background())
	sent := tn.w.Conn().Stats().OutMsgs
	done := make(chan error, 1)
	go func() {
		_, err := tn.w.Claim(pollCtx, api.ClaimRequest{Queues: []string{"q"}, Max: 1, WaitMS: 60_000, LeaseMS: 60_000})
		done <- err
	}()
	// The claim is on its way once the connection has sent it.
	for tn.w.Conn().Stats().OutMsgs == sent {
		waitFor(time.Millisecond)
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled claim: %v", err)
	}
	if _, err := tn.p.Enqueue(ctx(t), job("q", "t")); err != nil {
		t.Fatal(err)
	}
	// This claim reaches the node after the one left (one connection, in
	// order): the job went to that one first.
	jobs, err := tn.w.Claim(ctx(t), api.ClaimRequest{Queues: []string{"q"}, Max: 1, WaitMS: 10_000, LeaseMS: 60_000})
	if err != nil || len(jobs) != 1 || jobs[0].Attempt != 1 {
		t.Fatalf("the next claim: %+v, %v; want the job at its first attempt", jobs, err)
	}
}
