package cachebust

import (
	"context"
	"errors"
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

func TestBroadcastAheadOfTheStoreIsNotTrusted(t *testing.T) {
	st := &fakeStore{settings: map[string]store.Setting{}}
	c := New(st, time.Hour, nil)
	st.put("acme", `{"max_pending":1}`)
	c.Get(context.Background(), "acme", t0)
	// A broadcast says revision 5 exists, but this read still sees 1 (a
	// lagging replica, say): the copy is not trusted, so every Get reads
	// again until the store catches up.
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
