package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

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
