package cachebust

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
)

// fakeStore is a settings map with a read counter; the cache only reads.
type fakeStore struct {
	settings map[string]store.Setting
	reads    int
	fail     error
}

func (f *fakeStore) SettingGet(_ context.Context, key string) (store.Setting, error) {
	f.reads++
	if f.fail != nil {
		return store.Setting{}, f.fail
	}
	s, ok := f.settings[key]
	if !ok {
		return s, store.ErrNotFound
	}
	return s, nil
}

func (f *fakeStore) ConfigList(context.Context, string, string) ([]store.ConfigItem, error) {
	return nil, f.fail
}

func (f *fakeStore) put(ns, doc string) {
	key := quota.Key(ns)
	s := f.settings[key]
	f.settings[key] = store.Setting{Key: key, Value: []byte(doc), Revision: s.Revision + 1}
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestCacheHonoursTTLAndInvalidation(t *testing.T) {
	st := &fakeStore{settings: map[string]store.Setting{}}
	c := New(st, 2*time.Second, nil)
	st.put("acme", `{"max_pending":1}`)
	if s := c.Get(context.Background(), "acme", t0); s.Revision != 1 || *s.Quota.MaxPending != 1 {
		t.Fatalf("first read %+v", s)
	}
	st.put("acme", `{"max_pending":2}`)
	// Within the TTL and without a broadcast the cached copy is used.
	if s := c.Get(context.Background(), "acme", t0.Add(1999*time.Millisecond)); s.Revision != 1 {
		t.Fatalf("within TTL got revision %d, want the cached 1", s.Revision)
	}
	// At the TTL it is read again.
	if s := c.Get(context.Background(), "acme", t0.Add(2*time.Second)); s.Revision != 2 {
		t.Fatalf("at TTL got revision %d, want 2", s.Revision)
	}
	// A broadcast drops it at once.
	st.put("acme", `{"max_pending":3}`)
	c.Invalidate("acme", 3)
	if s := c.Get(context.Background(), "acme", t0.Add(2*time.Second)); s.Revision != 3 {
		t.Fatalf("after invalidation got revision %d, want 3", s.Revision)
	}
	// A broadcast of an older revision changes nothing.
	reads := st.reads
	c.Invalidate("acme", 2)
	c.Get(context.Background(), "acme", t0.Add(2*time.Second))
	if st.reads != reads {
		t.Fatal("an old revision's broadcast caused a read")
	}
}

func TestKnownRevisionAheadOfTheReadIsNotTrusted(t *testing.T) {
	st := &fakeStore{settings: map[string]store.Setting{}}
	c := New(st, time.Hour, nil)
	st.put("acme", `{"max_pending":1}`)
	c.Get(context.Background(), "acme", t0)
	// This node wrote revision 5, but this read still sees 1 (a lagging
	// replica, say): the copy is not trusted, so every Get reads again
	// until the store catches up.
	c.Invalidate("acme", 5)
	c.Get(context.Background(), "acme", t0)
	reads := st.reads
	c.Get(context.Background(), "acme", t0)
	if st.reads == reads {
		t.Fatal("a copy older than an announced revision was trusted")
	}
}

func TestUnreadableDocumentFailsClosedAndStoreErrorIsUnavailable(t *testing.T) {
	st := &fakeStore{settings: map[string]store.Setting{}}
	c := New(st, time.Hour, nil)
	st.put("acme", `{"max_pending":"many"}`)
	s := c.Get(context.Background(), "acme", t0)
	if s.Err == nil || s.Err.Code != api.CodeFailedPrecondition || s.Err.Reason != api.ReasonQuotaUnreadable {
		t.Fatalf("corrupt document: %+v", s.Err)
	}
	st.fail = errors.New("connection refused")
	s = c.Get(context.Background(), "globex", t0)
	if s.Err == nil || s.Err.Code != api.CodeUnavailable {
		t.Fatalf("store down: %+v", s.Err)
	}
	// Store errors are not cached: the next Get tries again.
	st.fail = nil
	if s = c.Get(context.Background(), "globex", t0); s.Err != nil {
		t.Fatalf("after the store came back: %+v", s.Err)
	}
}

// A broadcast claiming a revision the store does not hold (2^63-1) is
// refused and leaves the copy trusted: believed, it would make every Get
// of the namespace read the store for good.
func TestForgedRevisionDoesNotPoisonTheCache(t *testing.T) {
	st := &fakeStore{settings: map[string]store.Setting{}}
	c := New(st, time.Hour, nil)
	st.put("acme", `{"max_pending":1}`)
	c.Get(context.Background(), "acme", t0)
	for _, rev := range []int64{math.MaxInt64, 2} {
		if err := c.InvalidateVerified(context.Background(), "acme", rev); !errors.Is(err, ErrRevisionNotHeld) {
			t.Fatalf("revision %d, store at 1: err %v, want ErrRevisionNotHeld", rev, err)
		}
	}
	reads := st.reads
	for range 3 {
		if s := c.Get(context.Background(), "acme", t0); s.Revision != 1 || *s.Quota.MaxPending != 1 {
			t.Fatalf("after the forged broadcasts got %+v", s)
		}
	}
	if st.reads != reads {
		t.Fatalf("%d store reads after a forged broadcast: the copy is no longer trusted", st.reads-reads)
	}
	// The forged claims left nothing behind: once the store is written,
	// the genuine revision 2 is verified and taken at once.
	st.put("acme", `{"max_pending":2}`)
	if err := c.InvalidateVerified(context.Background(), "acme", 2); err != nil {
		t.Fatal(err)
	}
	if s := c.Get(context.Background(), "acme", t0); s.Revision != 2 || *s.Quota.MaxPending != 2 {
		t.Fatalf("after the genuine broadcast got %+v", s)
	}
	reads = st.reads
	c.Get(context.Background(), "acme", t0)
	if st.reads != reads {
		t.Fatal("the copy at the verified revision is not trusted")
	}
}

// A genuine broadcast takes effect at once, long before the TTL, and the
// verified revision is remembered: a copy read older than it (a load that
// raced with the write) is not trusted.
func TestVerifiedRevisionInvalidatesAtOnceAndIsRemembered(t *testing.T) {
	st := &fakeStore{settings: map[string]store.Setting{}}
	c := New(st, time.Hour, nil)
	st.put("acme", `{"max_pending":1}`)
	c.Get(context.Background(), "acme", t0)
	st.put("acme", `{"max_pending":2}`)
	if err := c.InvalidateVerified(context.Background(), "acme", 2); err != nil {
		t.Fatal(err)
	}
	if s := c.Get(context.Background(), "acme", t0); s.Revision != 2 {
		t.Fatalf("after a verified broadcast got revision %d, want 2", s.Revision)
	}
	c.mu.Lock()
	minRev := c.entries["acme"].minRev
	c.mu.Unlock()
	if minRev != 2 {
		t.Fatalf("minRev %d, want the verified 2", minRev)
	}
}

// Claims that cannot change anything cost no store read: a namespace not
// cached, or a revision the copy already has.
func TestMootBroadcastsReadNothing(t *testing.T) {
	st := &fakeStore{settings: map[string]store.Setting{}}
	c := New(st, time.Hour, nil)
	st.put("acme", `{"max_pending":1}`)
	st.put("acme", `{"max_pending":1}`)
	c.Get(context.Background(), "acme", t0)
	reads := st.reads
	for _, tc := range []struct {
		ns  string
		rev int64
	}{{"globex", math.MaxInt64}, {"acme", 2}, {"acme", 1}} {
		if err := c.InvalidateVerified(context.Background(), tc.ns, tc.rev); err != nil {
			t.Fatalf("%s@%d: %v", tc.ns, tc.rev, err)
		}
	}
	if st.reads != reads {
		t.Fatalf("%d store reads for broadcasts that change nothing", st.reads-reads)
	}
}

// With the store down the claim cannot be checked: the copy is dropped
// (reading again is always safe) but the revision is not remembered, so
// once the store is back its copy is trusted again.
func TestUnverifiableClaimDropsTheCopyButIsNotRemembered(t *testing.T) {
	st := &fakeStore{settings: map[string]store.Setting{}}
	c := New(st, time.Hour, nil)
	st.put("acme", `{"max_pending":1}`)
	c.Get(context.Background(), "acme", t0)
	st.fail = errors.New("connection refused")
	err := c.InvalidateVerified(context.Background(), "acme", math.MaxInt64)
	if err == nil || errors.Is(err, ErrRevisionNotHeld) {
		t.Fatalf("store down: err %v, want the store's error", err)
	}
	st.fail = nil
	reads := st.reads
	c.Get(context.Background(), "acme", t0)
	if st.reads == reads {
		t.Fatal("the copy was kept although the claim could not be checked")
	}
	reads = st.reads
	c.Get(context.Background(), "acme", t0)
	if st.reads != reads {
		t.Fatal("an unverified revision was remembered: the copy is no longer trusted")
	}
}
