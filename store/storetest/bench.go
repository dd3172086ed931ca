package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/flexiq/flexiq/store"
)

// The benchmarks every backend runs, so their figures compare: a backend's
// test file calls them with its Factory, e.g.
//
//	func BenchmarkJobEnqueueMany(b *testing.B) { storetest.BenchEnqueueMany(b, factory) }

// benchIDs makes time-ordered ids the way the node does (UUIDv7-like), so
// inserts land at the right edge of the id index.
type benchIDs struct{ n uint64 }

func (g *benchIDs) next() string {
	g.n++
	return fmt.Sprintf("0193a000-0000-7000-8000-%012x", g.n)
}

// BenchEnqueueMany enqueues batches of 1, 100 and 1000 plain jobs, one
// call a transaction; keyed gives every job a unique key (the per-job path).
func BenchEnqueueMany(b *testing.B, newStore Factory, keyed bool) {
	sizes := []int{1, 100, 1000}
	if keyed {
		sizes = sizes[:2]
	}
	for _, size := range sizes {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			s := newStore(b, nil)
			ctx := b.Context()
			ids := &benchIDs{}
			now := time.Now()
			payload := []byte(`{"to":"someone@example.com","n":1}`)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				jobs := make([]store.NewJob, size)
				for k := range jobs {
					id := ids.next()
					jobs[k] = store.NewJob{ID: id, Generated: true, Queue: "emails", Task: "send", Payload: payload, RunAt: now}
					if keyed {
						jobs[k].UniqueKey = "u-" + id
					}
				}
				if _, err := s.JobEnqueueMany(ctx, store.JobEnqueueManyParams{Namespace: "bench", Now: now, Calls: []store.EnqueueCall{{Jobs: jobs}}}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "jobs/s")
		})
	}
}

// BenchClaimAck claims and acks jobs, one claim a time or 32 claims of one
// job in a group (as a namespace actor does under load).
func BenchClaimAck(b *testing.B, newStore Factory) {
	for _, size := range []int{1, 4, 32, 128, 512} {
		b.Run(fmt.Sprintf("group=%d", size), func(b *testing.B) {
			s := newStore(b, nil)
			ctx := b.Context()
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
