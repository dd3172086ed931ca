package admission

import (
	"fmt"
	"math/big"
	"testing"
	"time"

	"github.com/flexiq/flexiq/quota"
	"pgregory.net/rapid"
)

// refBucket is the naive reference model of Bucket: the tokens are an exact
// rational, refilled by elapsed*count/unit and capped at count. A take of n
// succeeds when n <= floor(tokens).
type refBucket struct {
	count, unit int64
	tokens      *big.Rat
	last        int64 // ns since t0
}

func newRefBucket(count, unit, now int64) *refBucket {
	return &refBucket{count: count, unit: unit, tokens: new(big.Rat).SetInt64(count), last: now}
}

func (m *refBucket) advance(now int64) {
	if now <= m.last {
		return
	}
	accrued := new(big.Int).Mul(big.NewInt(now-m.last), big.NewInt(m.count))
	m.tokens.Add(m.tokens, new(big.Rat).SetFrac(accrued, big.NewInt(m.unit)))
	if capacity := new(big.Rat).SetInt64(m.count); m.tokens.Cmp(capacity) > 0 {
		m.tokens = capacity
	}
	m.last = now
}

func (m *refBucket) whole() int64 {
	f := new(big.Int).Quo(m.tokens.Num(), m.tokens.Denom()) // tokens >= 0: truncation is floor
	if !f.IsInt64() {
		panic("model tokens out of int64 range")
	}
	return f.Int64()
}

func (m *refBucket) take(n int64, now int64) bool {
	m.advance(now)
	if n > m.whole() {
		return false
	}
	m.tokens.Sub(m.tokens, new(big.Rat).SetInt64(n))
	return true
}

// changeRate follows bucket.go's documented rule: refill at the old rate up
// to now, drop the partial token when the unit changes (its denominator was
// the old unit), then cap at the new capacity.
func (m *refBucket) changeRate(count, unit, now int64) {
	m.advance(now)
	if count == m.count && unit == m.unit {
		return
	}
	if unit != m.unit {
		m.tokens = new(big.Rat).SetInt64(m.whole())
	}
	m.count, m.unit = count, unit
	if capacity := new(big.Rat).SetInt64(count); m.tokens.Cmp(capacity) > 0 {
		m.tokens = capacity
	}
}

var units = []time.Duration{time.Second, time.Minute, time.Hour}

func unitLetter(u time.Duration) string {
	switch u {
	case time.Second:
		return "s"
	case time.Minute:
		return "m"
	}
	return "h"
}

func drawRate(t *rapid.T, label string) quota.Rate {
	count := rapid.OneOf(
		rapid.Int64Range(1, 10),
		rapid.Int64Range(1, 1_000_000),
		rapid.Int64Range(1, 1<<40), // products beyond 64 bits: the 128-bit path
		rapid.Int64Range(1<<40, 1<<62),
	).Draw(t, label+" count")
	unit := rapid.SampledFrom(units).Draw(t, label+" unit")
	return quota.Rate{Count: count, Unit: unit, Text: fmt.Sprintf("%d/%s", count, unitLetter(unit))}
}

// drawAdvance is a step of time in 0..2*unit, often small against the time
// one token takes, so fractions of a token accrue and carry.
func drawAdvance(t *rapid.T, r quota.Rate) int64 {
	unit := int64(r.Unit)
	perToken := max(unit/r.Count, 1)
	return rapid.OneOf(
		rapid.Int64Range(0, 2*unit),
		rapid.Int64Range(0, 3*perToken),
		rapid.Int64Range(0, 1000),
		rapid.Just(int64(0)),
	).Draw(t, "advance ns")
}

// drawTake is a take of 0..count+2 tokens, often few or about the capacity.
func drawTake(t *rapid.T, r quota.Rate) int64 {
	return rapid.OneOf(
		rapid.Int64Range(0, r.Count+2),
		rapid.Int64Range(0, min(r.Count+2, 3)),
		rapid.Int64Range(max(r.Count-2, 0), r.Count+2),
	).Draw(t, "take n")
}

func checkTokens(t *rapid.T, b *Bucket, m *refBucket, r quota.Rate, now int64, what string) {
	if got, want := b.Tokens(r, t0.Add(time.Duration(now))), m.whole(); got != want {
		t.Fatalf("%s at +%dns: Tokens = %d, want floor(model) = %d (model %s)", what, now, got, want, m.tokens.RatString())
	}
}

func TestBucketMatchesModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := drawRate(t, "rate")
		var b Bucket
		var now int64
		m := newRefBucket(r.Count, int64(r.Unit), now)
		checkTokens(t, &b, m, r, now, "new bucket")
		steps := rapid.IntRange(1, 200).Draw(t, "steps")
		for i := range steps {
			now += drawAdvance(t, r)
			if rapid.IntRange(0, 3).Draw(t, "query only") == 0 {
				m.advance(now)
				checkTokens(t, &b, m, r, now, fmt.Sprintf("step %d query", i))
				continue
			}
			n := drawTake(t, r)
			want := m.take(n, now)
			if got := b.take(r, n, t0.Add(time.Duration(now))); got != want {
				t.Fatalf("step %d: take(%d) at +%dns under %s = %v, model says %v (model tokens now %s)",
					i, n, now, r.Text, got, want, m.tokens.RatString())
			}
			checkTokens(t, &b, m, r, now, fmt.Sprintf("step %d after take(%d)", i, n))
		}
	})
}

func TestBucketMatchesModelAcrossRateChanges(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		r := drawRate(t, "rate")
		var b Bucket
		var now int64
		m := newRefBucket(r.Count, int64(r.Unit), now)
		// The zero Bucket takes the rate of its first use, so use it once
		// before any change.
		checkTokens(t, &b, m, r, now, "new bucket")
		steps := rapid.IntRange(1, 100).Draw(t, "steps")
		for i := range steps {
			now += drawAdvance(t, r)
			if rapid.IntRange(0, 9).Draw(t, "change rate") == 0 {
				r = drawRate(t, "new rate")
				m.changeRate(r.Count, int64(r.Unit), now)
				checkTokens(t, &b, m, r, now, fmt.Sprintf("step %d after a change to %s", i, r.Text))
				continue
			}
			n := drawTake(t, r)
			want := m.take(n, now)
			if got := b.take(r, n, t0.Add(time.Duration(now))); got != want {
				t.Fatalf("step %d: take(%d) at +%dns under %s = %v, model says %v", i, n, now, r.Text, got, want)
			}
			checkTokens(t, &b, m, r, now, fmt.Sprintf("step %d after take(%d)", i, n))
		}
	})
}
