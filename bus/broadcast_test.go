package bus_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/admin"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/bus"
	"github.com/flexiq/flexiq/cachebust"
	"github.com/flexiq/flexiq/internal/testlog"
	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
)

// What the node wires together must fit.
var (
	_ bus.Observer    = (*admin.BroadcastMetrics)(nil)
	_ bus.Invalidator = (*cachebust.Cache)(nil)
)

// wait is how long a test waits for a signal before failing; nothing
// waits for it when the code works.
const wait = 10 * time.Second

// memStore is a settings map, safe for the listener's goroutines, that
// counts reads.
type memStore struct {
	mu       sync.Mutex
	settings map[string]store.Setting
	reads    int
}

func (m *memStore) SettingGet(_ context.Context, key string) (store.Setting, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.reads++
	s, ok := m.settings[key]
	if !ok {
		return s, store.ErrNotFound
	}
	return s, nil
}

func (m *memStore) ConfigList(context.Context, string, string) ([]store.ConfigItem, error) {
	return nil, nil
}

func (m *memStore) put(ns, doc string) int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	key := quota.Key(ns)
	s := m.settings[key]
	m.settings[key] = store.Setting{Key: key, Value: []byte(doc), Revision: s.Revision + 1}
	return s.Revision + 1
}

func (m *memStore) readCount() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.reads
}

type verified struct {
	ns  string
	rev int64
	err error
}

// signalCache is the node's cache, telling the test each broadcast it was
// handed.
type signalCache struct {
	*cachebust.Cache
	quota  chan verified
	config chan string
}

func (c *signalCache) InvalidateVerified(ctx context.Context, ns string, rev int64) error {
	err := c.Cache.InvalidateVerified(ctx, ns, rev)
	c.quota <- verified{ns, rev, err}
	return err
}

func (c *signalCache) InvalidateConfig(ns string) {
	c.Cache.InvalidateConfig(ns)
	c.config <- ns
}

type forgetter chan string

func (f forgetter) Forget(id string) { f <- id }

type event struct {
	kind            string // dropped, propagation, skipped
	subject, reason string
	d               time.Duration
}

// signalObserver records into the node's real metrics and tells the test.
type signalObserver struct {
	m      *admin.Metrics
	events chan event
}

func (o signalObserver) Propagation(d time.Duration) {
	o.m.Propagation.Propagation(d)
	o.events <- event{kind: "propagation", d: d}
}

func (o signalObserver) PropagationSkipped() {
	o.m.Propagation.PropagationSkipped()
	o.events <- event{kind: "skipped"}
}

func (o signalObserver) BroadcastDropped(subject, reason string) {
	o.m.Propagation.BroadcastDropped(subject, reason)
	o.events <- event{kind: "dropped", subject: subject, reason: reason}
}

type rig struct {
	st      *memStore
	cache   *signalCache
	tokens  forgetter
	obs     signalObserver
	log     *testlog.Buffer
	pub     *nats.Conn
	metrics *admin.Metrics
}

// startRig runs an in-process NATS server, a node's broadcast listeners
// on one connection and a publisher on another.
func startRig(t *testing.T, ttl time.Duration) *rig {
	t.Helper()
	// A 4 MB broadcast must reach the listener, so the server takes it.
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, MaxPayload: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(wait) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	connect := func() *nats.Conn {
		nc, err := nats.Connect(s.ClientURL())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		return nc
	}
	r := &rig{
		st:      &memStore{settings: map[string]store.Setting{}},
		tokens:  make(forgetter, 100),
		log:     &testlog.Buffer{},
		metrics: admin.NewMetrics(),
	}
	r.cache = &signalCache{Cache: cachebust.New(r.st, ttl, nil), quota: make(chan verified, 100), config: make(chan string, 100)}
	r.obs = signalObserver{m: r.metrics, events: make(chan event, 100)}
	nc := connect()
	log := slog.New(slog.NewTextHandler(r.log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	subs, err := bus.SubscribeBroadcasts(nc, r.cache, r.tokens, r.obs, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(subs.Close)
	// The server has the subscriptions once it answered the flush.
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	r.pub = connect()
	return r
}

func (r *rig) publish(t *testing.T, subject string, data []byte) {
	t.Helper()
	if err := r.pub.Publish(subject, data); err != nil {
		t.Fatalf("publish %s: %v", subject, err)
	}
}

func (r *rig) next(t *testing.T) event {
	t.Helper()
	select {
	case ev := <-r.obs.events:
		return ev
	case <-time.After(wait):
		t.Fatal("no word from the listener")
	}
	return event{}
}

func (r *rig) verifiedClaim(t *testing.T) verified {
	t.Helper()
	select {
	case v := <-r.cache.quota:
		return v
	case <-time.After(wait):
		t.Fatal("the quota broadcast did not reach the cache")
	}
	return verified{}
}

// dropped is flexiq_broadcasts_dropped_total{subject,reason}.
func (r *rig) dropped(t *testing.T, subject, reason string) float64 {
	t.Helper()
	return r.metric(t, "flexiq_broadcasts_dropped_total", map[string]string{"subject": subject, "reason": reason})
}

func (r *rig) metric(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := r.metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue next
				}
			}
			// A counter's value, or a histogram's number of observations.
			if h := m.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return m.GetCounter().GetValue()
		}
	}
	return 0
}

// A broadcast that does not decode — bad JSON, no or an invalid namespace,
// a revision below 1, a malformed token id, or a body too large to be
// genuine (4 MB) — is dropped and counted, reaches neither the cache nor
// the token cache, and is logged without its body, once per subject and
// reason.
func TestBroadcastsThatDoNotDecodeAreDroppedCountedAndNotLoggedWhole(t *testing.T) {
	r := startRig(t, time.Hour)
	const marker = "GARBAGE-MARKER"
	huge := bytes.Repeat([]byte(marker), (4<<20)/len(marker))
	cases := []struct {
		subject string
		body    []byte
		reason  string
	}{
		{api.SubjectQuotaChanged, []byte("not json " + marker), bus.DropMalformed},
		{api.SubjectQuotaChanged, []byte(`{"namespace":"acme","revision":"` + marker + `"}`), bus.DropMalformed},
		{api.SubjectQuotaChanged, huge, bus.DropOversized},
		{api.SubjectQuotaChanged, []byte(`{"namespace":"` + marker + `\u0007","revision":1}`), bus.DropInvalidNamespace},
		{api.SubjectQuotaChanged, []byte(`{"namespace":"","revision":1}`), bus.DropInvalidNamespace},
		{api.SubjectQuotaChanged, []byte(`{"revision":1}`), bus.DropInvalidNamespace},
		{api.SubjectQuotaChanged, []byte(`{"namespace":"` + strings.Repeat("n", quota.MaxNamespaceBytes+1) + `","revision":1}`), bus.DropInvalidNamespace},
		{api.SubjectQuotaChanged, []byte(`{"namespace":"acme","revision":-1}`), bus.DropInvalidRevision},
		{api.SubjectQuotaChanged, []byte(`{"namespace":"acme"}`), bus.DropInvalidRevision},
		{api.SubjectConfigChanged, []byte(marker), bus.DropMalformed},
		{api.SubjectConfigChanged, huge, bus.DropOversized},
		{api.SubjectConfigChanged, []byte(`{"namespace":"","kind":"queue"}`), bus.DropInvalidNamespace},
		{api.SubjectTokenRevoked, huge, bus.DropOversized},
		{api.SubjectTokenRevoked, []byte(""), bus.DropInvalidTokenID},
		{api.SubjectTokenRevoked, []byte("tok_" + marker + "\n"), bus.DropInvalidTokenID},
		{api.SubjectTokenRevoked, []byte("../" + marker), bus.DropInvalidTokenID},
		{api.SubjectTokenRevoked, []byte("tok_" + strings.Repeat("a", 61)), bus.DropInvalidTokenID},
	}
	want := map[[2]string]float64{}
	for _, tc := range cases {
		r.publish(t, tc.subject, tc.body)
		ev := r.next(t)
		if ev.kind != "dropped" || ev.subject != tc.subject || ev.reason != tc.reason {
			t.Fatalf("%s %.60q: listener did %+v, want dropped for %s", tc.subject, tc.body, ev, tc.reason)
		}
		want[[2]string{tc.subject, tc.reason}]++
	}
	// Each was dropped before anything acted on it.
	select {
	case v := <-r.cache.quota:
		t.Fatalf("a dropped quota broadcast reached the cache: %+v", v)
	case ns := <-r.cache.config:
		t.Fatalf("a dropped config broadcast reached the cache: %q", ns)
	case id := <-r.tokens:
		t.Fatalf("a dropped revocation reached the token cache: %q", id)
	default:
	}
	for k, n := range want {
		if got := r.dropped(t, k[0], k[1]); got != n {
			t.Errorf("flexiq_broadcasts_dropped_total{subject=%q,reason=%q} = %v, want %v", k[0], k[1], got, n)
		}
	}
	out := r.log.String()
	if strings.Contains(out, marker) {
		t.Fatalf("the log quotes a dropped body:\n%.2000s", out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d log lines for %d kinds of drop, want one each:\n%s", len(lines), len(want), out)
	}
	for _, l := range lines {
		if len(l) > 300 || !strings.Contains(l, "dropped a broadcast") {
			t.Fatalf("log line %q: want a short line naming subject and reason", l)
		}
	}
}

// A quota broadcast claiming a revision the store does not hold (2^63-1)
// is dropped, counted, and leaves the namespace's cached copy trusted; a
// genuine one still invalidates at once (the TTL is an hour, so only the
// broadcast can bring the change).
func TestForgedRevisionIsDroppedAndGenuineOneStillInvalidates(t *testing.T) {
	r := startRig(t, time.Hour)
	ctx := context.Background()
	r.st.put("acme", `{"max_pending":1}`)
	if s := r.cache.Get(ctx, "acme", time.Now()); s.Revision != 1 {
		t.Fatalf("first read: revision %d", s.Revision)
	}
	r.publish(t, api.SubjectQuotaChanged, fmt.Appendf(nil, `{"namespace":"acme","revision":%d,"at":%d}`, int64(math.MaxInt64), time.Now().UnixNano()))
	if v := r.verifiedClaim(t); !errors.Is(v.err, cachebust.ErrRevisionNotHeld) {
		t.Fatalf("forged revision: cache said %v, want ErrRevisionNotHeld", v.err)
	}
	if ev := r.next(t); ev.kind != "dropped" || ev.reason != bus.DropRevisionNotHeld {
		t.Fatalf("forged revision: listener did %+v, want dropped for %s", ev, bus.DropRevisionNotHeld)
	}
	if got := r.dropped(t, api.SubjectQuotaChanged, bus.DropRevisionNotHeld); got != 1 {
		t.Fatalf("flexiq_broadcasts_dropped_total{reason=revision_not_held} = %v, want 1", got)
	}
	reads := r.st.readCount()
	for range 3 {
		r.cache.Get(ctx, "acme", time.Now())
	}
	if n := r.st.readCount() - reads; n != 0 {
		t.Fatalf("%d store reads after a forged broadcast: the cached copy is no longer trusted", n)
	}
	if h := r.metric(t, "flexiq_quota_propagation_seconds", nil); h != 0 {
		t.Fatalf("a dropped broadcast was timed (%v observations)", h)
	}

	rev := r.st.put("acme", `{"max_pending":2}`)
	if err := (bus.Publisher{NC: r.pub}).QuotaChanged("acme", rev, time.Now()); err != nil {
		t.Fatal(err)
	}
	if v := r.verifiedClaim(t); v.err != nil || v.ns != "acme" || v.rev != rev {
		t.Fatalf("genuine broadcast: %+v", v)
	}
	if s := r.cache.Get(ctx, "acme", time.Now()); s.Revision != rev || *s.Quota.MaxPending != 2 {
		t.Fatalf("after the genuine broadcast: revision %d, want %d", s.Revision, rev)
	}
	if ev := r.next(t); ev.kind != "propagation" || ev.d < 0 || ev.d > time.Hour {
		t.Fatalf("genuine broadcast: listener did %+v, want its delay recorded", ev)
	}
}

// The sender's "at" is its own clock's word: a delay that is negative
// (its clock ahead, or forged), beyond the cache TTL, or not given is not
// recorded but counted as skipped; the change itself still applies.
func TestPropagationIsTimedOnlyWithinZeroAndTheTTL(t *testing.T) {
	ttl := time.Minute
	r := startRig(t, ttl)
	rev := r.st.put("acme", `{"max_pending":1}`)
	for _, tc := range []struct {
		name  string
		at    int64
		timed bool
	}{
		{"future", time.Now().Add(time.Hour).UnixNano(), false},
		{"far future", math.MaxInt64, false},
		{"older than the TTL", time.Now().Add(-2 * ttl).UnixNano(), false},
		{"before 1970", -1, false},
		{"not given", 0, false},
		{"now", time.Now().UnixNano(), true},
	} {
		r.publish(t, api.SubjectQuotaChanged, fmt.Appendf(nil, `{"namespace":"acme","revision":%d,"at":%d}`, rev, tc.at))
		if v := r.verifiedClaim(t); v.err != nil {
			t.Fatalf("%s: a genuine revision was refused: %v", tc.name, v.err)
		}
		ev := r.next(t)
		switch {
		case tc.timed && (ev.kind != "propagation" || ev.d < 0 || ev.d > ttl):
			t.Fatalf("%s: listener did %+v, want a delay in [0, %v]", tc.name, ev, ttl)
		case !tc.timed && ev.kind != "skipped":
			t.Fatalf("%s: listener did %+v, want the delay skipped", tc.name, ev)
		}
	}
	if n := r.metric(t, "flexiq_quota_propagation_skipped_total", nil); n != 5 {
		t.Fatalf("flexiq_quota_propagation_skipped_total = %v, want 5", n)
	}
	if n := r.metric(t, "flexiq_quota_propagation_seconds", nil); n != 1 {
		t.Fatalf("flexiq_quota_propagation_seconds has %v observations, want 1", n)
	}
}

// Genuine configuration and revocation broadcasts still get through.
func TestGenuineConfigAndRevocationBroadcastsApply(t *testing.T) {
	r := startRig(t, time.Hour)
	p := bus.Publisher{NC: r.pub}
	if err := p.ConfigChanged("acme", store.KindQueue); err != nil {
		t.Fatal(err)
	}
	select {
	case ns := <-r.cache.config:
		if ns != "acme" {
			t.Fatalf("config broadcast invalidated %q", ns)
		}
	case <-time.After(wait):
		t.Fatal("the config broadcast did not reach the cache")
	}
	const id = "tok_0123456789abcdef"
	if err := p.TokenRevoked(id); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-r.tokens:
		if got != id {
			t.Fatalf("revocation forgot %q", got)
		}
	case <-time.After(wait):
		t.Fatal("the revocation did not reach the token cache")
	}
}
