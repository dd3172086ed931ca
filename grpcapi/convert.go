package grpcapi

import (
	"encoding/json"
	"fmt"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/flexiq/flexiq/admin"
	"github.com/flexiq/flexiq/api"
	pb "github.com/flexiq/flexiq/grpcapi/flexiqv1"
)

// Conversions between the flexiq.v1 messages and the api types. They only
// move fields: every check of a value is the api type's Validate (or the
// actor's), so a value is refused here in the words of every surface.
// What only this surface can get wrong, JSON text in a string field, is
// refused as BAD_REQUEST naming the field.

// jsonText is the JSON of a string field ("" = none).
func jsonText(field, s string) (json.RawMessage, error) {
	if s == "" {
		return nil, nil
	}
	var v json.RawMessage
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		return nil, api.BadRequest("%s: not valid JSON: %v", field, err)
	}
	// Passed on as the text sent, as a NATS body's payload is: the actor
	// stores both alike.
	return json.RawMessage(s), nil
}

// timeIn is a timestamp field (nil = unset).
func timeIn(field string, ts *timestamppb.Timestamp) (*time.Time, error) {
	if ts == nil {
		return nil, nil
	}
	if n := ts.GetNanos(); n < 0 || n > 999_999_999 {
		return nil, api.BadRequest("%s: nanos must be 0-999999999, got %d", field, n)
	}
	// Any seconds are taken: a time outside what a job may carry is
	// refused by the one rule for it (api.Job.ResolveRunAt, in the actor).
	t := ts.AsTime()
	return &t, nil
}

func timeOut(t *time.Time) *timestamppb.Timestamp {
	if t == nil {
		return nil
	}
	return timestamppb.New(*t)
}

// jobIn is a job to enqueue; field prefixes refusals ("jobs[2]").
func jobIn(field string, j *pb.Job) (api.Job, error) {
	out := api.Job{
		ID: j.GetId(), Queue: j.GetQueue(), Task: j.GetTask(), Priority: j.GetPriority(),
		DelayMS: j.GetDelayMs(), UniqueKey: j.GetUniqueKey(),
	}
	var err error
	if out.Payload, err = jsonText(field+".payload", j.GetPayload()); err != nil {
		return out, err
	}
	if out.RunAt, err = timeIn(field+".run_at", j.GetRunAt()); err != nil {
		return out, err
	}
	if j.MaxAttempts != nil {
		v := j.GetMaxAttempts()
		out.MaxAttempts = &v
	}
	if d := j.GetDebounce(); d != nil {
		out.Debounce = &api.Debounce{Key: d.GetKey(), WindowMS: d.GetWindowMs()}
	}
	return out, nil
}

// enqueueIn is the enqueue request of jobs, each checked as NATS checks
// the same body.
func enqueueIn(jobs []*pb.Job) (*api.EnqueueRequest, error) {
	req := &api.EnqueueRequest{Jobs: make([]api.Job, len(jobs))}
	for i, j := range jobs {
		var err error
		if req.Jobs[i], err = jobIn(fmt.Sprintf("jobs[%d]", i), j); err != nil {
			return nil, err
		}
	}
	return req, req.Validate()
}

func jobOut(j *api.Job) *pb.Job {
	out := &pb.Job{
		Id: j.ID, Queue: j.Queue, Task: j.Task, Payload: string(j.Payload), Priority: j.Priority,
		RunAt: timeOut(j.RunAt), DelayMs: j.DelayMS, MaxAttempts: j.MaxAttempts, UniqueKey: j.UniqueKey,
		Status: statusOut[j.Status], Attempt: j.Attempt, Error: j.Error, DeadMeta: string(j.DeadMeta),
		CreatedAt: timeOut(j.CreatedAt), FinishedAt: timeOut(j.FinishedAt), Result: string(j.Result),
		LeaseUntil: timeOut(j.LeaseUntil),
	}
	if d := j.Debounce; d != nil {
		out.Debounce = &pb.Debounce{Key: d.Key, WindowMs: d.WindowMS}
	}
	return out
}

func jobsOut(jobs []api.Job) []*pb.Job {
	out := make([]*pb.Job, len(jobs))
	for i := range jobs {
		out[i] = jobOut(&jobs[i])
	}
	return out
}

// statusOut and outcomeOut map the api's names to the enums; a name
// missing here is UNSPECIFIED (the tests check every name is here).
var (
	statusOut = map[api.Status]pb.JobStatus{
		api.StatusPending:   pb.JobStatus_JOB_STATUS_PENDING,
		api.StatusRunning:   pb.JobStatus_JOB_STATUS_RUNNING,
		api.StatusCompleted: pb.JobStatus_JOB_STATUS_COMPLETED,
		api.StatusDead:      pb.JobStatus_JOB_STATUS_DEAD,
	}
	outcomeOut = map[api.Outcome]pb.Outcome{
		api.OutcomeEnqueued:     pb.Outcome_OUTCOME_ENQUEUED,
		api.OutcomeDeduplicated: pb.Outcome_OUTCOME_DEDUPLICATED,
		api.OutcomeCoalesced:    pb.Outcome_OUTCOME_COALESCED,
		api.OutcomeShed:         pb.Outcome_OUTCOME_SHED,
	}
)

func resultsOut(rs []api.EnqueueResult) []*pb.EnqueueResult {
	out := make([]*pb.EnqueueResult, len(rs))
	for i, r := range rs {
		out[i] = &pb.EnqueueResult{Id: r.ID, Outcome: outcomeOut[r.Outcome]}
	}
	return out
}

func errorOut(e *api.Error) *pb.Error {
	if e == nil {
		return nil
	}
	return &pb.Error{Code: string(e.Code), Reason: string(e.Reason), Message: e.Message}
}

func quotaOut(q admin.QuotaReply) *pb.Quota {
	return &pb.Quota{Namespace: q.Namespace, Document: string(q.Quota), Revision: q.Revision, Error: errorOut(q.Error)}
}

// replyAs is an actor's answer as the type op answers with (the actors
// answer with values; a pointer is taken too).
func replyAs[T any](body any) (T, error) {
	switch b := body.(type) {
	case T:
		return b, nil
	case *T:
		if b != nil {
			return *b, nil
		}
	}
	var zero T
	return zero, fmt.Errorf("unexpected answer %T, want %T", body, zero)
}
