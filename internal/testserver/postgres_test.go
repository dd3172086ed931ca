package testserver_test

import (
	"testing"

	"github.com/flexiq/flexiq/internal/testserver"
	"github.com/jackc/pgx/v5"
)

func TestMain(m *testing.M) { testserver.Main(m) }

// TestPostgres checks that each test gets a database of its own (or, on a
// server where it may not create databases, a schema of its own), empty
// and writable, and that tests can use theirs in parallel.
func TestPostgres(t *testing.T) {
	for _, name := range []string{"a", "b", "c"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			conn, err := pgx.Connect(t.Context(), testserver.Postgres(t))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(t.Context())
			var n int
			if err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_tables WHERE schemaname = ANY (current_schemas(false))`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 0 {
				t.Errorf("fresh database has %d tables", n)
			}
			if _, err := conn.Exec(t.Context(), `CREATE TABLE mine (name text PRIMARY KEY)`); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(t.Context(), `INSERT INTO mine VALUES ($1)`, name); err != nil {
				t.Fatal(err)
			}
		})
	}
}
