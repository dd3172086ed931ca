package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/flexiq/flexiq/internal/testserver"
	"github.com/flexiq/flexiq/store"
	"github.com/flexiq/flexiq/store/postgres"
)

// benchIDs makes time-ordered ids the way the node does (UUIDv7-like), so
// inserts land at the right edge of the id index.
type benchIDs struct{ n uint64 }

func (g *benchIDs) next() string {
	g.n++
	return fmt.Sprintf("0193a000-0000-7000-8000-%012x", g.n)
}

func openBench(b *testing.B) *postgres.Store {
	b.Helper()
	return open(b, testserver.Postgres(b), postgres.Options{})
}

func BenchmarkJobEnqueueMany(b *testing.B) {
	for _, size := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			s := openBench(b)
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

// BenchmarkJobEnqueueManyKeyed enqueues jobs that each carry a unique key:
// one statement per job, all of a group in one pipelined batch.
func BenchmarkJobEnqueueManyKeyed(b *testing.B) {
	for _, size := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			s := openBench(b)
			ctx := context.Background()
			ids := &benchIDs{}
			now := time.Now()
			payload := []byte(`{"to":"someone@example.com","n":1}`)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				jobs := make([]store.NewJob, size)
				for k := range jobs {
					id := ids.next()
					jobs[k] = store.NewJob{ID: id, Generated: true, Queue: "emails", Task: "send", Payload: payload, RunAt: now, UniqueKey: "u-" + id}
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
	for _, size := range []int{1, 32} {
		b.Run(fmt.Sprintf("group=%d", size), func(b *testing.B) {
			s := openBench(b)
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
