package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	gojson "github.com/goccy/go-json"
)

// Limits of docs/protocol.md ("Limits").
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
	// MaxCronBytes bounds a periodic job's schedule.
	MaxCronBytes = 256
)

// Time bounds of docs/protocol.md (variables only because a time.Time cannot be a
// constant): the time a job runs at must lie within them. RFC 3339, and
// encoding/json, which writes times with it, have four-digit years, so a
// later time could not be read back as sent; the Unix epoch is as far
// back as a job need be scheduled.
var (
	MinTime = time.Date(1970, 1, 1, 0, 0, 0, 0, time.UTC)
	MaxTime = time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
)

// timeBounds is how a refusal states the bounds.
var timeBounds = MinTime.Format(time.RFC3339) + " and " + MaxTime.Format(time.RFC3339)

// TimeOutOfRange is the refusal of a time outside [MinTime, MaxTime]; got
// is the time as the caller sent it.
func TimeOutOfRange(field, got string) *Error {
	return InvalidArgument("%s: must be between %s, got %s", field, timeBounds, got)
}

// inTimeRange reports whether t lies within [MinTime, MaxTime].
func inTimeRange(t time.Time) bool { return !t.Before(MinTime) && !t.After(MaxTime) }

// AddMillis is t plus ms milliseconds, exact for any ms: t.Add takes a
// time.Duration, which holds only ±292 years of nanoseconds, and
// ms*time.Millisecond overflows silently beyond that.
func AddMillis(t time.Time, ms int64) time.Time {
	// |ms/1000| < 9.3e15 s: for any t of the years 0-9999 (|Unix| <
	// 2.6e11 s) neither sum comes near overflowing int64.
	return time.Unix(t.Unix()+ms/1000, int64(t.Nanosecond())+(ms%1000)*int64(time.Millisecond)).In(t.Location())
}

// ResolveRunAt is when the job should run, seen at now: its run_at, else
// now + delay_ms, else now + its debounce window, else now. A run_at, or a
// delay or window that puts the time, outside [MinTime, MaxTime] is
// INVALID_ARGUMENT naming the field of the call's i-th job (from 0), e.g.
// "jobs[2].delay_ms". It is the one place those times are checked:
// delay_ms and window_ms need the clock, which only the namespace actor
// holds. The field's name is built only for a refusal: the actor resolves
// every job of every call, and formatting it each time was a tenth of its
// time outside the store in a batched enqueue.
func (j *Job) ResolveRunAt(i int, now time.Time) (time.Time, error) {
	field := func() string { return "jobs[" + strconv.Itoa(i) + "]" }
	// Every time the job gives is checked, including a debounce window that
	// its own run_at or delay overrides: such a window is a mistake too.
	if j.RunAt != nil && !inTimeRange(*j.RunAt) {
		return time.Time{}, TimeOutOfRange(field()+".run_at", j.RunAt.Format(time.RFC3339Nano))
	}
	if j.DelayMS != 0 && !inTimeRange(AddMillis(now, j.DelayMS)) {
		return time.Time{}, InvalidArgument("%s.delay_ms: must put run_at between %s, got %d", field(), timeBounds, j.DelayMS)
	}
	if d := j.Debounce; d != nil && !inTimeRange(AddMillis(now, d.WindowMS)) {
		return time.Time{}, InvalidArgument("%s.debounce.window_ms: must put run_at between %s, got %d", field(), timeBounds, d.WindowMS)
	}
	switch {
	case j.RunAt != nil:
		return j.RunAt.UTC(), nil
	case j.DelayMS > 0:
		return AddMillis(now, j.DelayMS), nil
	case j.Debounce != nil:
		return AddMillis(now, j.Debounce.WindowMS), nil
	}
	return now, nil
}

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

// Unmarshal is json.Unmarshal, faster: github.com/goccy/go-json decodes
// data into v (a pointer) when it takes it, and a body it refuses is
// decoded again by encoding/json into a fresh value, so v and the error
// are encoding/json's (TestDecodeAgreesWithEncodingJSON and the fuzz
// target check the two accept the same bodies into the same values).
func Unmarshal(data []byte, v any) error {
	if gojson.Unmarshal(data, v) == nil {
		return nil
	}
	fresh := reflect.New(reflect.TypeOf(v).Elem())
	if err := json.Unmarshal(data, fresh.Interface()); err != nil {
		return err
	}
	// Accepted by encoding/json alone: its value, not the fast decoder's
	// partial one.
	reflect.ValueOf(v).Elem().Set(fresh.Elem())
	return nil
}

// MarshalFast is json.Marshal (HTML escaped, as encoding/json does),
// faster: github.com/goccy/go-json encodes v, and when it refuses,
// encoding/json encodes it again, so the error is encoding/json's
// (TestMarshalFastAgreesWithEncodingJSON checks the bytes are the same).
func MarshalFast(v any) ([]byte, error) {
	if data, err := gojson.Marshal(v); err == nil {
		return data, nil
	}
	return json.Marshal(v)
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
	// The fast decoder takes the body when it is good (most of a batch's
	// decoding time); a body it refuses is decoded again by encoding/json,
	// whose error is the one the protocol words.
	err := Unmarshal(body, v)
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
	case errors.As(err, &tm) && yearOutOfRange(tm.Value):
		// RFC 3339 but for a year time.Time cannot parse (10000, -1): a
		// time out of range, refused like one that parses (ResolveRunAt).
		if field := fieldOf(body, v, tm.Value); field != "" {
			return TimeOutOfRange(field, tm.Value)
		}
		return BadRequest("a time must be between %s, got %q", timeBounds, tm.Value)
	case errors.As(err, &tm):
		return BadRequest("a time must be RFC 3339, such as 2026-01-02T15:04:05Z, got %q", tm.Value)
	}
	return BadRequest("request body is not valid JSON for this call: %v", err)
}

// yearOutOfRange reports whether s is an RFC 3339 time but for its year,
// which time.Parse takes only as four digits: a negative year, or one of
// five digits or more, outside [MinTime, MaxTime].
func yearOutOfRange(s string) bool {
	i := 0
	if strings.HasPrefix(s, "-") || strings.HasPrefix(s, "+") {
		i = 1
	}
	j := i
	for j < len(s) && s[j] >= '0' && s[j] <= '9' {
		j++
	}
	if j-i < 4 {
		return false
	}
	if _, err := time.Parse(time.RFC3339Nano, "2000"+s[j:]); err != nil {
		return false
	}
	if s[0] == '-' || j-i > 18 {
		return true // negative, or far more than int64 years
	}
	year, err := strconv.ParseInt(s[i:j], 10, 64)
	return err == nil && (year < int64(MinTime.Year()) || year > int64(MaxTime.Year()))
}

// fieldOf returns the path, such as jobs[0].run_at, of the first time
// field of v (a pointer to the type body was decoded into) whose value in
// the JSON text body is the string tv; "" if there is none. It serves
// refusals only, off the hot path: encoding/json does not say which field
// an UnmarshalJSON error came from. The walk follows v's type, so the same
// text inside a payload is not taken for the field.
func fieldOf(body []byte, v any, tv string) string {
	type frame struct {
		typ     reflect.Type // the container's Go type; nil: not followed
		object  bool
		key     string // object: the current member's name
		wantKey bool   // object: the next string is a name
		index   int    // array: the current element
	}
	var stack []*frame
	// child is the Go type of the value about to be read.
	child := func() reflect.Type {
		if len(stack) == 0 {
			return deref(reflect.TypeOf(v))
		}
		f := stack[len(stack)-1]
		switch {
		case f.typ == nil:
			return nil
		case f.object && f.typ.Kind() == reflect.Struct:
			return deref(jsonField(f.typ, f.key))
		case f.object && f.typ.Kind() == reflect.Map, !f.object && (f.typ.Kind() == reflect.Slice || f.typ.Kind() == reflect.Array):
			return deref(f.typ.Elem())
		}
		return nil
	}
	next := func() { // the current value has been read
		if len(stack) == 0 {
			return
		}
		if f := stack[len(stack)-1]; f.object {
			f.wantKey = true
		} else {
			f.index++
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	for {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		switch t := tok.(type) {
		case json.Delim:
			if t == '{' || t == '[' {
				stack = append(stack, &frame{typ: child(), object: t == '{', wantKey: t == '{'})
				continue
			}
			stack = stack[:len(stack)-1]
			next()
		case string:
			if f := len(stack) - 1; f >= 0 && stack[f].object && stack[f].wantKey {
				stack[f].key, stack[f].wantKey = t, false
				continue
			}
			if t == tv && child() == reflect.TypeFor[time.Time]() {
				var b strings.Builder
				for _, f := range stack {
					if f.object {
						if b.Len() > 0 {
							b.WriteByte('.')
						}
						b.WriteString(f.key)
					} else {
						fmt.Fprintf(&b, "[%d]", f.index)
					}
				}
				return b.String()
			}
			next()
		default:
			next()
		}
	}
}

func deref(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

// jsonField is the type of struct t's field that encoding/json fills from
// the member name (exact match first, then case-insensitive, as
// encoding/json does); nil if none.
func jsonField(t reflect.Type, name string) reflect.Type {
	var fold reflect.Type
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		if f.Anonymous && tag == "" {
			if et := deref(f.Type); et.Kind() == reflect.Struct {
				if ft := jsonField(et, name); ft != nil {
					return ft
				}
			}
			continue
		}
		if tag == "" {
			tag = f.Name
		}
		if tag == name {
			return f.Type
		}
		if fold == nil && strings.EqualFold(tag, name) {
			fold = f.Type
		}
	}
	return fold
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
