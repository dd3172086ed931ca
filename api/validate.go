package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"
	"unicode/utf8"
)

// Limits of SPEC §5.
const (
	MaxIDBytes      = 128
	MaxNameBytes    = 128
	MaxPayloadBytes = 1 << 20
	// MaxJobsPerCall bounds one enqueue call: a call is admitted or refused
	// whole and written in one transaction, so it must stay a sane size.
	MaxJobsPerCall = 10000
	// DefaultMaxAttempts applies when neither the job nor its queue sets one.
	DefaultMaxAttempts = 20
	// DefaultLeaseMS is a claim's lease when the request gives none.
	DefaultLeaseMS = 30000
	// MaxClaim bounds the jobs one claim may take.
	MaxClaim = 1000
)

// ValidName reports whether s is a valid queue or task name: 1–128 bytes of
// [A-Za-z0-9._:-].
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > MaxNameBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '.', c == '_', c == ':', c == '-':
		default:
			return false
		}
	}
	return true
}

// CheckName returns INVALID_ARGUMENT naming field when s is not a valid
// queue or task name.
func CheckName(field, s string) error {
	if !ValidName(s) {
		return InvalidArgument("%s: must be 1-%d bytes of [A-Za-z0-9._:-], got %q", field, MaxNameBytes, s)
	}
	return nil
}

// Validate checks one job of a request; field prefixes messages (e.g.
// "jobs[2]"). It does not look at read-only fields.
func (j *Job) Validate(field string) error {
	if len(j.ID) > MaxIDBytes {
		return InvalidArgument("%s.id: must be at most %d bytes, got %d", field, MaxIDBytes, len(j.ID))
	}
	if err := CheckName(field+".queue", j.Queue); err != nil {
		return err
	}
	if err := CheckName(field+".task", j.Task); err != nil {
		return err
	}
	if len(j.Payload) > MaxPayloadBytes {
		return InvalidArgument("%s.payload: must be at most %d bytes, got %d", field, MaxPayloadBytes, len(j.Payload))
	}
	if j.DelayMS < 0 {
		return InvalidArgument("%s.delay_ms: must be >= 0, got %d", field, j.DelayMS)
	}
	if j.RunAt != nil && j.DelayMS != 0 {
		return InvalidArgument("%s: give run_at or delay_ms, not both", field)
	}
	if j.MaxAttempts != nil && *j.MaxAttempts < 1 {
		return InvalidArgument("%s.max_attempts: must be >= 1, got %d", field, *j.MaxAttempts)
	}
	if len(j.UniqueKey) > MaxIDBytes {
		return InvalidArgument("%s.unique_key: must be at most %d bytes, got %d", field, MaxIDBytes, len(j.UniqueKey))
	}
	if d := j.Debounce; d != nil {
		if d.Key == "" || len(d.Key) > MaxIDBytes {
			return InvalidArgument("%s.debounce.key: must be 1-%d bytes, got %d", field, MaxIDBytes, len(d.Key))
		}
		if d.WindowMS < 0 {
			return InvalidArgument("%s.debounce.window_ms: must be >= 0, got %d", field, d.WindowMS)
		}
	}
	return nil
}

// Validate checks an enqueue request: 1..MaxJobsPerCall valid jobs.
func (r *EnqueueRequest) Validate() error {
	if len(r.Jobs) == 0 {
		return InvalidArgument("jobs: must hold at least one job")
	}
	if len(r.Jobs) > MaxJobsPerCall {
		return InvalidArgument("jobs: at most %d jobs per call, got %d", MaxJobsPerCall, len(r.Jobs))
	}
	for i := range r.Jobs {
		if err := r.Jobs[i].Validate(fmt.Sprintf("jobs[%d]", i)); err != nil {
			return err
		}
	}
	return nil
}

// Decode unmarshals a request body into v. A body that is not JSON, or
// whose JSON does not fit v's shape, is INVALID_ARGUMENT / BAD_REQUEST; the
// message names the field that does not fit and what it must be.
func Decode(body []byte, v any) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return BadRequest("request body must be a JSON object")
	}
	if !utf8.Valid(body) {
		// encoding/json would quietly turn the bad bytes into U+FFFD, and a
		// name would be stored as something the caller never sent.
		return BadRequest("request body is not valid JSON: it is not UTF-8")
	}
	err := json.Unmarshal(body, v)
	if err == nil {
		return nil
	}
	var (
		syntax *json.SyntaxError
		typ    *json.UnmarshalTypeError
		tm     *time.ParseError
	)
	switch {
	case errors.As(err, &syntax):
		return BadRequest("request body is not valid JSON: %v", syntax)
	case errors.As(err, &typ) && typ.Field != "":
		return BadRequest("%s: must be %s, got %s", typ.Field, jsonKind(typ.Type), typ.Value)
	case errors.As(err, &typ):
		return BadRequest("request body must be %s, got %s", jsonKind(typ.Type), typ.Value)
	case errors.As(err, &tm):
		return BadRequest("a time must be RFC 3339, such as 2026-01-02T15:04:05Z, got %q", tm.Value)
	}
	return BadRequest("request body is not valid JSON for this call: %v", err)
}

// jsonKind says what JSON a Go type takes, for a refusal.
func jsonKind(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Map, reflect.Struct:
		return "an object"
	}
	return "a JSON " + t.String()
}

// Validate checks a replay request: 1..MaxJobsPerCall distinct, non-empty
// ids.
func (r *ReplayRequest) Validate() error {
	if len(r.IDs) == 0 {
		return InvalidArgument("ids: must name at least one dead letter")
	}
	if len(r.IDs) > MaxJobsPerCall {
		return InvalidArgument("ids: at most %d per call, got %d", MaxJobsPerCall, len(r.IDs))
	}
	seen := make(map[string]bool, len(r.IDs))
	for _, id := range r.IDs {
		if id == "" {
			return InvalidArgument("ids: must not hold an empty id")
		}
		if seen[id] {
			return InvalidArgument("ids: %q given twice", id)
		}
		seen[id] = true
	}
	return nil
}
