package api

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

// A body that does not fit its call is refused naming the field and what
// it must be; one that is not JSON (or not UTF-8) is refused as such.
func TestDecodeRefusalsNameTheField(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{`{"jobs":[{"queue":"q","task":"t","priority":"x"}]}`, `jobs.priority: must be an integer, got string`},
		{`{"jobs":[{"queue":"q","task":"t","priority":1.5}]}`, `jobs.priority: must be an integer, got number 1.5`},
		{`{"jobs":"x"}`, `jobs: must be an array, got string`},
		{`{"jobs":[{"queue":5}]}`, `jobs.queue: must be a string, got number`},
		{`[1]`, `request body must be an object, got array`},
		{`{"jobs":[{"queue":"q","task":"t","run_at":"tomorrow"}]}`, `a time must be RFC 3339, such as 2026-01-02T15:04:05Z, got "tomorrow"`},
		{`{"jobs":[`, `request body is not valid JSON: unexpected end of JSON input`},
		{"{\"jobs\":[{\"queue\":\"\xff\xfe\",\"task\":\"t\"}]}", `request body is not valid JSON: it is not UTF-8`},
		{` `, `request body must be a JSON object`},
	} {
		var req EnqueueRequest
		err := Decode([]byte(tc.body), &req)
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeInvalidArgument || e.Reason != ReasonBadRequest || e.Message != tc.want {
			t.Errorf("Decode(%q) = %#v, want INVALID_ARGUMENT/BAD_REQUEST %q", tc.body, err, tc.want)
		}
	}
	var req EnqueueRequest
	if err := Decode([]byte(`{"jobs":[{"queue":"q","task":"t","priority":3}]}`), &req); err != nil || req.Jobs[0].Priority != 3 {
		t.Fatalf("a body that fits: %v %+v", err, req)
	}
}

// A time RFC 3339 can write but time.Time cannot parse (a year past 9999
// or before 0) is refused as out of range, naming the field by its place in
// the request, not taken for one in a payload that holds the same text.
func TestDecodeTimeOutOfRangeNamesTheField(t *testing.T) {
	for _, tc := range []struct {
		body, want string
	}{
		{`{"jobs":[{"queue":"q","task":"t","payload":{"run_at":"10000-01-01T00:00:00Z"}},{"queue":"q","task":"t","run_at":"10000-01-01T00:00:00Z"}]}`,
			`jobs[1].run_at: must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z, got 10000-01-01T00:00:00Z`},
		{`{"jobs":[{"queue":"q","task":"t","run_at":"-0001-12-31T23:59:59.5+01:00"}]}`,
			`jobs[0].run_at: must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z, got -0001-12-31T23:59:59.5+01:00`},
		{`{"jobs":[{"queue":"q","task":"t","RUN_AT":"123456789-01-01T00:00:00Z"}]}`,
			`jobs[0].RUN_AT: must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z, got 123456789-01-01T00:00:00Z`},
	} {
		var req EnqueueRequest
		err := Decode([]byte(tc.body), &req)
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeInvalidArgument || e.Reason != "" || e.Message != tc.want {
			t.Errorf("Decode(%s) = %#v, want INVALID_ARGUMENT %q", tc.body, err, tc.want)
		}
	}
	// Not RFC 3339 even with a four-digit year: still a malformed time.
	var req EnqueueRequest
	err := Decode([]byte(`{"jobs":[{"queue":"q","task":"t","run_at":"+2026-01-01T00:00:00Z"}]}`), &req)
	if e, ok := AsError(err); !ok || e.Reason != ReasonBadRequest {
		t.Errorf("+2026: %#v, want BAD_REQUEST", err)
	}
}

func TestResolveRunAtBoundsAndPrecedence(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	ts := func(s string) *time.Time {
		v, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			t.Fatal(err)
		}
		return &v
	}
	// Milliseconds from now to MaxTime: the longest delay or window taken.
	maxMS := MaxTime.UnixMilli() - now.UnixMilli()
	bounds := "must be between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z"
	for _, tc := range []struct {
		name    string
		job     Job
		want    time.Time
		wantErr string
	}{
		{name: "nothing: now", want: now},
		{name: "run_at at the lower bound", job: Job{RunAt: ts("1970-01-01T00:00:00Z")}, want: MinTime},
		{name: "run_at at the upper bound", job: Job{RunAt: ts("9999-12-31T23:59:59Z")}, want: MaxTime},
		{name: "run_at keeps its microseconds", job: Job{RunAt: ts("2300-06-01T14:34:56.123456+02:00")}, want: *ts("2300-06-01T12:34:56.123456Z")},
		{name: "run_at year 1", job: Job{RunAt: ts("0001-01-01T00:00:00Z")}, wantErr: "jobs[3].run_at: " + bounds + ", got 0001-01-01T00:00:00Z"},
		{name: "run_at a nanosecond before 1970", job: Job{RunAt: ts("1969-12-31T23:59:59.999999999Z")}, wantErr: "jobs[3].run_at: " + bounds + ", got 1969-12-31T23:59:59.999999999Z"},
		{name: "run_at past the bound", job: Job{RunAt: ts("9999-12-31T23:59:59.000001Z")}, wantErr: "jobs[3].run_at: " + bounds + ", got 9999-12-31T23:59:59.000001Z"},
		// 9999-12-31T23:59:59-01:00 is 10000-01-01T00:59:59Z: the bound is
		// on the instant, which could not be written back.
		{name: "run_at past the bound by its offset", job: Job{RunAt: ts("9999-12-31T23:59:59-01:00")}, wantErr: "jobs[3].run_at: " + bounds + ", got 9999-12-31T23:59:59-01:00"},
		{name: "delay to the bound", job: Job{DelayMS: maxMS}, want: MaxTime},
		{name: "delay of 7000 × 365 days", job: Job{DelayMS: 7000 * 365 * 86_400_000}, want: now.AddDate(0, 0, 7000*365)},
		{name: "delay past the bound", job: Job{DelayMS: maxMS + 1}, wantErr: fmt.Sprintf("jobs[3].delay_ms: must put run_at between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z, got %d", maxMS+1)},
		{name: "delay of MaxInt64 does not overflow", job: Job{DelayMS: math.MaxInt64}, wantErr: "jobs[3].delay_ms: must put run_at between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z, got 9223372036854775807"},
		{name: "window to the bound", job: Job{Debounce: &Debounce{Key: "k", WindowMS: maxMS}}, want: MaxTime},
		{name: "window of MaxInt64", job: Job{Debounce: &Debounce{Key: "k", WindowMS: math.MaxInt64}}, wantErr: "jobs[3].debounce.window_ms: must put run_at between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z, got 9223372036854775807"},
		{name: "run_at before delay before window", job: Job{RunAt: ts("2030-01-01T00:00:00Z"), Debounce: &Debounce{Key: "k", WindowMS: 5}}, want: *ts("2030-01-01T00:00:00Z")},
		{name: "delay before window", job: Job{DelayMS: 7, Debounce: &Debounce{Key: "k", WindowMS: 5}}, want: now.Add(7 * time.Millisecond)},
		{name: "window", job: Job{Debounce: &Debounce{Key: "k", WindowMS: 5}}, want: now.Add(5 * time.Millisecond)},
		{name: "an overridden window is still checked", job: Job{DelayMS: 7, Debounce: &Debounce{Key: "k", WindowMS: maxMS + 1}}, wantErr: fmt.Sprintf("jobs[3].debounce.window_ms: must put run_at between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59Z, got %d", maxMS+1)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.job.ResolveRunAt(3, now)
			if tc.wantErr != "" {
				e, ok := AsError(err)
				if !ok || e.Code != CodeInvalidArgument || e.Message != tc.wantErr {
					t.Fatalf("ResolveRunAt = %v, %#v; want INVALID_ARGUMENT %q", got, err, tc.wantErr)
				}
				return
			}
			if err != nil || !got.Equal(tc.want) || got.Location() != time.UTC {
				t.Fatalf("ResolveRunAt = %v, %v; want %v (UTC)", got, err, tc.want)
			}
		})
	}
}

// AddMillis is exact where time.Time.Add with a Duration would overflow.
func TestAddMillis(t *testing.T) {
	base := time.Date(2026, 3, 1, 12, 0, 0, 999_999_999, time.UTC)
	for _, ms := range []int64{0, 1, -1, 999, -999, 1001, -1001, 10_000 * 365 * 86_400_000} {
		got := AddMillis(base, ms)
		want := base.Add(time.Duration(ms%86_400_000)*time.Millisecond).AddDate(0, 0, int(ms/86_400_000))
		if !got.Equal(want) {
			t.Errorf("AddMillis(%d) = %v, want %v", ms, got, want)
		}
	}
}

// A release gives back a job never started: it carries no error and cannot
// send the job to the dead letters; the refusal names the field.
func TestNackReleaseTakesNoErrorNorRetryFalse(t *testing.T) {
	no := false
	for _, tc := range []struct {
		req   NackRequest
		field string
	}{
		{NackRequest{ID: "j", Release: true, Error: "boom"}, "error:"},
		{NackRequest{ID: "j", Release: true, Retry: &no}, "retry:"},
		{NackRequest{Release: true}, "id:"},
	} {
		err := tc.req.Validate()
		if err == nil || !strings.HasPrefix(err.Error(), tc.field) {
			t.Errorf("%+v: %v, want a refusal naming %s", tc.req, err, tc.field)
		}
	}
	yes := true
	if err := (&NackRequest{ID: "j", Release: true, Retry: &yes}).Validate(); err != nil {
		t.Errorf("release with retry true: %v", err)
	}
}
