package postgres

import (
	"fmt"
	"math"
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
		{"claim from head", claimFromHeadSQL, `'ns', 'q', 5, '{1,1,1,1,1}', '{w,w,w,w,w}', 0, 1, 1`},
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
		if c.name == "claim from head" && !strings.Contains(text, "(ROW(run_at, seq) >= ROW($7, $8))") {
			// The head bounds the scan, not a filter after it.
			t.Errorf("%s: generic plan does not start its scan at the head:\n%s", c.name, text)
		}
		for _, bad := range []string{"Seq Scan", "Bitmap", "Sort", "Hash Join"} {
			if bad == "Sort" && strings.HasPrefix(c.name, "claim ") && c.name != "claim" {
				continue // above LIMIT: the rows of a group
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

// TestClaimFromHeadSkipsClaimedJobs checks that a claim given its queue's
// head (claimFromHeadSQL) starts its scan there. Until vacuum, the claim
// index keeps an entry for every job claimed, at the queue's start: a
// scan from the start walks them all, one that starts at the head does
// not. Autovacuum is off for the test, so the entries stay.
func TestClaimFromHeadSkipsClaimedJobs(t *testing.T) {
	ctx := t.Context()
	conn := planConn(t, "ns")
	for _, q := range []string{
		`ALTER TABLE jobs SET (autovacuum_enabled = false)`,
		// 15 000 of the queue's 20 000 jobs claimed, as claims leave them.
		`UPDATE jobs SET status = 1, attempt = 1 WHERE seq IN (SELECT seq FROM jobs WHERE namespace = 'ns' AND queue = 'q' AND status = 0 ORDER BY priority DESC, run_at, seq LIMIT 15000)`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	var pri, runAt, seq int64
	if err := conn.QueryRow(ctx, `SELECT priority, run_at, seq FROM jobs WHERE namespace = 'ns' AND queue = 'q' AND status = 0 ORDER BY priority DESC, run_at, seq LIMIT 1`).Scan(&pri, &runAt, &seq); err != nil {
		t.Fatal(err)
	}
	scanned := func(what, sql string, args ...any) int {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx) // EXPLAIN ANALYZE runs the claim
		rows, err := tx.Query(ctx, "EXPLAIN (ANALYZE, BUFFERS) "+sql, args...)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		plan, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		// The buffers of the scans of jobs_claim, from the lines of each
		// node (one never executed has none).
		pages, scans := 0, 0
		for i, line := range plan {
			if strings.Contains(line, "Index Scan using jobs_claim") {
				scans++
				for _, l := range plan[i+1:] {
					if strings.Contains(l, "->") {
						break
					}
					if _, b, ok := strings.Cut(l, "Buffers: shared hit="); ok {
						var n int
						fmt.Sscanf(b, "%d", &n)
						pages += n
						break
					}
				}
			}
		}
		if scans == 0 {
			t.Fatalf("%s: no scan of jobs_claim in\n%s", what, strings.Join(plan, "\n"))
		}
		return pages
	}
	leases, workers := []int64{1, 1, 1, 1, 1}, []string{"w", "w", "w", "w", "w"}
	plain := scanned("from the start", claimHeadSQL, "ns", "q", []string{}, 5, leases, workers, int64(math.MaxInt64))
	head := scanned("from the head", claimFromHeadSQL, "ns", "q", 5, leases, workers, pri, runAt, seq)
	if head > 10 || plain < 50 {
		t.Errorf("a claim of 5 past 15 000 claimed jobs reads %d pages of jobs_claim from the head, %d from the start; want at most 10 and at least 50", head, plain)
	}
}
