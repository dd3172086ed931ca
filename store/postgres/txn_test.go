package postgres

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flexiq/flexiq/internal/testserver"
	"github.com/flexiq/flexiq/store"
)

// batchRecorder is a pgx tracer that keeps the statements of each batch
// sent.
type batchRecorder struct {
	mu      sync.Mutex
	batches [][]string
}

// The query hooks make it a pgx.QueryTracer, which ConnConfig.Tracer
// must be; pgx calls the batch hooks of a tracer that has them.
func (r *batchRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	return ctx
}
func (r *batchRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData)     {}
func (r *batchRecorder) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *batchRecorder) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// TraceBatchStart records the statements of the batch about to be sent.
func (r *batchRecorder) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	var b []string
	for _, q := range d.Batch.QueuedQueries {
		b = append(b, label(q.SQL))
	}
	r.mu.Lock()
	r.batches = append(r.batches, b)
	r.mu.Unlock()
	return ctx
}

// take returns the batches recorded since the last take.
func (r *batchRecorder) take() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.batches
	r.batches = nil
	return b
}

// label names a statement: begin, commit, fence, or its verb and table.
func label(sql string) string {
	f := strings.Fields(sql)
	switch {
	case len(f) == 1:
		return f[0]
	case strings.Contains(sql, "FROM leases WHERE name = $1 FOR KEY SHARE"):
		return "fence"
	}
	for i, w := range f[:len(f)-1] {
		if u := strings.ToUpper(w); u == "INTO" || u == "UPDATE" {
			return f[0] + " " + f[i+1]
		}
	}
	return f[0]
}

// tracedStore opens a migrated store whose connections, set up as Open
// sets them, report their batches to the returned recorder.
func tracedStore(t *testing.T) (*Store, *batchRecorder) {
	t.Helper()
	url := testserver.Postgres(t)
	s, err := Open(t.Context(), url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range sessionParams {
		cfg.ConnConfig.RuntimeParams[k] = v
	}
	rec := &batchRecorder{}
	cfg.ConnConfig.Tracer = rec
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &Store{pool: pool}, rec
}

// A write that needs no answer before its end is one batch and one
// implicit transaction, without BEGIN or COMMIT; a write that reads
// before it writes (a claim of two queues, which reads their heads)
// opens a transaction block with its first batch and commits it with its
// last.
func TestAWriteOfOneBatchSendsNoBeginOrCommit(t *testing.T) {
	s, rec := tracedStore(t)
	ctx := t.Context()
	now := time.Unix(1_700_000_000, 0).UTC()
	leases, err := s.LeaseAcquire(ctx, store.LeaseAcquireParams{Holder: "node-a", Names: []string{"ns:acme"}, Now: now, TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	fence := &store.Fence{Lease: "ns:acme", Holder: "node-a", Epoch: leases[0].Epoch}
	rec.take()

	if _, err := s.JobEnqueueMany(ctx, store.JobEnqueueManyParams{Namespace: "acme", Now: now, Fence: fence,
		Calls: []store.EnqueueCall{{Jobs: []store.NewJob{{ID: "a", Generated: true, Queue: "q", Task: "t", RunAt: now}}}}}); err != nil {
		t.Fatal(err)
	}
	got := rec.take()
	if len(got) != 1 || strings.Join(got[0], "; ") != "fence; INSERT jobs" {
		t.Fatalf("enqueue sent %q, want one batch of the fence and the insert", got)
	}

	res, err := s.JobClaimMany(ctx, store.JobClaimManyParams{Namespace: "acme", Now: now, Fence: fence,
		Claims: []store.ClaimSpec{{Queues: []string{"q", "r"}, Max: 1, Worker: "w", LeaseUntil: now.Add(time.Minute)}}})
	if err != nil || len(res[0]) != 1 {
		t.Fatalf("claim: %v, %v", res, err)
	}
	got = rec.take()
	if len(got) < 2 || got[0][0] != "begin" || got[len(got)-1][len(got[len(got)-1])-1] != "commit" {
		t.Fatalf("claim sent %q, want a first batch that begins and a last that commits", got)
	}
	for _, b := range got[1 : len(got)-1] {
		for _, q := range b {
			if q == "begin" || q == "commit" {
				t.Fatalf("claim sent %q: a BEGIN or COMMIT between its first and last batches", got)
			}
		}
	}
}

// A fenced write sent as one batch holds its lease row until the batch's
// implicit transaction commits: a take of the lease waits for it, as it
// waits for a write in an explicit transaction block.
func TestATakeWaitsForAFencedWriteOfOneBatch(t *testing.T) {
	url := testserver.Postgres(t)
	ctx := t.Context()
	s, err := Open(ctx, url, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	t0 := time.Unix(1_700_000_000, 0).UTC()
	const lease = "ns:acme"
	if _, err := s.LeaseAcquire(ctx, store.LeaseAcquireParams{Holder: "node-a", Names: []string{lease}, Now: t0, TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}

	// A session of the test holds an advisory lock the write's second
	// statement waits for: the write stops between its fence and its end.
	gate, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer gate.Close(context.Background())
	const gateKey = 0x464c5852
	if _, err := gate.Exec(ctx, `SELECT pg_advisory_lock($1)`, gateKey); err != nil {
		t.Fatal(err)
	}
	// poll returns the pid query finds (one int column, or none), once it
	// finds one; it fails at once if the take answers first. The queries
	// name the sessions they wait for, so other databases' and other
	// tests' lock waits on a shared server do not count.
	took := make(chan []store.Lease, 1)
	poll := func(what, query string, args ...any) int {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			select {
			case got := <-took:
				t.Fatalf("node-b took the lease (%+v) while node-a's fenced write was open", got)
			default:
			}
			var pid int
			err := gate.QueryRow(ctx, query, args...).Scan(&pid)
			if err == nil {
				return pid
			}
			if !errors.Is(err, pgx.ErrNoRows) {
				t.Fatal(err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not seen in 30 s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	wrote := make(chan error, 1)
	go func() {
		wrote <- s.write(ctx, "gated", func(t *txn) error {
			queueFence(t, &store.Fence{Lease: lease, Holder: "node-a", Epoch: 1})
			t.exec(`SELECT pg_advisory_xact_lock_shared($1::bigint)`, []any{int64(gateKey)}, nil)
			return nil
		})
	}()
	// The write's session, once it waits for the gate: its fence ran.
	writer := poll("the write waiting at the gate", `SELECT pid FROM pg_locks
		WHERE locktype = 'advisory' AND classid = 0 AND objid = $1 AND NOT granted LIMIT 1`, int64(gateKey))

	go func() {
		got, err := s.LeaseAcquire(ctx, store.LeaseAcquireParams{Holder: "node-b", Names: []string{lease}, Now: t0.Add(time.Minute), TTL: 10 * time.Second})
		if err != nil {
			t.Error(err)
		}
		took <- got
	}()
	poll("the take waiting for the write", `SELECT pid FROM pg_stat_activity
		WHERE $1::int = ANY(pg_blocking_pids(pid)) LIMIT 1`, writer)

	if _, err := gate.Exec(ctx, `SELECT pg_advisory_unlock($1)`, gateKey); err != nil {
		t.Fatal(err)
	}
	if err := <-wrote; err != nil {
		t.Fatalf("the fenced write: %v", err)
	}
	if got := <-took; len(got) != 1 || got[0].Holder != "node-b" || got[0].Epoch != 2 {
		t.Fatalf("take after the write: %+v, want node-b at epoch 2", got)
	}
}
