package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/flexiq/flexiq/store"
	"github.com/flexiq/flexiq/store/sqlite"
	"github.com/flexiq/flexiq/store/storetest"
)

func benchStore(t testing.TB, faults store.Faults) store.Store {
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "bench.db"), sqlite.Options{Faults: faults})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func BenchmarkJobEnqueueMany(b *testing.B)      { storetest.BenchEnqueueMany(b, benchStore, false) }
func BenchmarkJobEnqueueManyKeyed(b *testing.B) { storetest.BenchEnqueueMany(b, benchStore, true) }
func BenchmarkJobClaimAck(b *testing.B)         { storetest.BenchClaimAck(b, benchStore) }

// BenchmarkJobListPage reads the newest 100 jobs of a namespace holding
// 200 000, as GET /v1/jobs does, with a neighbour as large.
func BenchmarkJobListPage(b *testing.B) {
	s := benchStore(b, nil)
	ctx := b.Context()
	now := time.Now()
	for _, ns := range []string{"acme", "neighbour"} {
		for done := 0; done < 200000; done += 1000 {
			jobs := make([]store.NewJob, 1000)
			for k := range jobs {
				jobs[k] = store.NewJob{ID: fmt.Sprintf("j%07d", done+k), Queue: "q", Task: "t", Payload: []byte(`{"n":1}`), RunAt: now}
			}
			if _, err := s.JobEnqueueMany(ctx, store.JobEnqueueManyParams{Namespace: ns, Now: now, Calls: []store.EnqueueCall{{Jobs: jobs}}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		got, err := s.JobList(ctx, store.JobListParams{Namespace: "acme", Limit: 100})
		if err != nil {
			b.Fatal(err)
		}
		if len(got) != 100 || got[0].ID != "j0199999" {
			b.Fatalf("got %d jobs, first %q", len(got), got[0].ID)
		}
	}
}
