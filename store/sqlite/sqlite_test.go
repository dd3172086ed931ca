package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

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

// Migration 4 turns the run_at of jobs written before it from Unix
// nanoseconds into microseconds, flooring as UnixMicro does, and leaves
// the other times alone.
func TestMigrationMovesRunAtToMicroseconds(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flexiq.db")
	s, err := sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	// Roll the database back to before migration 4, with two jobs as a
	// node of that version wrote them.
	db, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	created := time.Date(2026, 1, 1, 0, 0, 0, 123456789, time.UTC)
	runAts := map[string]time.Time{
		"later":  time.Date(2026, 1, 2, 3, 4, 5, 678901234, time.UTC),
		"before": time.Date(1969, 12, 31, 23, 59, 59, 999999500, time.UTC), // floors to ...999999
	}
	for id, at := range runAts {
		if _, err := db.ExecContext(t.Context(), `INSERT INTO jobs (namespace, id, queue, task, run_at, status, created_at)
			VALUES ('ns', ?, 'q', 't', ?, 4, ?)`, id, at.UnixNano(), created.UnixNano()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.ExecContext(t.Context(), `DELETE FROM schema_migrations WHERE version = 4`); err != nil {
		t.Fatal(err)
	}
	s, err = sqlite.Open(t.Context(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for id, at := range runAts {
		j, err := s.JobGet(t.Context(), "ns", id)
		if err != nil {
			t.Fatal(err)
		}
		if want := at.Truncate(time.Microsecond); !j.RunAt.Equal(want) || !j.CreatedAt.Equal(created) {
			t.Errorf("%s: run_at %v, created_at %v; want %v, %v", id, j.RunAt, j.CreatedAt, want, created)
		}
	}
}
