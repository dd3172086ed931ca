package redis_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flexiq/flexiq/internal/testserver"
	"github.com/flexiq/flexiq/store"
	redisstore "github.com/flexiq/flexiq/store/redis"
	"github.com/flexiq/flexiq/store/storetest"
)

func TestMain(m *testing.M) { testserver.Main(m) }

// prefixes numbers the key prefixes handed to stores sharing a database.
var prefixes atomic.Int64

// openPrefixed opens a store on url under a prefix no other store of this
// test binary uses.
func openPrefixed(t testing.TB, url string, faults store.Faults) *redisstore.Store {
	t.Helper()
	prefix := fmt.Sprintf("fqt%d:", prefixes.Add(1))
	s, err := redisstore.Open(context.Background(), url, redisstore.Options{Faults: faults, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	s.SetJobFormat(store.JobFormat)
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs the store suite; the subtests share one database,
// each under a key prefix of its own. The stores take turns at the job
// record formats (store.JobFormat), as for a cluster that still has nodes
// of older builds.
func TestConformance(t *testing.T) {
	url := testserver.Redis(t)
	var n atomic.Int64
	storetest.Exercise(t, func(t testing.TB, faults store.Faults) store.Store {
		s := openPrefixed(t, url, faults)
		s.SetJobFormat(int(n.Add(1) % (store.JobFormat + 1)))
		return s
	})
}

// TestDefaultPrefix checks that a store without a prefix uses "fq:" and
// that an empty database reads as an empty store.
func TestDefaultPrefix(t *testing.T) {
	url := testserver.Redis(t)
	s, err := redisstore.Open(t.Context(), url, redisstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := s.JobEnqueueMany(t.Context(), store.JobEnqueueManyParams{Namespace: "ns", Now: now, Calls: []store.EnqueueCall{
		{Jobs: []store.NewJob{{ID: "a", Queue: "q", Task: "t", RunAt: now}}},
	}}); err != nil {
		t.Fatal(err)
	}
	other := openPrefixed(t, url, nil)
	if c, err := other.JobCount(t.Context(), "ns"); err != nil || c != (store.Counts{}) {
		t.Errorf("a store under another prefix counts %+v, %v; want nothing", c, err)
	}
	if c, err := s.JobCount(t.Context(), "ns"); err != nil || c.Pending != 1 {
		t.Errorf("JobCount = %+v, %v; want one pending", c, err)
	}
}

func TestOpenBadURL(t *testing.T) {
	if _, err := redisstore.Open(t.Context(), "postgres://localhost/x", redisstore.Options{}); err == nil {
		t.Error("Open of a postgres:// URL succeeded")
	}
}

func benchStore(t testing.TB, faults store.Faults) store.Store {
	return openPrefixed(t, testserver.Redis(t), faults)
}

func BenchmarkJobEnqueueMany(b *testing.B)      { storetest.BenchEnqueueMany(b, benchStore, false) }
func BenchmarkJobEnqueueManyKeyed(b *testing.B) { storetest.BenchEnqueueMany(b, benchStore, true) }
func BenchmarkJobClaimAck(b *testing.B)         { storetest.BenchClaimAck(b, benchStore) }
