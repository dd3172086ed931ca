package bus

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/api"
)

// Invalidator is what a node forgets when told to.
type Invalidator interface {
	Invalidate(ns string, rev int64)
	InvalidateConfig(ns string)
}

// TokenForgetter drops a revoked token from a node's cache.
type TokenForgetter interface {
	Forget(tokenID string)
}

// Subscriptions are a node's broadcast listeners.
type Subscriptions struct {
	subs []*nats.Subscription
}

// SubscribeBroadcasts listens for quota, configuration and token changes.
// observe, if not nil, gets each quota change's propagation delay.
func SubscribeBroadcasts(nc *nats.Conn, inv Invalidator, tokens TokenForgetter, observe func(time.Duration), log *slog.Logger) (*Subscriptions, error) {
	s := &Subscriptions{}
	add := func(subject string, h nats.MsgHandler) error {
		sub, err := nc.Subscribe(subject, h)
		if err != nil {
			s.Close()
			return fmt.Errorf("subscribe %s: %w", subject, err)
		}
		s.subs = append(s.subs, sub)
		return nil
	}
	err := add(api.SubjectQuotaChanged, func(m *nats.Msg) {
		var ev api.QuotaChanged
		if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Namespace == "" {
			log.Warn("ignoring malformed quota change broadcast", "data", string(m.Data))
			return
		}
		inv.Invalidate(ev.Namespace, ev.Revision)
		if observe != nil && ev.At > 0 {
			observe(time.Since(time.Unix(0, ev.At)))
		}
	})
	if err != nil {
		return nil, err
	}
	if err := add(api.SubjectConfigChanged, func(m *nats.Msg) {
		var ev api.ConfigChanged
		if err := json.Unmarshal(m.Data, &ev); err != nil || ev.Namespace == "" {
			return
		}
		inv.InvalidateConfig(ev.Namespace)
	}); err != nil {
		return nil, err
	}
	if err := add(api.SubjectTokenRevoked, func(m *nats.Msg) {
		tokens.Forget(string(m.Data))
	}); err != nil {
		return nil, err
	}
	return s, nil
}

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
