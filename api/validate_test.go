package api

import (
	"errors"
	"testing"
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
