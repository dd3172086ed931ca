package bus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/cachebust"
	"github.com/flexiq/flexiq/quota"
)

// Invalidator is what a node forgets when told to (cachebust.Cache).
type Invalidator interface {
	// InvalidateVerified drops ns's copy for a quota write of revision rev
	// once the store confirms it holds rev; a revision it does not hold
	// comes back as an error wrapping cachebust.ErrRevisionNotHeld.
	InvalidateVerified(ctx context.Context, ns string, rev int64) error
	InvalidateConfig(ns string)
	// TTL is how long a cached copy is trusted; it bounds the propagation
	// delays worth recording.
	TTL() time.Duration
}

// TokenForgetter drops a revoked token from a node's cache.
type TokenForgetter interface {
	Forget(tokenID string)
}

// Observer is told what the listeners did with each broadcast
// (admin.BroadcastMetrics).
type Observer interface {
	// Propagation is a quota change's delay from its sender to this node.
	Propagation(d time.Duration)
	// PropagationSkipped is a quota change whose delay could not be
	// trusted (no, future or implausibly old send time); it was applied.
	PropagationSkipped()
	// BroadcastDropped is a broadcast ignored for reason.
	BroadcastDropped(subject, reason string)
}

// Why a broadcast is dropped (the reason label of
// flexiq_broadcasts_dropped_total).
const (
	DropOversized        = "oversized"
	DropMalformed        = "malformed"
	DropInvalidNamespace = "invalid_namespace"
	DropInvalidRevision  = "invalid_revision"
	DropRevisionNotHeld  = "revision_not_held"
	DropUnverified       = "unverified"
	DropInvalidTokenID   = "invalid_token_id"
)

// MaxBroadcastBytes bounds a broadcast's body. A genuine one is a
// namespace (at most 128 bytes), a few numbers or a token id; anything
// larger is not parsed.
const MaxBroadcastBytes = 4 << 10

const (
	maxTokenIDBytes = 64
	// verifyTimeout bounds the store read that checks a quota revision:
	// broadcasts are handled one at a time, and past the cache TTL
	// (2 s by default) the copy is refreshed without them anyway.
	verifyTimeout = 2 * time.Second
	// defaultPropagationCap bounds recorded delays when the cache has no
	// TTL.
	defaultPropagationCap = 2 * time.Second
	dropLogEvery          = time.Minute
)

// Subscriptions are a node's broadcast listeners.
type Subscriptions struct {
	subs []*nats.Subscription
}

// SubscribeBroadcasts listens for quota, configuration and token changes.
// obs, if not nil, is told each quota change's propagation delay and every
// broadcast dropped.
//
// Only nodes may publish broadcasts (docs/protocol.md), but a listener still trusts
// nothing it receives: a node's bug, a mis-set external server or a stolen
// cluster secret must not be able to stop a namespace's cache, flood the
// log or skew the metrics. So a broadcast that does not decode, names no
// valid namespace or token, or claims a quota revision the store does not
// hold is dropped and counted, and logged without its body, at most once
// a minute per subject and reason.
func SubscribeBroadcasts(nc *nats.Conn, inv Invalidator, tokens TokenForgetter, obs Observer, log *slog.Logger) (*Subscriptions, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	l := &listener{inv: inv, tokens: tokens, obs: obs, log: log, dropLogged: map[dropKey]dropLog{}}
	if l.obs == nil {
		l.obs = nopObserver{}
	}
	s := &Subscriptions{}
	for _, b := range []struct {
		subject string
		h       nats.MsgHandler
	}{
		{api.SubjectQuotaChanged, l.quotaChanged},
		{api.SubjectConfigChanged, l.configChanged},
		{api.SubjectTokenRevoked, l.tokenRevoked},
	} {
		sub, err := nc.Subscribe(b.subject, b.h)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("subscribe %s: %w", b.subject, err)
		}
		s.subs = append(s.subs, sub)
	}
	return s, nil
}

// listener handles the broadcasts of one node.
type listener struct {
	inv    Invalidator
	tokens TokenForgetter
	obs    Observer
	log    *slog.Logger

	mu         sync.Mutex
	dropLogged map[dropKey]dropLog
}

type dropKey struct{ subject, reason string }

type dropLog struct {
	at         time.Time
	suppressed int
}

func (l *listener) quotaChanged(m *nats.Msg) {
	// The delay is measured on arrival, on this node's clock; the store
	// read that verifies the claim is not part of it.
	arrived := time.Now()
	var ev api.QuotaChanged
	if !l.decode(m, &ev) || !l.validNamespace(m, ev.Namespace) {
		return
	}
	// Every write makes a revision of 1 or more (0 is "never written").
	if ev.Revision < 1 {
		l.drop(m, DropInvalidRevision)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), verifyTimeout)
	err := l.inv.InvalidateVerified(ctx, ev.Namespace, ev.Revision)
	cancel()
	switch {
	case errors.Is(err, cachebust.ErrRevisionNotHeld):
		l.drop(m, DropRevisionNotHeld)
		return
	case err != nil:
		// The copy was dropped all the same; only the revision is not
		// remembered. Not a measure of propagation either.
		l.drop(m, DropUnverified)
		return
	}
	l.propagation(arrived, ev.At)
}

// propagation records the delay from the sender's clock (at, Unix ns) to
// arrived, this node's. at is the sender's word and may be forged or
// skewed, so only a delay from 0 to the cache TTL is recorded: a negative
// one is a clock ahead of ours, and one beyond the TTL says nothing about
// the broadcast path (by then the TTL has refreshed the copy anyway) and
// would let one message drag the histogram's tail. Those, and a missing
// at, are counted as skipped instead.
func (l *listener) propagation(arrived time.Time, at int64) {
	bound := l.inv.TTL()
	if bound <= 0 {
		bound = defaultPropagationCap
	}
	d := arrived.Sub(time.Unix(0, at))
	if at <= 0 || d < 0 || d > bound {
		l.obs.PropagationSkipped()
		return
	}
	l.obs.Propagation(d)
}

func (l *listener) configChanged(m *nats.Msg) {
	var ev api.ConfigChanged
	if !l.decode(m, &ev) || !l.validNamespace(m, ev.Namespace) {
		return
	}
	// No revision to verify: the worst a forged one does is one re-read
	// of a namespace's configuration.
	l.inv.InvalidateConfig(ev.Namespace)
}

func (l *listener) tokenRevoked(m *nats.Msg) {
	if len(m.Data) > MaxBroadcastBytes {
		l.drop(m, DropOversized)
		return
	}
	id := string(m.Data)
	if !validTokenID(id) {
		l.drop(m, DropInvalidTokenID)
		return
	}
	l.tokens.Forget(id)
}

// decode reads a JSON broadcast into v; one too large to be genuine is not
// even parsed.
func (l *listener) decode(m *nats.Msg, v any) bool {
	if len(m.Data) > MaxBroadcastBytes {
		l.drop(m, DropOversized)
		return false
	}
	if err := json.Unmarshal(m.Data, v); err != nil {
		l.drop(m, DropMalformed)
		return false
	}
	return true
}

func (l *listener) validNamespace(m *nats.Msg, ns string) bool {
	if quota.CheckNamespace(ns) != nil {
		l.drop(m, DropInvalidNamespace)
		return false
	}
	return true
}

// validTokenID is the shape of a token id (auth.NewToken makes
// "tok_" and 16 hex digits): a bounded run of letters, digits, '_' and '-'.
func validTokenID(id string) bool {
	if id == "" || len(id) > maxTokenIDBytes {
		return false
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// drop counts a dropped broadcast and logs it at most once per
// dropLogEvery for each subject and reason, with how many went unlogged
// since. Never the body (nor a decode error, which may quote it): it can
// be anything, of any size.
func (l *listener) drop(m *nats.Msg, reason string) {
	l.obs.BroadcastDropped(m.Subject, reason)
	now := time.Now()
	k := dropKey{m.Subject, reason}
	l.mu.Lock()
	last, seen := l.dropLogged[k]
	if seen && now.Sub(last.at) < dropLogEvery {
		last.suppressed++
		l.dropLogged[k] = last
		l.mu.Unlock()
		return
	}
	l.dropLogged[k] = dropLog{at: now}
	l.mu.Unlock()
	l.log.Warn("dropped a broadcast", "subject", m.Subject, "reason", reason, "bytes", len(m.Data),
		"unlogged_since_last", last.suppressed)
}

type nopObserver struct{}

func (nopObserver) Propagation(time.Duration)       {}
func (nopObserver) PropagationSkipped()             {}
func (nopObserver) BroadcastDropped(string, string) {}

// Close unsubscribes.
func (s *Subscriptions) Close() {
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
	s.subs = nil
}

// Publisher broadcasts changes to every node.
type Publisher struct {
	NC *nats.Conn
}

// QuotaChanged announces a quota write of revision rev.
func (p Publisher) QuotaChanged(ns string, rev int64, at time.Time) error {
	data, _ := json.Marshal(api.QuotaChanged{Namespace: ns, Revision: rev, At: at.UnixNano()})
	return p.NC.Publish(api.SubjectQuotaChanged, data)
}

// ConfigChanged announces a configuration write.
func (p Publisher) ConfigChanged(ns, kind string) error {
	data, _ := json.Marshal(api.ConfigChanged{Namespace: ns, Kind: kind})
	return p.NC.Publish(api.SubjectConfigChanged, data)
}

// TokenRevoked announces a revocation.
func (p Publisher) TokenRevoked(id string) error {
	return p.NC.Publish(api.SubjectTokenRevoked, []byte(id))
}
