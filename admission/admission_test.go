package admission

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/quota"
)

// t0 is an arbitrary instant; time only moves through arguments.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func doc(t *testing.T, js string) quota.Document {
	t.Helper()
	d, err := quota.Decode([]byte(js))
	if err != nil {
		t.Fatalf("quota.Decode(%s): %v", js, err)
	}
	return d
}

func rate(t *testing.T, s string) quota.Rate {
	t.Helper()
	r, err := quota.ParseRate(s)
	if err != nil {
		t.Fatalf("quota.ParseRate(%q): %v", s, err)
	}
	return r
}

// wantDecision fails t unless got has verdict v and, for a refusal, an error
// with the code, reason and exact message given.
func wantDecision(t *testing.T, what string, got Decision, v Verdict, reason api.Reason, msg string) {
	t.Helper()
	if got.Verdict != v {
		t.Fatalf("%s: verdict %v (err %v), want %v", what, got.Verdict, got.Err, v)
	}
	if v == Admit {
		if got.Err != nil {
			t.Fatalf("%s: admitted with error %v, want no error", what, got.Err)
		}
		return
	}
	if got.Err == nil {
		t.Fatalf("%s: verdict %v with no error, want %s %q", what, v, reason, msg)
	}
	if got.Err.Code != api.CodeResourceExhausted || got.Err.Reason != reason || got.Err.Message != msg {
		t.Fatalf("%s: error %s/%s %q, want RESOURCE_EXHAUSTED/%s %q", what, got.Err.Code, got.Err.Reason, got.Err.Message, reason, msg)
	}
}

func TestDecide(t *testing.T) {
	tests := []struct {
		name   string
		doc    string
		call   Call
		want   Verdict
		reason api.Reason
		msg    string
	}{
		{"no quota admits anything", `{}`, Call{Namespace: "acme", Queue: "q", N: 1 << 40, Pending: 1 << 40}, Admit, "", ""},
		{"on_excess alone limits nothing", `{"on_excess":"drop"}`, Call{Namespace: "acme", Queue: "q", N: 1000, Pending: 1e9}, Admit, "", ""},
		{"limits enforced elsewhere do not refuse", `{"max_running":0,"max_archived_rows":0,"max_dead_rows":0}`, Call{Namespace: "acme", Queue: "q", N: 5}, Admit, "", ""},

		{"below max_pending", `{"max_pending":10}`, Call{Namespace: "acme", Queue: "emails", N: 1, Pending: 5}, Admit, "", ""},
		{"pending+n == max_pending is admitted", `{"max_pending":10}`, Call{Namespace: "acme", Queue: "emails", N: 1, Pending: 9}, Admit, "", ""},
		{"batch filling to the cap is admitted", `{"max_pending":10}`, Call{Namespace: "acme", Queue: "emails", N: 10, Pending: 0}, Admit, "", ""},
		{"at the cap is refused", `{"max_pending":10}`, Call{Namespace: "acme", Queue: "emails", N: 1, Pending: 10},
			Reject, api.ReasonQueueFull, "queue 'emails' is full: 10 pending >= max_pending 10"},
		{"over the cap (overshoot) is refused", `{"max_pending":10}`, Call{Namespace: "acme", Queue: "emails", N: 1, Pending: 12},
			Reject, api.ReasonQueueFull, "queue 'emails' is full: 12 pending >= max_pending 10"},
		{"batch over the cap shows pending before the call", `{"max_pending":10}`, Call{Namespace: "acme", Queue: "reports", N: 6, Pending: 5},
			Reject, api.ReasonQueueFull, "queue 'reports' is full: 5 pending >= max_pending 10"},
		{"batch larger than the cap is refused whole", `{"max_pending":10}`, Call{Namespace: "acme", Queue: "q", N: 11, Pending: 0},
			Reject, api.ReasonQueueFull, "queue 'q' is full: 0 pending >= max_pending 10"},
		{"zero max_pending refuses one job", `{"max_pending":0}`, Call{Namespace: "acme", Queue: "q", N: 1, Pending: 0},
			Reject, api.ReasonQueueFull, "queue 'q' is full: 0 pending >= max_pending 0"},
		{"zero max_pending refuses a batch", `{"max_pending":0}`, Call{Namespace: "acme", Queue: "q", N: 100, Pending: 0},
			Reject, api.ReasonQueueFull, "queue 'q' is full: 0 pending >= max_pending 0"},

		{"rate: full bucket admits count", `{"enqueue_rate":"5/s"}`, Call{Namespace: "acme", Queue: "q", N: 5}, Admit, "", ""},
		{"rate: more than the bucket holds is refused", `{"enqueue_rate":"5/s"}`, Call{Namespace: "acme", Queue: "q", N: 6},
			Reject, api.ReasonRateLimited, "rate limit exceeded for: namespace 'acme' enqueue_rate 5/s"},
		{"rate as written in the message", `{"enqueue_rate":"500/s"}`, Call{Namespace: "team-x", Queue: "q", N: 501},
			Reject, api.ReasonRateLimited, "rate limit exceeded for: namespace 'team-x' enqueue_rate 500/s"},
		{"rate text kept verbatim", `{"enqueue_rate":"0003/h"}`, Call{Namespace: "acme", Queue: "q", N: 4},
			Reject, api.ReasonRateLimited, "rate limit exceeded for: namespace 'acme' enqueue_rate 0003/h"},

		{"depth is checked first", `{"max_pending":1,"enqueue_rate":"1/s"}`, Call{Namespace: "acme", Queue: "q", N: 2, Pending: 0},
			Reject, api.ReasonQueueFull, "queue 'q' is full: 0 pending >= max_pending 1"},
		{"depth fits, rate refuses", `{"max_pending":100,"enqueue_rate":"1/s"}`, Call{Namespace: "acme", Queue: "q", N: 2, Pending: 0},
			Reject, api.ReasonRateLimited, "rate limit exceeded for: namespace 'acme' enqueue_rate 1/s"},
		{"depth and rate both fit", `{"max_pending":100,"enqueue_rate":"2/s"}`, Call{Namespace: "acme", Queue: "q", N: 2, Pending: 98}, Admit, "", ""},

		{"explicit reject", `{"max_pending":0,"on_excess":"reject"}`, Call{Namespace: "acme", Queue: "q", N: 1},
			Reject, api.ReasonQueueFull, "queue 'q' is full: 0 pending >= max_pending 0"},
		{"drop sheds a depth refusal", `{"max_pending":3,"on_excess":"drop"}`, Call{Namespace: "acme", Queue: "q", N: 1, Pending: 3},
			Shed, api.ReasonQueueFull, "queue 'q' is full: 3 pending >= max_pending 3"},
		{"drop sheds a rate refusal", `{"enqueue_rate":"2/m","on_excess":"drop"}`, Call{Namespace: "acme", Queue: "q", N: 3},
			Shed, api.ReasonRateLimited, "rate limit exceeded for: namespace 'acme' enqueue_rate 2/m"},
		{"drop admits what fits", `{"max_pending":3,"enqueue_rate":"2/m","on_excess":"drop"}`, Call{Namespace: "acme", Queue: "q", N: 2, Pending: 1}, Admit, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var b Bucket
			got := Decide(doc(t, tc.doc), &b, tc.call, t0)
			wantDecision(t, "Decide", got, tc.want, tc.reason, tc.msg)
		})
	}
}

func TestDropAndRejectShareTheError(t *testing.T) {
	for _, limits := range []string{`"max_pending":2`, `"enqueue_rate":"2/s"`, `"max_pending":1,"enqueue_rate":"1/h"`} {
		call := Call{Namespace: "acme", Queue: "q", N: 3, Pending: 2}
		var br, bd Bucket
		rej := Decide(doc(t, `{`+limits+`}`), &br, call, t0)
		shed := Decide(doc(t, `{`+limits+`,"on_excess":"drop"}`), &bd, call, t0)
		if rej.Verdict != Reject || shed.Verdict != Shed {
			t.Fatalf("%s: verdicts %v (reject mode) and %v (drop mode), want reject and shed", limits, rej.Verdict, shed.Verdict)
		}
		if rej.Err == nil || shed.Err == nil || *rej.Err != *shed.Err {
			t.Fatalf("%s: reject error %+v, shed error %+v; want the same error", limits, rej.Err, shed.Err)
		}
		if got, want := ShedError(shed.Err), "quota: "+rej.Err.Message; got != want {
			t.Fatalf("ShedError = %q, want %q", got, want)
		}
	}
}

func TestShedErrorAndMeta(t *testing.T) {
	if got, want := ShedError(DepthError("emails", 5, 10)), "quota: queue 'emails' is full: 5 pending >= max_pending 10"; got != want {
		t.Fatalf("ShedError(depth) = %q, want %q", got, want)
	}
	if got, want := ShedError(RateError("acme", "500/s")), "quota: rate limit exceeded for: namespace 'acme' enqueue_rate 500/s"; got != want {
		t.Fatalf("ShedError(rate) = %q, want %q", got, want)
	}
	if ShedMeta != `{"shed":"quota"}` {
		t.Fatalf("ShedMeta = %s, want {\"shed\":\"quota\"}", ShedMeta)
	}
	for v, want := range map[Verdict]string{Admit: "admit", Reject: "reject", Shed: "shed", Verdict(7): "Verdict(7)"} {
		if v.String() != want {
			t.Fatalf("Verdict(%d).String() = %q, want %q", int(v), v.String(), want)
		}
	}
}

func TestDepthRefusalSpendsNoTokens(t *testing.T) {
	for _, mode := range []string{"reject", "drop"} {
		d := doc(t, `{"max_pending":2,"enqueue_rate":"3/s","on_excess":"`+mode+`"}`)
		r := *d.EnqueueRate
		var b Bucket
		wantDecision(t, mode+": first call", Decide(d, &b, Call{Namespace: "acme", Queue: "q", N: 1, Pending: 0}, t0), Admit, "", "")
		if got := b.Tokens(r, t0); got != 2 {
			t.Fatalf("%s: after admitting 1 of 3, Tokens = %d, want 2", mode, got)
		}
		for _, c := range []Call{{Namespace: "acme", Queue: "q", N: 2, Pending: 1}, {Namespace: "acme", Queue: "q", N: 1, Pending: 2}} {
			got := Decide(d, &b, c, t0)
			if got.Verdict == Admit || got.Err.Reason != api.ReasonQueueFull {
				t.Fatalf("%s: call %+v: got %v %v, want a QUEUE_FULL refusal", mode, c, got.Verdict, got.Err)
			}
			if tok := b.Tokens(r, t0); tok != 2 {
				t.Fatalf("%s: after a depth refusal of %+v, Tokens = %d, want 2 (depth refusals spend none)", mode, c, tok)
			}
		}
	}
}

func TestRateRefusalTakesNone(t *testing.T) {
	d := doc(t, `{"enqueue_rate":"5/s"}`)
	r := *d.EnqueueRate
	var b Bucket
	call := func(n int64) Decision { return Decide(d, &b, Call{Namespace: "acme", Queue: "q", N: n}, t0) }
	wantDecision(t, "take 3 of 5", call(3), Admit, "", "")
	wantDecision(t, "take 3 of 2", call(3), Reject, api.ReasonRateLimited, "rate limit exceeded for: namespace 'acme' enqueue_rate 5/s")
	if got := b.Tokens(r, t0); got != 2 {
		t.Fatalf("after a refused take of 3, Tokens = %d, want 2 (all or none)", got)
	}
	wantDecision(t, "take 2 of 2", call(2), Admit, "", "")
	if got := b.Tokens(r, t0); got != 0 {
		t.Fatalf("after taking everything, Tokens = %d, want 0", got)
	}
	wantDecision(t, "take 1 of 0", call(1), Reject, api.ReasonRateLimited, "rate limit exceeded for: namespace 'acme' enqueue_rate 5/s")
}

func TestBatchLargerThanCapacityNeverAdmitted(t *testing.T) {
	d := doc(t, `{"enqueue_rate":"5/s"}`)
	var b Bucket
	for _, at := range []time.Duration{0, time.Second, time.Hour, 1000 * time.Hour} {
		got := Decide(d, &b, Call{Namespace: "acme", Queue: "q", N: 6}, t0.Add(at))
		if got.Verdict != Reject {
			t.Fatalf("N=6 under 5/s at +%v: verdict %v, want reject", at, got.Verdict)
		}
		if tok := b.Tokens(*d.EnqueueRate, t0.Add(at)); tok != 5 {
			t.Fatalf("at +%v: Tokens = %d, want 5 (full, refusals take none)", at, tok)
		}
	}
}

func TestBucketStartsFull(t *testing.T) {
	for _, s := range []string{"1/s", "500/s", "7/m", "3/h", "9223372036854775807/h"} {
		var b Bucket
		r := rate(t, s)
		if got := b.Tokens(r, t0); got != r.Count {
			t.Fatalf("new bucket for %s: Tokens = %d, want %d", s, got, r.Count)
		}
	}
}

// step is one point of a refill scenario: at t0+at, take n (if n > 0) and
// check whether that was admitted, then check the whole tokens left.
type step struct {
	at    time.Duration
	take  int64
	admit bool
	left  int64
}

func runSteps(t *testing.T, rateText string, steps []step) {
	t.Helper()
	r := rate(t, rateText)
	var b Bucket
	for i, s := range steps {
		now := t0.Add(s.at)
		if s.take > 0 {
			if got := b.take(r, s.take, now); got != s.admit {
				t.Fatalf("%s step %d: take(%d) at +%v = %v, want %v", rateText, i, s.take, s.at, got, s.admit)
			}
		}
		if got := b.Tokens(r, now); got != s.left {
			t.Fatalf("%s step %d: Tokens at +%v = %d, want %d", rateText, i, s.at, got, s.left)
		}
	}
}

func TestRefill(t *testing.T) {
	ms := time.Millisecond
	tests := []struct {
		name  string
		rate  string
		steps []step
	}{
		{"10/s one token per 100ms", "10/s", []step{
			{at: 0, take: 10, admit: true, left: 0},
			{at: 99 * ms, left: 0},
			{at: 100*ms - 1, left: 0},
			{at: 100 * ms, left: 1},
			{at: 199 * ms, left: 1},
			{at: 200 * ms, left: 2},
			{at: 999 * ms, left: 9},
			{at: time.Second, left: 10},
			{at: 5 * time.Second, left: 10},
		}},
		{"10/s fraction carried across a take", "10/s", []step{
			{at: 0, take: 10, admit: true, left: 0},
			{at: 150 * ms, take: 1, admit: true, left: 0}, // 1.5 accrued, 0.5 kept
			{at: 199 * ms, left: 0},
			{at: 200 * ms, left: 1}, // 0.5 + 0.5
			{at: 200 * ms, take: 2, admit: false, left: 1},
		}},
		{"10/s across a unit boundary", "10/s", []step{
			{at: 0, take: 10, admit: true, left: 0},
			{at: time.Second, take: 5, admit: true, left: 5},
			{at: 1050 * ms, left: 5},
			{at: 1100 * ms, left: 6},
			{at: 1100 * ms, take: 7, admit: false, left: 6},
			{at: 1500 * ms, take: 10, admit: true, left: 0},
			{at: 2500 * ms, left: 10},
		}},
		{"a refused take leaves the refill running", "10/s", []step{
			{at: 0, take: 10, admit: true, left: 0},
			{at: 50 * ms, take: 1, admit: false, left: 0},
			{at: 100 * ms, take: 1, admit: true, left: 0},
		}},
		{"2/m one token per 30s", "2/m", []step{
			{at: 0, take: 2, admit: true, left: 0},
			{at: 29*time.Second + 999*ms, left: 0},
			{at: 30 * time.Second, left: 1},
			{at: 59 * time.Second, left: 1},
			{at: time.Minute, left: 2},
			{at: time.Hour, left: 2},
		}},
		{"3/h one token per 20m", "3/h", []step{
			{at: 0, take: 3, admit: true, left: 0},
			{at: 20*time.Minute - 1, take: 1, admit: false, left: 0},
			{at: 20 * time.Minute, take: 1, admit: true, left: 0},
			{at: 40*time.Minute - 1, left: 0},
			{at: 40 * time.Minute, left: 1},
			{at: 80 * time.Minute, left: 3},
		}},
		{"1/h", "1/h", []step{
			{at: 0, take: 1, admit: true, left: 0},
			{at: time.Hour - time.Second, take: 1, admit: false, left: 0},
			{at: time.Hour, take: 1, admit: true, left: 0},
		}},
		{"refill never exceeds capacity", "10/s", []step{
			{at: 0, left: 10},
			{at: 10 * time.Hour, left: 10},
			{at: 10 * time.Hour, take: 1, admit: true, left: 9},
			{at: 20 * time.Hour, left: 10},
			{at: 20 * time.Hour, take: 11, admit: false, left: 10},
		}},
		{"a full bucket banks nothing", "10/s", []step{
			{at: 0, left: 10},
			{at: 900 * ms, take: 10, admit: true, left: 0}, // full for 900ms: nothing extra accrued
			{at: 999 * ms, left: 0},
			{at: 1000 * ms, left: 1},
		}},
		{"clock stepping back refills nothing and does not refill twice", "10/s", []step{
			{at: time.Second, take: 10, admit: true, left: 0},
			{at: 0, left: 0},
			{at: 500 * ms, left: 0},
			{at: time.Second, left: 0},
			{at: 1100 * ms, left: 1},
		}},
		{"huge count, small steps", "1000000000000/s", []step{
			{at: 0, take: 1000000000000, admit: true, left: 0},
			{at: 1, left: 1000},
			{at: 1 * ms, left: 1000000000},
			{at: 999 * ms, left: 999000000000},
			{at: time.Second, left: 1000000000000},
		}},
		{"largest count per hour", "9223372036854775807/h", []step{
			{at: 0, take: 9223372036854775807, admit: true, left: 0},
			{at: 1, left: 2562047}, // floor((2^63-1)/3.6e12)
			{at: time.Hour - 1, left: 9223372036854775807 - 2562048}, // floor((2^63-1)*(3.6e12-1)/3.6e12)
			{at: time.Hour, left: 9223372036854775807},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { runSteps(t, tc.rate, tc.steps) })
	}
}

// TestRefillLosesNothingToSmallSteps checks the refill is exact however the
// time between calls is cut: 3/s queried every millisecond holds exactly
// floor(elapsed*3/1s) tokens at each step.
func TestRefillLosesNothingToSmallSteps(t *testing.T) {
	for _, tc := range []struct {
		rate string
		step time.Duration
	}{{"3/s", time.Millisecond}, {"7/m", 333 * time.Millisecond}, {"13/h", 17 * time.Second}, {"1000001/s", 3}} {
		r := rate(t, tc.rate)
		var b Bucket
		if !b.take(r, r.Count, t0) {
			t.Fatalf("%s: could not empty a new bucket", tc.rate)
		}
		for elapsed := tc.step; elapsed < r.Unit; elapsed += tc.step {
			if tc.step < 100 && elapsed > 100000 {
				break // enough for the tiny step
			}
			want := int64(elapsed) * r.Count / int64(r.Unit)
			if got := b.Tokens(r, t0.Add(elapsed)); got != want {
				t.Fatalf("%s queried every %v: Tokens at +%v = %d, want %d", tc.rate, tc.step, elapsed, got, want)
			}
		}
	}
}

func TestRateChange(t *testing.T) {
	ms := time.Millisecond
	t.Run("raising the rate hands out no burst", func(t *testing.T) {
		var b Bucket
		if !b.take(rate(t, "5/s"), 5, t0) {
			t.Fatal("take 5 of a new 5/s bucket refused, want admitted")
		}
		r := rate(t, "100/s")
		if got := b.Tokens(r, t0); got != 0 {
			t.Fatalf("empty 5/s bucket raised to 100/s: Tokens = %d, want 0", got)
		}
		if got := b.Tokens(r, t0.Add(10*ms)); got != 1 {
			t.Fatalf("100/s after 10ms: Tokens = %d, want 1 (the new rate refills)", got)
		}
		if got := b.Tokens(r, t0.Add(time.Second)); got != 100 {
			t.Fatalf("100/s after 1s: Tokens = %d, want 100 (the new capacity)", got)
		}
	})
	t.Run("raising a full bucket keeps what it holds", func(t *testing.T) {
		var b Bucket
		b.Tokens(rate(t, "5/s"), t0)
		r := rate(t, "100/s")
		if got := b.Tokens(r, t0); got != 5 {
			t.Fatalf("full 5/s bucket raised to 100/s: Tokens = %d, want 5", got)
		}
		if got := b.Tokens(r, t0.Add(500*ms)); got != 55 {
			t.Fatalf("100/s 500ms later: Tokens = %d, want 55", got)
		}
	})
	t.Run("lowering the rate caps at once", func(t *testing.T) {
		var b Bucket
		b.Tokens(rate(t, "100/s"), t0)
		r := rate(t, "10/s")
		if got := b.Tokens(r, t0); got != 10 {
			t.Fatalf("full 100/s bucket lowered to 10/s: Tokens = %d, want 10", got)
		}
		if b.take(r, 11, t0) {
			t.Fatal("take 11 under 10/s admitted, want refused")
		}
	})
	t.Run("lowering keeps fewer tokens than the new capacity", func(t *testing.T) {
		var b Bucket
		if !b.take(rate(t, "100/s"), 95, t0) {
			t.Fatal("take 95 of 100 refused")
		}
		if got := b.Tokens(rate(t, "10/s"), t0); got != 5 {
			t.Fatalf("5 tokens left, rate lowered to 10/s: Tokens = %d, want 5", got)
		}
	})
	t.Run("the old rate refills up to the change", func(t *testing.T) {
		var b Bucket
		if !b.take(rate(t, "10/s"), 10, t0) {
			t.Fatal("take 10 of 10 refused")
		}
		// 10/s for 300ms accrues 3 before the switch to 1000/h.
		r := rate(t, "1000/h")
		if got := b.Tokens(r, t0.Add(300*ms)); got != 3 {
			t.Fatalf("10/s for 300ms then 1000/h: Tokens = %d, want 3", got)
		}
	})
	t.Run("a unit change drops the partial token", func(t *testing.T) {
		var b Bucket
		if !b.take(rate(t, "10/s"), 10, t0) {
			t.Fatal("take 10 of 10 refused")
		}
		// 150ms of 10/s is 1.5 tokens; the half is dropped when the unit
		// changes (its denominator was the old unit), so 10/m (one per 6s)
		// needs a full 6s for the next.
		r := rate(t, "10/m")
		change := t0.Add(150 * ms)
		if got := b.Tokens(r, change); got != 1 {
			t.Fatalf("at the change: Tokens = %d, want 1", got)
		}
		if got := b.Tokens(r, change.Add(6*time.Second-1)); got != 1 {
			t.Fatalf("6s-1ns after the change: Tokens = %d, want 1", got)
		}
		if got := b.Tokens(r, change.Add(6*time.Second)); got != 2 {
			t.Fatalf("6s after the change: Tokens = %d, want 2", got)
		}
	})
	t.Run("a count change on the same unit keeps the partial token", func(t *testing.T) {
		var b Bucket
		if !b.take(rate(t, "10/s"), 10, t0) {
			t.Fatal("take 10 of 10 refused")
		}
		// 150ms of 10/s is 1.5 tokens. The unit is unchanged, so the half
		// token is kept, and at 20/s the other half takes 25ms.
		r := rate(t, "20/s")
		change := t0.Add(150 * ms)
		if got := b.Tokens(r, change); got != 1 {
			t.Fatalf("at the change: Tokens = %d, want 1", got)
		}
		if got := b.Tokens(r, change.Add(25*ms-1)); got != 1 {
			t.Fatalf("25ms-1ns after the change: Tokens = %d, want 1", got)
		}
		if got := b.Tokens(r, change.Add(25*ms)); got != 2 {
			t.Fatalf("25ms after the change: Tokens = %d, want 2", got)
		}
	})
	t.Run("the same rate written differently keeps state", func(t *testing.T) {
		var b Bucket
		if !b.take(rate(t, "5/s"), 5, t0) {
			t.Fatal("take 5 of 5 refused")
		}
		if got := b.Tokens(rate(t, "05/s"), t0); got != 0 {
			t.Fatalf("5/s rewritten as 05/s: Tokens = %d, want 0 (same rate, same bucket)", got)
		}
	})
	t.Run("through Decide", func(t *testing.T) {
		var b Bucket
		call := Call{Namespace: "acme", Queue: "q", N: 5}
		wantDecision(t, "5 under 5/s", Decide(doc(t, `{"enqueue_rate":"5/s"}`), &b, call, t0), Admit, "", "")
		wantDecision(t, "5 under 50/s right after", Decide(doc(t, `{"enqueue_rate":"50/s"}`), &b, call, t0),
			Reject, api.ReasonRateLimited, "rate limit exceeded for: namespace 'acme' enqueue_rate 50/s")
		wantDecision(t, "5 under 50/s 100ms later", Decide(doc(t, `{"enqueue_rate":"50/s"}`), &b, call, t0.Add(100*ms)), Admit, "", "")
	})
}

func TestRateRemovedResetsBucket(t *testing.T) {
	withRate := doc(t, `{"enqueue_rate":"5/s"}`)
	call := Call{Namespace: "acme", Queue: "q", N: 5}
	refused := "rate limit exceeded for: namespace 'acme' enqueue_rate 5/s"

	// Kept: with the rate in place throughout, the bucket stays empty.
	var kept Bucket
	wantDecision(t, "kept: first 5", Decide(withRate, &kept, call, t0), Admit, "", "")
	wantDecision(t, "kept: second 5", Decide(withRate, &kept, call, t0), Reject, api.ReasonRateLimited, refused)

	// Removed: one decision without a rate forgets the bucket, so the rate
	// set again later starts full, even at the same instant.
	for _, without := range []string{`{}`, `{"max_pending":100}`, `{"max_pending":0}`, `{"on_excess":"drop"}`} {
		var b Bucket
		wantDecision(t, "first 5", Decide(withRate, &b, call, t0), Admit, "", "")
		Decide(doc(t, without), &b, call, t0)
		if b != (Bucket{}) {
			t.Fatalf("after a decision under %s (no rate) the bucket is %+v, want the zero Bucket", without, b)
		}
		wantDecision(t, "5 after the rate came back ("+without+")", Decide(withRate, &b, call, t0), Admit, "", "")
		if got := b.Tokens(*withRate.EnqueueRate, t0); got != 0 {
			t.Fatalf("after taking 5 of the fresh bucket, Tokens = %d, want 0", got)
		}
	}

	var b Bucket
	if !b.take(rate(t, "5/s"), 5, t0) {
		t.Fatal("take 5 of 5 refused")
	}
	b.Reset()
	if got := b.Tokens(rate(t, "5/s"), t0); got != 5 {
		t.Fatalf("after Reset, Tokens = %d, want 5 (starts full)", got)
	}
}

func TestZeroTakeAlwaysAdmitted(t *testing.T) {
	var b Bucket
	r := rate(t, "1/h")
	if !b.take(r, 1, t0) {
		t.Fatal("take 1 of 1 refused")
	}
	if !b.take(r, 0, t0) {
		t.Fatal("take 0 of an empty bucket refused, want admitted (nothing to take)")
	}
	if got := b.Tokens(r, t0); got != 0 {
		t.Fatalf("Tokens = %d, want 0", got)
	}
}

// TestNoWallClock enforces that the package reads no clock: time only moves
// through arguments.
func TestNoWallClock(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == "time" {
				switch sel.Sel.Name {
				case "Now", "Since", "Until", "Sleep", "After", "Tick", "NewTimer", "NewTicker", "AfterFunc":
					t.Errorf("%s: uses time.%s; admission must take time as an argument", fset.Position(sel.Pos()), sel.Sel.Name)
				}
			}
			return true
		})
	}
}
