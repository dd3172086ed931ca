package postgres_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/internal/testserver"
	"github.com/flexiq/flexiq/store"
	"github.com/flexiq/flexiq/store/postgres"
	"github.com/flexiq/flexiq/store/storetest"
)

func TestMain(m *testing.M) { testserver.Main(m) }

// open opens a store on a fresh database and closes it when t ends.
func open(t testing.TB, url string, opt postgres.Options) *postgres.Store {
	t.Helper()
	s, err := postgres.Open(context.Background(), url, opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Exercise(t, func(t testing.TB, faults store.Faults) store.Store {
		return open(t, testserver.Postgres(t), postgres.Options{Faults: faults})
	})
}

// TestConformanceSchemas runs the suite with every store in a schema of
// its own, all in one database.
func TestConformanceSchemas(t *testing.T) {
	if testing.Short() {
		t.Skip("the suite once more, in schemas")
	}
	url := testserver.Postgres(t)
	var n atomic.Int64
	storetest.Exercise(t, func(t testing.TB, faults store.Faults) store.Store {
		return openSchema(t, url, fmt.Sprintf("flexiq_%d", n.Add(1)), faults)
	})
}

// openSchema opens a store in schema of the database at url, and drops
// the schema after closing the store when t ends. (The database may itself
// be a schema of a shared one: testserver's fallback.)
func openSchema(t testing.TB, url, schema string, faults store.Faults) *postgres.Store {
	t.Helper()
	// Registered first, so it runs after the store's Close.
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	return open(t, url, postgres.Options{Faults: faults, Schema: schema})
}

// TestOpenConcurrently starts several stores on one fresh database at once:
// the migration lock lets exactly one of them create the tables, and every
// one of them works.
func TestOpenConcurrently(t *testing.T) {
	url := testserver.Postgres(t)
	const n = 6
	stores := make([]*postgres.Store, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			stores[i], errs[i] = postgres.Open(t.Context(), url, postgres.Options{})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Open %d: %v", i, err)
		}
		t.Cleanup(func() { stores[i].Close() })
	}
	for i, s := range stores {
		if _, err := s.JobCount(t.Context(), "ns"); err != nil {
			t.Errorf("store %d: JobCount: %v", i, err)
		}
	}
	// Opening again applies nothing and succeeds.
	open(t, url, postgres.Options{})
}

// TestSchemasIsolate opens two stores in two schemas of one database: each
// sees only its own jobs.
func TestSchemasIsolate(t *testing.T) {
	url := testserver.Postgres(t)
	a := openSchema(t, url, fmt.Sprintf("tenant a %d", os.Getpid()), nil)
	b := openSchema(t, url, fmt.Sprintf("tenant_b_%d", os.Getpid()), nil)
	if _, err := a.JobEnqueueMany(t.Context(), store.JobEnqueueManyParams{Namespace: "ns", Calls: []store.EnqueueCall{
		{Jobs: []store.NewJob{{ID: "j", Queue: "q", Task: "t"}}},
	}}); err != nil {
		t.Fatal(err)
	}
	if c, err := a.JobCount(t.Context(), "ns"); err != nil || c.Pending != 1 {
		t.Errorf("schema a: counts %+v, %v; want 1 pending", c, err)
	}
	if c, err := b.JobCount(t.Context(), "ns"); err != nil || c.Pending != 0 {
		t.Errorf("schema b: counts %+v, %v; want none", c, err)
	}
}

// TestConcurrentNodes has two stores on one database (two nodes, while an
// actor moves) race, round after round, to enqueue jobs with one unique
// key and one debounce key, and to write one setting: each key goes to
// exactly one job (the others deduplicated or coalesced into it), and
// every setting write gets a revision of its own.
func TestConcurrentNodes(t *testing.T) {
	url := testserver.Postgres(t)
	nodes := []*postgres.Store{open(t, url, postgres.Options{}), open(t, url, postgres.Options{})}
	const perNode, rounds = 6, 5
	type result struct {
		res []api.EnqueueResult
		rev int64
		err error
	}
	revs := map[int64]bool{}
	for round := range rounds {
		results := make(chan result, 2*perNode)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for n, s := range nodes {
			for i := range perNode {
				wg.Go(func() {
					<-start
					id := fmt.Sprintf("r%d-n%d-%d", round, n, i)
					res, err := s.JobEnqueueMany(t.Context(), store.JobEnqueueManyParams{Namespace: "ns", Calls: []store.EnqueueCall{{Jobs: []store.NewJob{
						{ID: id + "-u", Queue: "q", Task: "t", UniqueKey: fmt.Sprintf("uk%d", round)},
						{ID: id + "-d", Queue: "q", Task: "t", DebounceKey: fmt.Sprintf("dk%d", round), Payload: []byte(`"` + id + `"`)},
					}}}})
					if err != nil {
						results <- result{err: err}
						return
					}
					st, err := s.SettingPut(t.Context(), store.SettingPutParams{Key: "k", Value: []byte(`"` + id + `"`),
						Audit: &store.AuditRecord{Actor: id, Action: "set", Namespace: "ns"}})
					results <- result{res: res[0], rev: st.Revision, err: err}
				})
			}
		}
		close(start)
		wg.Wait()
		close(results)
		outcomes := map[string]int{}
		holders := map[string]bool{}
		for r := range results {
			if r.err != nil {
				t.Fatalf("round %d: concurrent write: %v", round, r.err)
			}
			outcomes["u "+string(r.res[0].Outcome)]++
			outcomes["d "+string(r.res[1].Outcome)]++
			holders["u "+r.res[0].ID] = true
			holders["d "+r.res[1].ID] = true
			revs[r.rev] = true
		}
		want := map[string]int{"u enqueued": 1, "u deduplicated": 2*perNode - 1, "d enqueued": 1, "d coalesced": 2*perNode - 1}
		if fmt.Sprint(outcomes) != fmt.Sprint(want) {
			t.Errorf("round %d: outcomes %v, want %v", round, outcomes, want)
		}
		if len(holders) != 2 {
			t.Errorf("round %d: keys held by %v, want one job per key", round, holders)
		}
	}
	if n := 2 * perNode * rounds; len(revs) != n || !revs[int64(n)] {
		t.Errorf("setting revisions %v, want 1..%d once each", revs, n)
	}
	if c, err := nodes[0].JobCount(t.Context(), "ns"); err != nil || c.Pending != 2*rounds {
		t.Errorf("counts %+v, %v; want %d pending", c, err, 2*rounds)
	}
	if e, err := nodes[1].AuditList(t.Context(), store.AuditListParams{Namespace: "ns", Limit: 1000}); err != nil || len(e) != 2*perNode*rounds {
		t.Errorf("audit: %d entries, %v; want %d", len(e), err, 2*perNode*rounds)
	}
}

// TestCancelledWrite ends writes' contexts at all points of their run: a
// write that fails left nothing behind, one that succeeds landed whole,
// and the store (its connections) works on.
func TestCancelledWrite(t *testing.T) {
	s := open(t, testserver.Postgres(t), postgres.Options{})
	landed := 0
	for i := range 20 {
		ctx, cancel := context.WithTimeout(t.Context(), time.Duration(i)*100*time.Microsecond)
		jobs := make([]store.NewJob, 200)
		for k := range jobs {
			jobs[k] = store.NewJob{ID: fmt.Sprintf("c%d-%d", i, k), Queue: "q", Task: "t", UniqueKey: fmt.Sprintf("u%d-%d", i, k)}
		}
		if _, err := s.JobEnqueueMany(ctx, store.JobEnqueueManyParams{Namespace: "ns", Calls: []store.EnqueueCall{{Jobs: jobs}}}); err == nil {
			landed++
		}
		cancel()
	}
	c, err := s.JobCount(t.Context(), "ns")
	if err != nil {
		t.Fatal(err)
	}
	if c.Pending != int64(200*landed) {
		t.Fatalf("%d jobs stored, want %d: the enqueues that succeeded, whole", c.Pending, 200*landed)
	}

	// Claims run two round trips: a deadline may end one between them.
	handed, failed := 0, 0
	for i := range 40 {
		ctx, cancel := context.WithTimeout(t.Context(), time.Duration(i)*50*time.Microsecond)
		res, err := s.JobClaimMany(ctx, store.JobClaimManyParams{Namespace: "ns", Claims: []store.ClaimSpec{
			{Queues: []string{"q"}, Max: 20, Worker: "w"},
		}})
		cancel()
		if err != nil {
			failed++
			continue
		}
		handed += len(res[0])
	}
	t.Logf("%d of 20 enqueues landed, %d of 40 claims failed", landed, failed)
	if c, err = s.JobCount(t.Context(), "ns"); err != nil {
		t.Fatal(err)
	}
	if c.Running != int64(handed) || c.Pending+c.Running != int64(200*landed) {
		t.Errorf("counts %+v after claims that handed out %d jobs, want that many running", c, handed)
	}
	res, err := s.JobEnqueueMany(t.Context(), store.JobEnqueueManyParams{Namespace: "ns", Calls: []store.EnqueueCall{
		{Jobs: []store.NewJob{{ID: "after", Queue: "q", Task: "t", UniqueKey: "after"}}},
	}})
	if err != nil || res[0][0].Outcome != api.OutcomeEnqueued {
		t.Fatalf("enqueue after cancelled writes: %v, %v", res, err)
	}
}

// Migration 2 turns the run_at of jobs written before it from Unix
// nanoseconds into microseconds, flooring as UnixMicro does, and leaves
// the other times alone.
// migratedConn migrates a fresh database and returns its URL and a
// connection to it, for a test to roll a migration back through.
func migratedConn(t *testing.T) (string, *pgx.Conn) {
	t.Helper()
	url := testserver.Postgres(t)
	open(t, url, postgres.Options{}).Close()
	conn, err := pgx.Connect(t.Context(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return url, conn
}

func TestMigrationMovesRunAtToMicroseconds(t *testing.T) {
	// Roll the database back to before migration 2, with two jobs as a
	// node of that version wrote them.
	url, conn := migratedConn(t)
	created := time.Date(2026, 1, 1, 0, 0, 0, 123456789, time.UTC)
	runAts := map[string]time.Time{
		"later":  time.Date(2026, 1, 2, 3, 4, 5, 678901234, time.UTC),
		"before": time.Date(1969, 12, 31, 23, 59, 59, 999999500, time.UTC), // floors to ...999999
	}
	for id, at := range runAts {
		if _, err := conn.Exec(t.Context(), `INSERT INTO jobs (namespace, id, queue, task, run_at, status, created_at)
			VALUES ('ns', $1, 'q', 't', $2, 4, $3)`, id, at.UnixNano(), created.UnixNano()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(t.Context(), `DELETE FROM flexiq_migrations WHERE version = 2`); err != nil {
		t.Fatal(err)
	}
	s := open(t, url, postgres.Options{})
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

// Migration 5 makes a job's names and keys compare as bytes (COLLATE "C")
// in a database written before it, whatever the database's default
// collation, and keeps its jobs found by them.
func TestMigrationComparesJobNamesAsBytes(t *testing.T) {
	url, conn := migratedConn(t)
	names := []string{"namespace", "id", "queue", "task", "unique_key", "debounce_key"}
	// Roll the database back to before migration 5: the columns in the
	// database's default collation, a job with a unique key in them.
	for _, c := range names {
		if _, err := conn.Exec(t.Context(), `ALTER TABLE jobs ALTER COLUMN `+c+` TYPE text COLLATE "default"`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(t.Context(), `INSERT INTO jobs (namespace, id, queue, task, run_at, status, created_at, unique_key)
		VALUES ('ns', 'Ab-1', 'q', 't', 0, 0, 0, 'k')`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(t.Context(), `DELETE FROM flexiq_migrations WHERE version = 5`); err != nil {
		t.Fatal(err)
	}
	s := open(t, url, postgres.Options{})
	rows, err := conn.Query(t.Context(), `SELECT a.attname, c.collname FROM pg_attribute a JOIN pg_collation c ON c.oid = a.attcollation
		WHERE a.attrelid = 'jobs'::regclass AND a.attname = ANY ($1)`, names)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for rows.Next() {
		var col, coll string
		if err := rows.Scan(&col, &coll); err != nil {
			t.Fatal(err)
		}
		got[col] = coll
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	for _, c := range names {
		if got[c] != "C" {
			t.Errorf("jobs.%s collates %q, want C", c, got[c])
		}
	}
	if j, err := s.JobGet(t.Context(), "ns", "Ab-1"); err != nil || j.UniqueKey != "k" {
		t.Errorf("the job written before: %+v, %v", j, err)
	}
	res, err := s.JobEnqueueMany(t.Context(), store.JobEnqueueManyParams{Namespace: "ns", Now: time.Now(), Calls: []store.EnqueueCall{{
		Jobs: []store.NewJob{{ID: "other", Queue: "q", Task: "t", UniqueKey: "k", RunAt: time.Now()}},
	}}})
	if err != nil || res[0][0].Outcome != api.OutcomeDeduplicated || res[0][0].ID != "Ab-1" {
		t.Errorf("a job with the same unique key: %+v, %v; want deduplicated to Ab-1", res, err)
	}
}

// A dead member's row is dropped by another node's heartbeat (the sweep
// runs only when a heartbeat sees such a row), and no other row is.
func TestHeartbeatSweepsDeadMembers(t *testing.T) {
	ctx := context.Background()
	url := testserver.Postgres(t)
	s := open(t, url, postgres.Options{})
	t0 := time.Unix(1_700_000_000, 0).UTC()
	beat := func(node string, now time.Time) []store.Member {
		t.Helper()
		got, err := s.MemberHeartbeat(ctx, store.MemberHeartbeatParams{Node: node, Now: now, TTL: 2 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	rows := func() []string {
		t.Helper()
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		r, err := conn.Query(ctx, `SELECT node FROM members ORDER BY node`)
		if err != nil {
			t.Fatal(err)
		}
		nodes, err := pgx.CollectRows(r, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return nodes
	}
	beat("a", t0)
	beat("b", t0)
	beat("c", t0.Add(time.Second))
	if got := rows(); len(got) != 3 {
		t.Fatalf("rows %v, want a, b, c", got)
	}
	// At +2.5 s a and b have expired; c's heartbeat sees them and drops
	// both rows, keeping its own.
	if got := beat("c", t0.Add(2500*time.Millisecond)); len(got) != 1 || got[0].Node != "c" {
		t.Fatalf("live members %+v, want c alone", got)
	}
	if got := rows(); len(got) != 1 || got[0] != "c" {
		t.Fatalf("rows after c's heartbeat %v, want c alone", got)
	}
}

// A fenced write in flight does not hold its lease's renewal off: the
// holder renews at once (before migration 4 the renewal waited for every
// open fenced write of the partition, and writes that overlapped without
// a gap kept it off until the lease ran out). A take from another holder
// still waits for the write to commit. The write fences itself as nodes
// of the versions before migration 6 do (flexiq_fence), so a store shared
// with such a node is checked too; TestATakeWaitsForAFencedWriteOfOneBatch
// checks the fence this version sends.
func TestRenewalPassesAFencedWriteATakeWaitsForIt(t *testing.T) {
	ctx := context.Background()
	url := testserver.Postgres(t)
	s := open(t, url, postgres.Options{})
	t0 := time.Unix(1_700_000_000, 0).UTC()
	const lease = "ns:acme"
	acquire := func(ctx context.Context, holder string, now time.Time) ([]store.Lease, error) {
		return s.LeaseAcquire(ctx, store.LeaseAcquireParams{Holder: holder, Names: []string{lease}, Now: now, TTL: 10 * time.Second})
	}
	if _, err := acquire(ctx, "node-a", t0); err != nil {
		t.Fatal(err)
	}

	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var pid int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT flexiq_fence($1, 'node-a', 1)`, lease); err != nil {
		t.Fatal(err)
	}

	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	got, err := acquire(rctx, "node-a", t0.Add(5*time.Second))
	cancel()
	if err != nil || len(got) != 1 || got[0].Epoch != 1 || !got[0].Expires.Equal(t0.Add(15*time.Second)) {
		t.Fatalf("renewal with a fenced write open: %+v, %v; want epoch 1 until +15 s, at once", got, err)
	}

	// node-b takes the lease once it has run out: it waits for the write.
	type result struct {
		ls  []store.Lease
		err error
	}
	took := make(chan result, 1)
	go func() {
		ls, err := acquire(ctx, "node-b", t0.Add(time.Minute))
		took <- result{ls, err}
	}()
	for waiting := false; !waiting; {
		select {
		case r := <-took:
			t.Fatalf("the take returned with the fenced write still open: %+v", r)
		default:
		}
		// The take's backend waits on a lock the write's backend holds.
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_stat_activity a
			WHERE a.wait_event_type = 'Lock' AND $1 = ANY (pg_blocking_pids(a.pid)))`, pid).Scan(&waiting); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-took
	if r.err != nil || len(r.ls) != 1 || r.ls[0].Holder != "node-b" || r.ls[0].Epoch != 2 {
		t.Fatalf("the take: %+v, %v; want node-b at epoch 2", r.ls, r.err)
	}
}

// A run of generated ids is written without a conflict clause. A repeated
// one (which FlexiQ never makes) must fail the write whole, not come back
// "enqueued" for a job that was never written.
func TestARepeatedGeneratedIDFailsTheWrite(t *testing.T) {
	s := open(t, testserver.Postgres(t), postgres.Options{})
	gen := func(id string) store.NewJob {
		return store.NewJob{ID: id, Generated: true, Queue: "q", Task: "t", Payload: []byte(`{"n":1}`)}
	}
	enqueue := func(jobs ...store.NewJob) ([][]api.EnqueueResult, error) {
		return s.JobEnqueueMany(t.Context(), store.JobEnqueueManyParams{Namespace: "ns", Now: time.Now(),
			Calls: []store.EnqueueCall{{Jobs: jobs}}})
	}
	if _, err := enqueue(gen("01JH0000000000000000000001")); err != nil {
		t.Fatal(err)
	}
	res, err := enqueue(gen("01JH0000000000000000000002"), gen("01JH0000000000000000000001"))
	if err == nil {
		t.Fatalf("a repeated generated id was answered %+v, want the write to fail", res)
	}
	if _, err := s.JobGet(t.Context(), "ns", "01JH0000000000000000000002"); err == nil {
		t.Error("the job beside the repeated id was written: the write was not whole")
	}
	c, err := s.JobCount(t.Context(), "ns")
	if err != nil {
		t.Fatal(err)
	}
	if c.Pending != 1 {
		t.Errorf("%d jobs pending, want the first one alone", c.Pending)
	}
}
