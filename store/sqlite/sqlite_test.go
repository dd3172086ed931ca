package sqlite_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/flexiq/flexiq/store"
	"github.com/flexiq/flexiq/store/sqlite"
	"github.com/flexiq/flexiq/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Exercise(t, func(t testing.TB, faults store.Faults) store.Store {
		s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "flexiq.db"), sqlite.Options{Faults: faults})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}

func TestConformanceInMemory(t *testing.T) {
	storetest.Exercise(t, func(t testing.TB, faults store.Faults) store.Store {
		s, err := sqlite.Open(context.Background(), ":memory:", sqlite.Options{Faults: faults})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	})
}
