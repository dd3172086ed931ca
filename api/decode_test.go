package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
	"unicode/utf8"
)

// Decode takes a body with a fast decoder and words a refusal with
// encoding/json's: it must accept exactly what encoding/json accepts, into
// the same value, so that the protocol's answers do not depend on which
// decoder read the body.
func decodeAgrees(t *testing.T, body string) {
	t.Helper()
	if !utf8.ValidString(body) || len(body) == 0 {
		return // refused before either decoder (Decode's own checks)
	}
	for _, mk := range []func() any{
		func() any { return &EnqueueRequest{} }, func() any { return &ClaimRequest{} },
		func() any { return &HeartbeatRequest{} }, func() any { return &AckRequest{} },
	} {
		want, got := mk(), mk()
		werr := json.Unmarshal([]byte(body), want)
		gerr := Decode([]byte(body), got)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("%T %q: encoding/json says %v, Decode %v", want, body, werr, gerr)
		}
		if werr == nil && !reflect.DeepEqual(want, got) {
			t.Fatalf("%T %q: decoded\n%+v\nwant\n%+v", want, body, got, want)
		}
	}
}

func TestDecodeAgreesWithEncodingJSON(t *testing.T) {
	cases := []string{
		`{"jobs":[{"queue":"q","task":"t","priority":1e2}]}`,
		`{"jobs":[{"queue":"q","task":"t","priority":1.0}]}`,
		`{"jobs":[{"queue":"q","task":"t","priority":"1"}]}`,
		`{"jobs":[{"queue":"q","task":"t","priority":9223372036854775808}]}`,
		`{"jobs":[{"queue":"q","task":"t","priority":-0}]}`,
		`{"jobs":[{"QUEUE":"q","Task":"t"}]}`,
		`{"jobs":[{"queue":"q","queue":"r","task":"t"}]}`,
		`{"jobs":[{"queue":null,"task":"t"}]}`,
		`{"jobs":null}`,
		`{"jobs":[{"queue":"q","task":"t","payload":{"a":[1,2,{"b":null}]}}]}`,
		`{"jobs":[{"queue":"q","task":"t","payload":{"a":}}]}`,
		`{"jobs":[{"queue":"q","task":"t","payload":nul}]}`,
		`{"jobs":[{"queue":"q","task":"t","run_at":"2026-01-02T15:04:05Z"}]}`,
		`{"jobs":[{"queue":"q","task":"t","run_at":"2026-01-02 15:04:05"}]}`,
		`{"jobs":[{"queue":"q","task":"t","run_at":"10000-01-02T15:04:05Z"}]}`,
		`{"jobs":[{"queue":"q","task":"t","max_attempts":3,"debounce":{"key":"k","window_ms":5}}]}`,
		`{"jobs":[{"queue":"q","task":"t"}]} x`,
		`{"jobs":[{"queue":"q","task":"t"}]}{}`,
		`{"jobs":[{"queue":"q\u0000","task":"t\ud800"}]}`,
		`{"jobs":[{"queue":"q","task":"t","unknown":{"x":[1,2]}}]}`,
		`[]`,
		`"x"`,
		`{"jobs":[1]}`,
		`{"jobs":{}}`,
		`{"jobs":[{"queue":"q","task":"t","priority":01}]}`,
		`{"jobs":[{"queue":"q","task":"t","priority":+1}]}`,
		`{"jobs":[{"queue":"q","task":"t","priority":1,}]}`,
		`{"jobs":[{"queue":"q","task":"t"},]}`,
		`{'jobs':[]}`,
		`{"jobs":[{"queue":"q","task":"t","payload":"\x"}]}`,
		`{"jobs":[{"queue":"q","task":"t","payload":"\u12"}]}`,
		`{"jobs":[{"queue":"q","task":"t","payload":1e400}]}`,
		`{"jobs":[{"queue":"q","task":"t","delay_ms":1e3}]}`,
		`{"jobs":[{"queue":"q","task":"t","id":123}]}`,
		`{"jobs":[{"queue":"q","task":"t","status":"pending"}]}`,
		` {"jobs":[]} `,
		`{"jobs":[{"queue":"q","task":"t","payload":[1,2,3]  }]}`,
		`{"queues":["a"],"max":1.5,"wait_ms":0}`,
		`{"queues":"a","max":1}`,
		`{"ids":["a",null],"lease_ms":10}`,
	}
	for _, c := range cases {
		decodeAgrees(t, c)
	}
}

// FuzzDecodeAgreesWithEncodingJSON: go test -fuzz FuzzDecodeAgreesWithEncodingJSON ./api
// (2026-12-02: 45 s of Decode, after 90 s and 1.6 million bodies of
// go-json itself against encoding/json; no difference either time).
func FuzzDecodeAgreesWithEncodingJSON(f *testing.F) {
	f.Add(`{"jobs":[{"queue":"q","task":"t","priority":1,"payload":{"a":[1,"x",null,true]},"run_at":"2026-01-02T15:04:05Z","debounce":{"key":"k","window_ms":5},"max_attempts":3,"unique_key":"u","id":"i"}]}`)
	f.Add(`{"queues":["a"],"max":1,"wait_ms":0,"lease_ms":30000,"worker":"w"}`)
	f.Add(`{"acks":[{"id":"a","attempt":1,"result":{"ok":true}}]}`)
	f.Fuzz(func(t *testing.T, body string) { decodeAgrees(t, body) })
}

// MarshalFast (the Go client's request encoder) must give exactly the
// bytes encoding/json gives, or fail where it fails, so a client's call
// does not depend on which encoder wrote it.
func marshalAgrees(t *testing.T, v any) {
	t.Helper()
	want, werr := json.Marshal(v)
	got, gerr := MarshalFast(v)
	if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
		t.Fatalf("%T: encoding/json says %v, MarshalFast %v", v, werr, gerr)
	}
	if string(want) != string(got) {
		t.Fatalf("%T: MarshalFast wrote\n%s\nencoding/json\n%s", v, got, want)
	}
	// Marshal, without HTML escaping, against encoding/json's Encoder
	// told the same.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	werr = enc.Encode(v)
	got, gerr = Marshal(v)
	if (werr == nil) != (gerr == nil) || (werr != nil && werr.Error() != gerr.Error()) {
		t.Fatalf("%T: encoding/json says %v, Marshal %v", v, werr, gerr)
	}
	if want := bytes.TrimRight(b.Bytes(), "\n"); werr == nil && string(want) != string(got) {
		t.Fatalf("%T: Marshal wrote\n%s\nencoding/json\n%s", v, got, want)
	}
}

// requestsOf are every request a client sends, built from the fuzzer's
// text: in names, as raw JSON (payloads, results), and in a number.
func requestsOf(s string, raw []byte, n int64) []any {
	when := time.Unix(n%(1<<40), n%1e9).UTC()
	three := n % 7
	retry := n%2 == 0
	job := Job{ID: s, Queue: s, Task: s, Payload: raw, Priority: n, RunAt: &when, DelayMS: n, MaxAttempts: &three,
		UniqueKey: s, Debounce: &Debounce{Key: s, WindowMS: n}}
	return []any{
		EnqueueRequest{Jobs: []Job{job, {Queue: s, Task: s}}},
		EventRequest{Name: s, Payload: raw},
		ReplayRequest{IDs: []string{s, s}},
		ClaimRequest{Queues: []string{s}, Max: int(n % 1000), WaitMS: n, LeaseMS: n, Worker: s},
		HeartbeatRequest{IDs: []string{s}, LeaseMS: n},
		AckRequest{ID: s, Attempt: n, Result: raw},
		AckRequest{Acks: []AckItem{{ID: s, Attempt: n, Result: raw}, {ID: s}}},
		NackRequest{ID: s, Attempt: n, Error: s, Retry: &retry},
		NackRequest{ID: s, Attempt: n, Release: true},
	}
}

// repliesOf are every reply the node sends, built as requestsOf builds
// requests: a job as a claim hands it out, with every field set.
func repliesOf(s string, raw []byte, n int64) []any {
	when := time.Unix(n%(1<<40), n%1e9).UTC()
	three := n % 7
	job := Job{ID: s, Queue: s, Task: s, Payload: raw, Priority: n, RunAt: &when, MaxAttempts: &three, UniqueKey: s,
		Debounce: &Debounce{Key: s, WindowMS: n}, Status: StatusRunning, Attempt: n, Error: s, DeadMeta: raw,
		CreatedAt: &when, FinishedAt: &when, Result: raw, LeaseUntil: &when}
	e := &Error{Code: CodeResourceExhausted, Reason: Reason(s), Message: s}
	return []any{
		ClaimReply{Jobs: []Job{job, {ID: s}}},
		ClaimReply{Jobs: []Job{}},
		EnqueueReply{Results: []EnqueueResult{{ID: s, Outcome: OutcomeEnqueued}, {ID: s, Outcome: Outcome(s)}}},
		HeartbeatReply{Extended: []string{s}},
		AckReply{Results: []AckResult{{ID: s}, {ID: s, Error: e}}},
		AckReply{},
		NackReply{Status: StatusPending, RunAt: &when},
		ErrorBody{Error: e},
	}
}

func TestMarshalFastAgreesWithEncodingJSON(t *testing.T) {
	texts := []string{"", "plain", "<a href='x'>&amp;</a>", "\u2028\u2029", "\x00\x1f\x7f", "\xff\xfe bad utf-8", "é中😀", `"quoted\"\\`, "\t\n\r"}
	raws := []string{``, `null`, `{"a":1}`, ` { "a" : [ 1 , 2 ] , "b" : "<x>" } `, `1e400`, `-0.0`, `"\u00e9"`, `{"a":1,}`, `[`, `nul`, "\"\xff\"", `{"a":"\u2028"}`}
	for _, s := range texts {
		for _, r := range raws {
			for _, n := range []int64{0, 1, -1, 1 << 53, -(1 << 62)} {
				for _, v := range append(requestsOf(s, []byte(r), n), repliesOf(s, []byte(r), n)...) {
					marshalAgrees(t, v)
				}
			}
		}
	}
}

// go test -run '^$' -fuzz FuzzMarshalFastAgreesWithEncodingJSON ./api
func FuzzMarshalFastAgreesWithEncodingJSON(f *testing.F) {
	f.Add("q", []byte(`{"a":[1,"x",null,true]}`), int64(3))
	f.Add("<&>", []byte(` [ 1 , 2 ] `), int64(-1))
	f.Add("\xff", []byte(`{"a":`), int64(1<<40))
	f.Fuzz(func(t *testing.T, s string, raw []byte, n int64) {
		for _, v := range append(requestsOf(s, raw, n), repliesOf(s, raw, n)...) {
			marshalAgrees(t, v)
		}
	})
}
