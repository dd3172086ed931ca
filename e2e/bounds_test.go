package e2e

import (
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
)

// docs/protocol.md: a run_at, delay_ms or debounce window that puts a job before
// 1970 or after 9999-12-31T23:59:59Z is INVALID_ARGUMENT naming the field,
// and nothing of the call is written; the last second in range is stored
// and read back as sent, on every backend.
func TestJobTimesOutOfBoundsAreRefused(t *testing.T) {
	eachBackend(t, func(t *testing.T) {
		e := start(t)
		tn := e.tenant("acme")
		const bounds = "must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z"

		year1 := time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
		_, err := tn.p.EnqueueMany(ctx(t), []api.Job{job("q", "t"), {Queue: "q", Task: "t", RunAt: &year1}})
		wantAPIError(t, err, api.CodeInvalidArgument, "", "jobs[1].run_at: "+bounds+", got 0001-01-01T00:00:00Z")

		_, err = tn.p.EnqueueMany(ctx(t), []api.Job{{Queue: "q", Task: "t", DelayMS: math.MaxInt64}})
		wantAPIError(t, err, api.CodeInvalidArgument, "",
			"jobs[0].delay_ms: must put run_at between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z, got 9223372036854775807")

		// Year 10000 is past what a Go time.Time writes as JSON, so it goes
		// on the wire as text, the way another language's client could.
		reply, err := tn.p.Conn().RequestMsg(newMsg(api.SubjectEnqueue, tn.producer,
			`{"jobs":[{"queue":"q","task":"t"},{"queue":"q","task":"t","run_at":"10000-01-01T00:00:00Z"}]}`), 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var body api.ErrorBody
		want := "jobs[1].run_at: " + bounds + ", got 10000-01-01T00:00:00Z"
		if err := json.Unmarshal(reply.Data, &body); err != nil || reply.Header.Get(api.HeaderErrorCode) != "400" ||
			body.Error.Code != api.CodeInvalidArgument || body.Error.Reason != "" || body.Error.Message != want {
			t.Fatalf("run_at 10000-01-01: %v %s, want 400 INVALID_ARGUMENT %q", reply.Header, reply.Data, want)
		}

		if u := e.usage(tn.admin); u.Usage.Pending != 0 {
			t.Fatalf("refused calls wrote %d jobs", u.Usage.Pending)
		}

		last := api.MaxTime
		enqueue(t, tn.p, api.Job{ID: "last", Queue: "q", Task: "t", RunAt: &last})
		if got := e.job(tn.admin, "last"); got.RunAt == nil || !got.RunAt.Equal(last) {
			t.Fatalf("run_at %v read back as %v", last, got.RunAt)
		}
		status, raw := e.do("GET", "/v1/jobs/last", tn.admin, nil)
		if status != http.StatusOK || !strings.Contains(string(raw), `"run_at":"9999-12-31T23:59:59Z"`) {
			t.Fatalf("GET /v1/jobs/last: %d %s, want run_at as sent", status, raw)
		}
		if jobs := claim(t, tn.w, 10, "q"); len(jobs) != 0 {
			t.Fatalf("a job due in 9999 was handed out: %+v", jobs)
		}
	})
}

// docs/admin-api.md: a periodic schedule is at most 256 bytes.
func TestPeriodicScheduleOfMoreThan256BytesIsRefused(t *testing.T) {
	e := start(t)
	tn := e.tenant("acme")
	// "00,0,0,…,0 * * * *": minute 0, padded with the same minute.
	cronOf := func(n int) string {
		s := "0" + strings.Repeat(",0", 123) + " * * * *" // 255 bytes
		return strings.Repeat("0", n-len(s)) + s
	}
	if len(cronOf(256)) != 256 || len(cronOf(257)) != 257 {
		t.Fatal("cronOf is off")
	}
	e.mustDo(http.StatusCreated, "POST", "/v1/periodic", tn.admin,
		map[string]string{"name": "at-limit", "cron": cronOf(256), "queue": "q", "task": "t"}, nil)

	status, raw := e.do("POST", "/v1/periodic", tn.admin,
		map[string]string{"name": "over", "cron": cronOf(257), "queue": "q", "task": "t"})
	var body api.ErrorBody
	if err := json.Unmarshal(raw, &body); err != nil || status != http.StatusBadRequest ||
		body.Error.Code != api.CodeInvalidArgument || body.Error.Message != "cron: must be at most 256 bytes, got 257" {
		t.Fatalf("POST /v1/periodic with 257 bytes of cron: %d %s", status, raw)
	}
}

// docs/admin-api.md: GET /metrics is root only, since the metrics name every
// namespace.
func TestMetricsAreRootOnly(t *testing.T) {
	e := start(t)
	tn := e.tenant("acme")
	if status, raw := e.do("GET", "/metrics", e.root, nil); status != http.StatusOK || !strings.Contains(string(raw), "flexiq_") {
		t.Fatalf("root: %d %.200s", status, raw)
	}
	for role, token := range map[string]string{"admin": tn.admin, "worker": tn.worker, "producer": tn.producer} {
		status, raw := e.do("GET", "/metrics", token, nil)
		var body api.ErrorBody
		if err := json.Unmarshal(raw, &body); err != nil || status != http.StatusForbidden ||
			body.Error.Code != api.CodePermissionDenied || body.Error.Message != "reading metrics needs the root token" {
			t.Errorf("%s token: %d %s, want 403 PERMISSION_DENIED", role, status, raw)
		}
	}
}
