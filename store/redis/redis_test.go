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
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs the store suite; the subtests share one database,
// each under a key prefix of its own.
func TestConformance(t *testing.T) {
	url := testserver.Redis(t)
	storetest.Exercise(t, func(t testing.TB, faults store.Faults) store.Store {
		return openPrefixed(t, url, faults)
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

// benchIDs makes time-ordered ids the way the node does (UUIDv7-like).
type benchIDs struct{ n uint64 }

func (g *benchIDs) next() string {
	g.n++
	return fmt.Sprintf("0193a000-0000-7000-8000-%012x", g.n)
}

func BenchmarkJobEnqueueMany(b *testing.B) {
	url := testserver.Redis(b)
	for _, size := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			s := openPrefixed(b, url, nil)
			ctx := context.Background()
			ids := &benchIDs{}
			now := time.Now()
			payload := []byte(`{"to":"someone@example.com","n":1}`)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				jobs := make([]store.NewJob, size)
				for k := range jobs {
					jobs[k] = store.NewJob{ID: ids.next(), Generated: true, Queue: "emails", Task: "send", Payload: payload, RunAt: now}
				}
				if _, err := s.JobEnqueueMany(ctx, store.JobEnqueueManyParams{Namespace: "bench", Now: now, Calls: []store.EnqueueCall{{Jobs: jobs}}}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

func BenchmarkJobClaimAck(b *testing.B) {
	url := testserver.Redis(b)
	for _, size := range []int{1, 32} {
		b.Run(fmt.Sprintf("group=%d", size), func(b *testing.B) {
			s := openPrefixed(b, url, nil)
			ctx := context.Background()
			ids := &benchIDs{}
			now := time.Now()
			total := b.N * size
			for done := 0; done < total; done += 1000 {
				n := min(1000, total-done)
				jobs := make([]store.NewJob, n)
				for k := range jobs {
					jobs[k] = store.NewJob{ID: ids.next(), Generated: true, Queue: "q", Task: "t", RunAt: now}
				}
				if _, err := s.JobEnqueueMany(ctx, store.JobEnqueueManyParams{Namespace: "bench", Now: now, Calls: []store.EnqueueCall{{Jobs: jobs}}}); err != nil {
					b.Fatal(err)
				}
			}
			claims := make([]store.ClaimSpec, size)
			for k := range claims {
				claims[k] = store.ClaimSpec{Queues: []string{"q"}, Max: 1, LeaseUntil: now.Add(time.Minute), Worker: "w"}
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				got, err := s.JobClaimMany(ctx, store.JobClaimManyParams{Namespace: "bench", Now: now, Claims: claims})
				if err != nil {
					b.Fatal(err)
				}
				var ups []store.JobUpdate
				for _, js := range got {
					for _, j := range js {
						ups = append(ups, store.JobUpdate{ID: j.ID, Attempt: j.Attempt, Kind: store.UpdateComplete})
					}
				}
				if len(ups) != size {
					b.Fatalf("claimed %d jobs, want %d", len(ups), size)
				}
				if _, err := s.JobUpdateMany(ctx, store.JobUpdateManyParams{Namespace: "bench", Now: now, Updates: ups}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}
