package admission

import (
	"math/bits"
	"time"

	"github.com/flexiq/flexiq/quota"
)

// Bucket is the token bucket of one namespace's enqueue_rate: capacity Count,
// refilled Count tokens per Unit, starting full.
//
// It counts in exact integers: whole tokens plus a fraction kept as a
// numerator over the unit's nanoseconds, so no refill is lost to rounding
// however small the steps between calls. The zero Bucket is "not yet
// configured" and fills up on first use.
type Bucket struct {
	rate   quota.Rate
	tokens int64
	// frac is the part of a token accrued so far, in 1/unit.Nanoseconds().
	frac  uint64
	last  time.Time
	valid bool
}

// Tokens reports the whole tokens available at now (after refill), for
// metrics and tests.
func (b *Bucket) Tokens(r quota.Rate, now time.Time) int64 {
	b.sync(r, now)
	return b.tokens
}

// sync applies a rate change and refills up to now.
func (b *Bucket) sync(r quota.Rate, now time.Time) {
	if !b.valid {
		*b = Bucket{rate: r, tokens: r.Count, last: now, valid: true}
		return
	}
	if b.rate.Count != r.Count || b.rate.Unit != r.Unit {
		// A changed rate keeps what is in the bucket, capped at the new
		// capacity: raising a limit does not hand out a free burst, and
		// lowering it takes effect at once.
		b.refill(now)
		if b.rate.Unit != r.Unit {
			b.frac = 0 // the fraction's denominator was the old unit
		}
		b.rate = r
		if b.tokens >= r.Count {
			b.tokens, b.frac = r.Count, 0
		}
		return
	}
	b.rate.Text = r.Text
	b.refill(now)
}

func (b *Bucket) refill(now time.Time) {
	elapsed := now.Sub(b.last)
	if elapsed <= 0 {
		// A clock that steps back refills nothing; keep last so the
		// bucket does not refill twice once time catches up.
		return
	}
	b.last = now
	if b.tokens >= b.rate.Count {
		b.frac = 0
		return
	}
	unit := uint64(b.rate.Unit)
	if elapsed >= b.rate.Unit {
		// A whole unit refills any bucket: Count tokens per unit.
		b.tokens, b.frac = b.rate.Count, 0
		return
	}
	// accrued = frac + elapsed*count, in 1/unit tokens; elapsed < unit so
	// the quotient stays below count and fits.
	hi, lo := bits.Mul64(uint64(elapsed), uint64(b.rate.Count))
	lo, carry := bits.Add64(lo, b.frac, 0)
	hi += carry
	whole, rem := bits.Div64(hi, lo, unit)
	if int64(whole) >= b.rate.Count-b.tokens {
		b.tokens, b.frac = b.rate.Count, 0
		return
	}
	b.tokens += int64(whole)
	b.frac = rem
}

// take removes n tokens if all are there (refilled to now) and reports
// whether it did; a refused take leaves the bucket as it was.
func (b *Bucket) take(r quota.Rate, n int64, now time.Time) bool {
	b.sync(r, now)
	if n > b.tokens {
		return false
	}
	b.tokens -= n
	return true
}

// Reset forgets the bucket's state: the next use starts full. Used when a
// namespace's rate is removed, so setting one again starts full as docs/quotas.md says.
func (b *Bucket) Reset() { *b = Bucket{} }
