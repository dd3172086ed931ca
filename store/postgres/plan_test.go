package postgres

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flexiq/flexiq/internal/testserver"
	"github.com/flexiq/flexiq/store"
)

// planConn opens a store on a fresh database holding 20 000 pending jobs
// of one queue of namespace ns, and returns a connection of its pool;
// both are closed when t ends.
func planConn(t *testing.T, ns string) *pgxpool.Conn {
	t.Helper()
	ctx := t.Context()
	s, err := Open(ctx, testserver.Postgres(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for done := 0; done < 20000; done += 1000 {
		jobs := make([]store.NewJob, 1000)
		for k := range jobs {
			jobs[k] = store.NewJob{ID: fmt.Sprintf("j%05d", done+k), Generated: true, Queue: "q", Task: "t", RunAt: now}
		}
		if _, err := s.JobEnqueueMany(ctx, store.JobEnqueueManyParams{Namespace: ns, Now: now, Calls: []store.EnqueueCall{{Jobs: jobs}}}); err != nil {
			t.Fatal(err)
		}
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	return conn
}

// TestGenericPlans checks the plans the hot statements get once pgx's
// cached statements go generic, from statistics that no longer fit: taken
// while one queue held every job, none running, scheduled or dead. Each
// must walk its indexes (no sequential or bitmap scan, no sort, no hash
// join over a whole partial index), or a claim or an ack would read a
// whole queue once the statistics are stale.
func TestGenericPlans(t *testing.T) {
	ctx := t.Context()
	conn := planConn(t, "ns")
	for _, q := range []string{`ANALYZE jobs`, `SET plan_cache_mode = force_generic_plan`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	defer conn.Exec(ctx, `RESET plan_cache_mode`)
	for i, c := range []struct{ name, sql, args string }{
		{"promote", promoteSQL, `'ns', '{q}', 5`},
		{"fetch", fetchSQL, `'ns', 'q', 1, 1, 1, '{}', 5`},
		{"claim", claimSQL, `'{1}', '{1}', '{w}'`},
		{"claim head", claimHeadSQL, `'ns', 'q', '{}', 5, '{1,1,1,1,1}', '{w,w,w,w,w}', 9223372036854775807`},
		{"complete", completeSQL, `'ns', '{a}', '{1}', '{NULL}', 1`},
		{"retry", retrySQL, `'ns', '{a}', '{1}', '{0}', '{1}', '{e}'`},
		{"dead", deadSQL, `'ns', '{a}', '{1}', '{e}', '{t}', 1`},
		{"extend", extendSQL, `'ns', '{a}', '{1}', '{1}'`},
		{"insert keyed", insertKeyedSQL, `'ns', 'x', 'q', 't', NULL, 0, 1, 0, 0, 'uk', 'dk', 1`},
		{"replay", replaySQL, `'ns', 'x', 1, 0`},
		{"replay shed", replayShedSQL, `'ns', 'x', 'e', NULL`},
		{"count", countSQL, `'ns'`},
	} {
		name := fmt.Sprintf("plan_test_%d", i)
		if _, err := conn.Conn().Prepare(ctx, name, c.sql); err != nil {
			t.Fatalf("%s: prepare: %v", c.name, err)
		}
		text := explain(t, conn, c.name, fmt.Sprintf("EXECUTE %s(%s)", name, c.args))
		if c.name == "claim head" {
			// Its window numbers the jobs LIMIT kept, in a sort of at
			// most a group's rows above the scan; a sort below LIMIT
			// would read the whole queue.
			limit := strings.Index(text, "Limit")
			if limit < 0 || strings.Contains(text[limit:], "Sort") || !strings.Contains(text[limit:], "Index Scan using jobs_claim") {
				t.Errorf("%s: generic plan does not stop its ordered scan of jobs_claim at LIMIT:\n%s", c.name, text)
			}
		}
		for _, bad := range []string{"Seq Scan", "Bitmap", "Sort", "Hash Join"} {
			if bad == "Sort" && c.name == "claim head" {
				continue
			}
			if strings.Contains(text, bad) {
				t.Errorf("%s: generic plan has a %s:\n%s", c.name, bad, text)
			}
		}
	}
}

// TestUpdatesLookEachJobUp checks that the updates of a group look each
// job up by its key whatever the statistics say. Taken while a namespace
// had no job (a new tenant, a fresh database), they let a plan walk all
// of the namespace's jobs and compare each with every entry: seconds for
// an ack of 500 jobs once tens of thousands run.
func TestUpdatesLookEachJobUp(t *testing.T) {
	ctx := t.Context()
	conn := planConn(t, "other")
	if _, err := conn.Exec(ctx, `ANALYZE jobs`); err != nil { // namespace ns: none
		t.Fatal(err)
	}
	ids := make([]string, 500)
	for i := range ids {
		ids[i] = fmt.Sprintf("j%03d", i)
	}
	arr := "'{" + strings.Join(ids, ",") + "}'"
	ones := "'{" + strings.Repeat("1,", 499) + "1}'"
	for _, c := range []struct{ name, sql, args string }{
		{"complete", completeSQL, "'ns', " + arr + ", " + ones + ", NULL, 1"},
		{"retry", retrySQL, "'ns', " + arr + ", " + ones + ", " + ones + ", " + ones + ", NULL"},
		{"dead", deadSQL, "'ns', " + arr + ", " + ones + ", NULL, NULL, 1"},
		{"release", releaseSQL, "'ns', " + arr + ", " + ones + ", 1"},
		{"extend", extendSQL, "'ns', " + arr + ", " + ones + ", " + ones},
	} {
		// The parameters as literals: a custom plan, with the statistics'
		// estimate for this namespace (none of its jobs).
		q := c.sql
		for i, a := range splitArgs(c.args) {
			q = strings.ReplaceAll(q, fmt.Sprintf("$%d", i+1), a)
		}
		text := explain(t, conn, c.name, q)
		if !strings.Contains(text, "Index Cond: ((namespace = 'ns'::text) AND (id = u.uid))") || strings.Contains(text, "Join Filter") {
			t.Errorf("%s: does not look each entry's job up by its key:\n%s", c.name, text)
		}
	}
}

// explain returns the plan of query, one line a node.
func explain(t *testing.T, conn *pgxpool.Conn, what, query string) string {
	t.Helper()
	rows, err := conn.Query(t.Context(), "EXPLAIN "+query)
	if err != nil {
		t.Fatalf("%s: explain: %v", what, err)
	}
	plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("%s: explain: %v", what, err)
	}
	return strings.Join(plan, "\n")
}

// splitArgs splits a list of SQL literals at its top-level commas.
func splitArgs(s string) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\'':
			quoted = !quoted
		case s[i] == ',' && !quoted:
			out = append(out, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}
