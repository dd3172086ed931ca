package client

import (
	"encoding/json"
	"time"

	"github.com/flexiq/flexiq/api"
)

// wireJob is an api.Job as an enqueue request carries it: every field
// left out when it has its zero value. api.Job's own encoding keeps every
// field, null or empty, because a job the node shows must have one shape;
// a request does not need them, and the node reads a missing field as its
// zero value (docs/protocol.md, "The job object"). `fq bench`'s job went
// as 246 bytes, two thirds of them fields it did not set, each decoded by
// the node on its way to the actor; now as the 82 it set
// (docs/performance.md, "The Go SDK: an enqueue sends the fields a job
// sets").
//
// Its fields are api.Job's, in order, so that a Job converts to it: a
// field added to api.Job without one here fails to compile.
type wireJob struct {
	ID          string          `json:"id,omitempty"`
	Queue       string          `json:"queue,omitempty"`
	Task        string          `json:"task,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Priority    int64           `json:"priority,omitempty"`
	RunAt       *time.Time      `json:"run_at,omitempty"`
	DelayMS     int64           `json:"delay_ms,omitempty"`
	MaxAttempts *int64          `json:"max_attempts,omitempty"`
	UniqueKey   string          `json:"unique_key,omitempty"`
	Debounce    *api.Debounce   `json:"debounce,omitempty"`

	// The read-only fields, ignored by the node on input: a job taken
	// from a claim or a listing and enqueued again sends them as before.
	Status     api.Status      `json:"status,omitempty"`
	Attempt    int64           `json:"attempt,omitempty"`
	Error      string          `json:"error,omitempty"`
	DeadMeta   json.RawMessage `json:"dead_meta,omitempty"`
	CreatedAt  *time.Time      `json:"created_at,omitempty"`
	FinishedAt *time.Time      `json:"finished_at,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"`
	LeaseUntil *time.Time      `json:"lease_until,omitempty"`
}

// wireEnqueue is the body of fq.v1.enqueue as the client sends it.
type wireEnqueue struct {
	Jobs []wireJob `json:"jobs"`
}

// enqueueBody is the request of an enqueue of jobs.
func enqueueBody(jobs []api.Job) wireEnqueue {
	w := wireEnqueue{Jobs: make([]wireJob, len(jobs))}
	for i := range jobs {
		w.Jobs[i] = wireJob(jobs[i])
	}
	return w
}
