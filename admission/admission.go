// Package admission decides whether one enqueue call's share of a namespace
// is admitted, refused or shed (docs/quotas.md): depth first, then the token bucket,
// then on_excess. It does no IO and never reads the clock: time is an
// argument, so the rules are plain table tests.
package admission

import (
	"fmt"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/quota"
)

// Verdict is what happens to a call.
type Verdict int

// The verdicts.
const (
	// Admit: write the call's jobs.
	Admit Verdict = iota
	// Reject: fail the call with Decision.Err; write nothing.
	Reject
	// Shed: succeed, writing the call's jobs as dead letters (drop mode).
	Shed
)

func (v Verdict) String() string {
	switch v {
	case Admit:
		return "admit"
	case Reject:
		return "reject"
	case Shed:
		return "shed"
	}
	return fmt.Sprintf("Verdict(%d)", int(v))
}

// Call is one enqueue call's share of a namespace.
type Call struct {
	Namespace string
	// Queue is the queue of the call's first job, for the depth message.
	Queue string
	// N is the number of jobs in the call.
	N int64
	// Pending is the namespace's pending count before the call.
	Pending int64
}

// Decision is the outcome for one call. Err is set for Reject and Shed: the
// refusal itself, whose message a shed job's error repeats.
type Decision struct {
	Verdict Verdict
	Err     *api.Error
}

// Decide rules on one call under doc at now, taking tokens from b only when
// the call is admitted. A call refused for depth spends no tokens; a call
// refused for rate takes none (all or nothing).
func Decide(doc quota.Document, b *Bucket, c Call, now time.Time) Decision {
	if doc.EnqueueRate == nil {
		// Forget the bucket so a rate set later starts full.
		b.Reset()
	}
	if doc.MaxPending != nil && c.Pending+c.N > *doc.MaxPending {
		return refuse(doc, DepthError(c.Queue, c.Pending, *doc.MaxPending))
	}
	if doc.EnqueueRate != nil && !b.take(*doc.EnqueueRate, c.N, now) {
		return refuse(doc, RateError(c.Namespace, doc.EnqueueRate.Text))
	}
	return Decision{Verdict: Admit}
}

func refuse(doc quota.Document, err *api.Error) Decision {
	if doc.Excess() == quota.Drop {
		return Decision{Verdict: Shed, Err: err}
	}
	return Decision{Verdict: Reject, Err: err}
}

// DepthError is the QUEUE_FULL refusal of docs/quotas.md.
func DepthError(queue string, pending, max int64) *api.Error {
	return api.Errorf(api.CodeResourceExhausted, api.ReasonQueueFull,
		"queue '%s' is full: %d pending >= max_pending %d", queue, pending, max)
}

// RateError is the RATE_LIMITED refusal of docs/quotas.md.
func RateError(namespace, rate string) *api.Error {
	return api.Errorf(api.CodeResourceExhausted, api.ReasonRateLimited,
		"rate limit exceeded for: namespace '%s' enqueue_rate %s", namespace, rate)
}

// ShedError is the error a shed job carries: "quota: " and the refusal.
func ShedError(refusal *api.Error) string {
	return "quota: " + refusal.Message
}

// ShedMeta is the dead-letter metadata of a shed job.
const ShedMeta = `{"shed":"quota"}`
