package e2e

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/cachebust"
	"github.com/flexiq/flexiq/client"
	"github.com/flexiq/flexiq/grpcapi"
	pb "github.com/flexiq/flexiq/grpcapi/flexiqv1"
	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
)

// grpcConn dials the node's gRPC surface.
func (e *env) grpcConn() *grpc.ClientConn {
	e.t.Helper()
	if e.node.GRPCAddr() == "" {
		e.t.Fatal("the node serves no gRPC")
	}
	conn, err := grpc.NewClient(e.node.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { conn.Close() })
	return conn
}

// withToken is a call context carrying token as gRPC callers send it.
func withToken(t testing.TB, token string) context.Context {
	return metadata.AppendToOutgoingContext(ctx(t), "authorization", "Bearer "+token)
}

// grpcRefusal is the refusal a gRPC call came back with, read as a gRPC
// client reads it: the status code and message, and the reason from the
// google.rpc.ErrorInfo of domain flexiq, which must be there.
func grpcRefusal(t testing.TB, err error) *api.Error {
	t.Helper()
	st, ok := status.FromError(err)
	if err == nil || !ok {
		t.Fatalf("gRPC call: %v, want a refusal", err)
	}
	var info *errdetails.ErrorInfo
	for _, d := range st.Details() {
		if i, ok := d.(*errdetails.ErrorInfo); ok {
			info = i
		}
	}
	if info == nil || info.GetDomain() != "flexiq" {
		t.Fatalf("gRPC status %s %q carries no ErrorInfo of domain flexiq: %v", st.Code(), st.Message(), st.Details())
	}
	e := grpcapi.FromStatus(st)
	if grpcapi.Code(e.Code) != st.Code() {
		t.Fatalf("status code %s has no FlexiQ name", st.Code())
	}
	return e
}

// httpRefusal is the refusal an admin door call comes back with: its
// status must be the code's (docs/protocol.md) and its body the error body.
func (e *env) httpRefusal(t testing.TB, method, path, token string, reqBody any) *api.Error {
	t.Helper()
	status, body := e.do(method, path, token, reqBody)
	var eb api.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil || eb.Error == nil {
		t.Fatalf("HTTP %d %s: not an error body", status, body)
	}
	if status != api.HTTPStatus(eb.Error.Code) {
		t.Fatalf("HTTP %d for %s, want %d", status, eb.Error.Code, api.HTTPStatus(eb.Error.Code))
	}
	return eb.Error
}

// natsRaw sends body as is on subject over c's connection and reads the
// refusal from the reply as any NATS client would: the JSON body, which
// the micro headers must agree with.
func natsRaw(t testing.TB, c *client.Client, subject, token, body string) *api.Error {
	t.Helper()
	reply, err := c.Conn().RequestMsg(newMsg(subject, token, body), 10*time.Second)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	var eb api.ErrorBody
	if err := json.Unmarshal(reply.Data, &eb); err != nil || eb.Error == nil {
		t.Fatalf("reply %s: not an error body", reply.Data)
	}
	if reply.Header.Get(api.HeaderError) != eb.Error.Message || reply.Header.Get(api.HeaderErrorCode) != strconv.Itoa(api.HTTPStatus(eb.Error.Code)) {
		t.Fatalf("headers %v disagree with the body %s", reply.Header, reply.Data)
	}
	return eb.Error
}

// fqRefusal is what fq shows of a refusal: exit 1 and the server's
// message as is, alone on stderr. Code and reason are not on its surface.
func fqRefusal(t testing.TB, r cliRun) *api.Error {
	t.Helper()
	if r.code != 1 || strings.Count(r.stderr, "\n") != 1 {
		t.Fatalf("fq: exit %d, stderr %q; want exit 1 and the message alone", r.code, r.stderr)
	}
	return &api.Error{Message: strings.TrimSuffix(r.stderr, "\n")}
}

func refusalOf(t testing.TB, err error) *api.Error {
	t.Helper()
	e, ok := api.AsError(err)
	if !ok {
		t.Fatalf("%v (%T), want an *api.Error", err, err)
	}
	return e
}

// surfaceCall is one way to meet a situation on one surface.
type surfaceCall struct {
	surface string // nats, http, grpc, fq
	how     string
	call    func(t *testing.T) *api.Error
}

// One table, four surfaces (docs/protocol.md: every client sees the same code,
// reason and message for the same situation): each situation is met
// through the Go client over NATS, the admin door (where it offers the
// call), gRPC and fq, and each refusal must be the same, to the byte.
func TestEverySurfaceRefusesAlike(t *testing.T) {
	e := start(t)
	conn := e.grpcConn()
	prod, work, adm := pb.NewProducerClient(conn), pb.NewWorkerClient(conn), pb.NewAdminClient(conn)
	enqueueQ := func(c *client.Client) func(*testing.T) *api.Error {
		return func(t *testing.T) *api.Error {
			_, err := c.Enqueue(ctx(t), job("q", "t"))
			return refusalOf(t, err)
		}
	}
	grpcEnqueueQ := func(token string) func(*testing.T) *api.Error {
		return func(t *testing.T) *api.Error {
			_, err := prod.Enqueue(withToken(t, token), &pb.EnqueueRequest{Job: &pb.Job{Queue: "q", Task: "t", Payload: `{"n":1}`}})
			return grpcRefusal(t, err)
		}
	}
	fqEnqueueQ := func(token string) func(*testing.T) *api.Error {
		return func(t *testing.T) *api.Error {
			return fqRefusal(t, e.fq(token, "enqueue", "--queue", "q", "--task", "t"))
		}
	}
	httpReplay := func(token string, ids ...string) func(*testing.T) *api.Error {
		return func(t *testing.T) *api.Error {
			return e.httpRefusal(t, "POST", "/v1/dead/replay", token, api.ReplayRequest{IDs: ids})
		}
	}
	// admission is the calls that meet the namespace's admission: an
	// enqueue on NATS, gRPC and fq, and the admin door's one producer
	// path, a dead-letter replay (of a job of queue q, so the depth
	// message names the same queue).
	admission := func(tn *tenant, dead string) []surfaceCall {
		return []surfaceCall{
			{"nats", "enqueue", enqueueQ(tn.p)},
			{"http", "POST /v1/dead/replay", httpReplay(tn.admin, dead)},
			{"grpc", "Producer.Enqueue", grpcEnqueueQ(tn.producer)},
			{"fq", "fq enqueue", fqEnqueueQ(tn.producer)},
		}
	}
	const bogus = "fq_no_such_token"

	for _, sit := range []struct {
		name string
		// setup prepares the namespace and returns the refusal every
		// surface must give, and the calls that meet it.
		setup func(t *testing.T) (*api.Error, []surfaceCall)
	}{
		{"queue full", func(t *testing.T) (*api.Error, []surfaceCall) {
			tn := e.tenant("full")
			dead := killJob(t, tn, "q", true)
			enqueue(t, tn.p, job("q", "t"))
			e.setQuota(tn.admin, `{"max_pending":1}`)
			return api.Errorf(api.CodeResourceExhausted, api.ReasonQueueFull, "queue 'q' is full: 1 pending >= max_pending 1"), admission(tn, dead)
		}},
		{"rate limited", func(t *testing.T) (*api.Error, []surfaceCall) {
			tn := e.tenant("rate")
			dead := killJob(t, tn, "q", true)
			e.setQuota(tn.admin, `{"enqueue_rate":"1/h"}`)
			enqueue(t, tn.p, job("q", "t")) // the bucket's one token
			return api.Errorf(api.CodeResourceExhausted, api.ReasonRateLimited, "rate limit exceeded for: namespace 'rate' enqueue_rate 1/h"), admission(tn, dead)
		}},
		{"quota unreadable", func(t *testing.T) (*api.Error, []surfaceCall) {
			tn := e.tenant("broken")
			dead := killJob(t, tn, "q", true)
			bad := []byte(`{"max_pending":-1}`)
			// Behind FlexiQ's back: straight into the store, then dropped
			// from the cache as a broadcast would.
			if _, err := e.node.Store.SettingPut(context.Background(), store.SettingPutParams{Key: quota.Key("broken"), Value: bad, Now: time.Now()}); err != nil {
				t.Fatal(err)
			}
			e.node.Cache.Invalidate("broken", 1<<40)
			_, cause := quota.Decode(bad)
			want := cachebust.Unreadable("broken", cause)
			if !strings.HasPrefix(want.Message, "quota of namespace 'broken' cannot be read: ") {
				t.Fatalf("unreadable message %q", want.Message)
			}
			return want, admission(tn, dead)
		}},
		{"quota unreadable, patched", func(t *testing.T) (*api.Error, []surfaceCall) {
			tn := e.tenant("broken2")
			if _, err := e.node.Store.SettingPut(context.Background(), store.SettingPutParams{Key: quota.Key("broken2"), Value: []byte(`{"max_pending":"lots"}`), Now: time.Now()}); err != nil {
				t.Fatal(err)
			}
			return api.Errorf(api.CodeFailedPrecondition, api.ReasonQuotaUnreadable,
					"the stored quota of namespace 'broken2' cannot be read, so it cannot be patched: replace it with PUT or clear it with DELETE"),
				[]surfaceCall{
					{"http", "PATCH /v1/quota", func(t *testing.T) *api.Error {
						return e.httpRefusal(t, "PATCH", "/v1/quota", tn.admin, `{"max_pending":5}`)
					}},
					{"grpc", "Admin.PatchQuota", func(t *testing.T) *api.Error {
						_, err := adm.PatchQuota(withToken(t, tn.admin), &pb.PatchQuotaRequest{Patch: `{"max_pending":5}`})
						return grpcRefusal(t, err)
					}},
					{"fq", "fq quota set", func(t *testing.T) *api.Error {
						return fqRefusal(t, e.fq(tn.admin, "quota", "set", "--max-pending", "5"))
					}},
				}
		}},
		{"bad request: not JSON", func(t *testing.T) (*api.Error, []surfaceCall) {
			tn := e.tenant("badjson")
			// fq has no such call: it refuses JSON that does not parse
			// itself, as a usage error (docs/cli.md, exit 2).
			return api.Errorf(api.CodeInvalidArgument, api.ReasonBadRequest, "request body is not valid JSON: invalid character 'o' in literal null (expecting 'u')"),
				[]surfaceCall{
					{"nats", "fq.v1.enqueue body nope", func(t *testing.T) *api.Error {
						return natsRaw(t, tn.p, api.SubjectEnqueue, tn.producer, "nope")
					}},
					{"nats", "fq.v1.dead.replay body nope", func(t *testing.T) *api.Error {
						return natsRaw(t, tn.a, api.SubjectDeadReplay, tn.admin, "nope")
					}},
					{"http", "POST /v1/dead/replay body nope", func(t *testing.T) *api.Error {
						return e.httpRefusal(t, "POST", "/v1/dead/replay", tn.admin, "nope")
					}},
					{"http", "PUT /v1/quota body nope", func(t *testing.T) *api.Error {
						return e.httpRefusal(t, "PUT", "/v1/quota", tn.admin, "nope")
					}},
					// gRPC's bodies are protobuf; the quota document is the
					// JSON it carries as the admin door's body.
					{"grpc", "Admin.SetQuota document nope", func(t *testing.T) *api.Error {
						_, err := adm.SetQuota(withToken(t, tn.admin), &pb.SetQuotaRequest{Document: "nope"})
						return grpcRefusal(t, err)
					}},
				}
		}},
		{"bad request: invalid field", func(t *testing.T) (*api.Error, []surfaceCall) {
			tn := e.tenant("badfield")
			return api.Errorf(api.CodeInvalidArgument, "", "ids: must not hold an empty id"), []surfaceCall{
				{"nats", "fq.v1.dead.replay", func(t *testing.T) *api.Error {
					_, err := tn.a.Replay(ctx(t), "")
					return refusalOf(t, err)
				}},
				{"http", "POST /v1/dead/replay", httpReplay(tn.admin, "")},
				{"grpc", "Admin.ReplayDead", func(t *testing.T) *api.Error {
					_, err := adm.ReplayDead(withToken(t, tn.admin), &pb.ReplayDeadRequest{Ids: []string{""}})
					return grpcRefusal(t, err)
				}},
				{"fq", "fq dead replay", func(t *testing.T) *api.Error {
					return fqRefusal(t, e.fq(tn.admin, "dead", "replay", ""))
				}},
			}
		}},
		{"unknown job", func(t *testing.T) (*api.Error, []surfaceCall) {
			tn := e.tenant("unknown")
			return api.Errorf(api.CodeNotFound, api.ReasonUnknownJob, "job 'no-such-job' not found"), []surfaceCall{
				{"nats", "fq.v1.ack", func(t *testing.T) *api.Error {
					return refusalOf(t, tn.w.Ack(ctx(t), "no-such-job", 0, nil))
				}},
				{"http", "GET /v1/jobs/no-such-job", func(t *testing.T) *api.Error {
					return e.httpRefusal(t, "GET", "/v1/jobs/no-such-job", tn.admin, nil)
				}},
				{"grpc", "Worker.Ack", func(t *testing.T) *api.Error {
					_, err := work.Ack(withToken(t, tn.worker), &pb.AckRequest{Id: "no-such-job"})
					return grpcRefusal(t, err)
				}},
				{"fq", "fq job show", func(t *testing.T) *api.Error {
					return fqRefusal(t, e.fq(tn.admin, "job", "show", "no-such-job"))
				}},
			}
		}},
		{"lease lost", func(t *testing.T) (*api.Error, []surfaceCall) {
			tn := e.tenant("lease")
			id := enqueue(t, tn.p, job("q", "t"))[0].ID
			if got := claim(t, tn.w, 1, "q"); len(got) != 1 || got[0].Attempt != 1 {
				t.Fatalf("claim = %+v", got)
			}
			// An ack for an attempt the job is not at: a worker whose
			// lease expired. The admin door and fq offer no ack.
			return api.Errorf(api.CodeAborted, api.ReasonLeaseLost, "job '%s' is not running under this lease", id), []surfaceCall{
				{"nats", "fq.v1.ack", func(t *testing.T) *api.Error {
					return refusalOf(t, tn.w.Ack(ctx(t), id, 2, nil))
				}},
				{"grpc", "Worker.Ack", func(t *testing.T) *api.Error {
					_, err := work.Ack(withToken(t, tn.worker), &pb.AckRequest{Id: id, Attempt: 2})
					return grpcRefusal(t, err)
				}},
				{"grpc", "Worker.Nack", func(t *testing.T) *api.Error {
					_, err := work.Nack(withToken(t, tn.worker), &pb.NackRequest{Id: id, Attempt: 2, Error: "late"})
					return grpcRefusal(t, err)
				}},
			}
		}},
		{"unauthenticated", func(t *testing.T) (*api.Error, []surfaceCall) {
			tn := e.tenant("authn")
			return api.Unauthenticated(), []surfaceCall{
				{"nats", "connect", func(t *testing.T) *api.Error {
					c, err := client.Connect(e.node.NATSURL(), bogus)
					if err == nil {
						c.Close()
						t.Fatal("the bus admitted an unknown token")
					}
					return refusalOf(t, err)
				}},
				{"nats", "request", func(t *testing.T) *api.Error {
					return natsRaw(t, tn.p, api.SubjectEnqueue, bogus, `{"jobs":[{"queue":"q","task":"t"}]}`)
				}},
				{"http", "GET /v1/quota", func(t *testing.T) *api.Error {
					return e.httpRefusal(t, "GET", "/v1/quota", bogus, nil)
				}},
				{"grpc", "Producer.Enqueue", grpcEnqueueQ(bogus)},
				{"grpc", "no metadata", func(t *testing.T) *api.Error {
					_, err := adm.GetQuota(ctx(t), &pb.GetQuotaRequest{})
					return grpcRefusal(t, err)
				}},
				{"fq", "fq enqueue", fqEnqueueQ(bogus)},
				{"fq", "fq quota get", func(t *testing.T) *api.Error {
					return fqRefusal(t, e.fq(bogus, "quota", "get"))
				}},
			}
		}},
		{"permission denied", func(t *testing.T) (*api.Error, []surfaceCall) {
			tn := e.tenant("perm")
			dead := killJob(t, tn, "q", true)
			return api.Errorf(api.CodePermissionDenied, "", "a producer token may not replay dead letters"), []surfaceCall{
				{"nats", "fq.v1.dead.replay", func(t *testing.T) *api.Error {
					_, err := tn.p.Replay(ctx(t), dead)
					return refusalOf(t, err)
				}},
				{"http", "POST /v1/dead/replay", httpReplay(tn.producer, dead)},
				{"grpc", "Admin.ReplayDead", func(t *testing.T) *api.Error {
					_, err := adm.ReplayDead(withToken(t, tn.producer), &pb.ReplayDeadRequest{Ids: []string{dead}})
					return grpcRefusal(t, err)
				}},
				{"fq", "fq dead replay", func(t *testing.T) *api.Error {
					return fqRefusal(t, e.fq(tn.producer, "dead", "replay", dead))
				}},
			}
		}},
		{"permission denied: enqueue", func(t *testing.T) (*api.Error, []surfaceCall) {
			tn := e.tenant("perm2")
			// The admin door has no enqueue.
			return api.Errorf(api.CodePermissionDenied, "", "a worker token may not enqueue"), []surfaceCall{
				{"nats", "enqueue", enqueueQ(tn.w)},
				{"grpc", "Producer.Enqueue", grpcEnqueueQ(tn.worker)},
				{"fq", "fq enqueue", fqEnqueueQ(tn.worker)},
			}
		}},
	} {
		t.Run(sit.name, func(t *testing.T) {
			want, calls := sit.setup(t)
			seen := map[string]bool{}
			for _, c := range calls {
				t.Run(c.surface+"/"+c.how, func(t *testing.T) {
					got := c.call(t)
					if c.surface == "fq" {
						// fq prints the message; its exit code (1) says
						// "the server refused".
						if got.Message != want.Message {
							t.Fatalf("fq printed %q, want %q", got.Message, want.Message)
						}
						return
					}
					if *got != *want {
						t.Fatalf("refusal %s/%s %q, want %s/%s %q", got.Code, got.Reason, got.Message, want.Code, want.Reason, want.Message)
					}
				})
				seen[c.surface] = true
			}
			// NATS and gRPC offer every situation of the table.
			if !seen["nats"] && sit.name != "quota unreadable, patched" || !seen["grpc"] {
				t.Fatalf("surfaces %v: a situation must be met on NATS and gRPC", seen)
			}
		})
	}
}
