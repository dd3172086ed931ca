// Package postgres is the PostgreSQL backend of store.Store, on
// github.com/jackc/pgx/v5 and its pgxpool.
//
// Several nodes may share one database. Every write method is one
// transaction whose statements go to the server in pipelined batches (one
// round trip for a whole enqueue group or update group), with pgx's cached
// prepared statements. Claims lock their candidates with FOR UPDATE SKIP
// LOCKED, so concurrent claimers never hand out the same job and never wait
// for each other. Reads run outside transactions, each a single statement.
//
// The Store is a store.ClusterStore (tables members and leases). A fenced
// job write starts its transaction with the fence check, which locks the
// lease row FOR KEY SHARE and aborts the write, as store.ErrFenced, unless
// the fence's holder holds the lease at its epoch; a take of the lease
// (an UPDATE that bumps the epoch, part of the row's key) waits for the
// writes in flight, so no write of a stale owner commits after a take,
// while the holder's renewals pass them (see fenceSQL).
//
// Migrations are embedded and applied at Open inside one transaction that
// first takes an advisory lock (pg_advisory_xact_lock), so nodes starting
// together do not race. Options.Schema puts the tables in a schema of their
// own (created if missing), so several stores can share one database.
//
// Times are stored as bigint Unix nanoseconds (run_at as microseconds, so
// it reaches the year 9999), as in the SQLite backend, so they come back
// exactly; payloads, results and setting values as bytea, byte for byte.
// The cluster tables keep their expiries as timestamptz (microseconds).
//
// The store's connections price out sequential and bitmap scans (see
// sessionParams), so plans cached from stale statistics still walk the
// indexes; TestGenericPlans guards the hot statements' plans.
package postgres

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/flexiq/flexiq/store"
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Options tune the store.
type Options struct {
	// Faults fails write transactions part-way, for tests.
	Faults store.Faults
	// Schema, when set, is the schema the store's tables live in, created
	// if missing; several stores (tests, say) can so share one database.
	// Empty uses the connection's search_path (normally public).
	Schema string
}

// sessionParams are set on every connection unless the URL sets them.
// Every statement of the store is meant to walk an index, and most read a
// handful of rows. Cached generic plans are made once from statistics that
// a queue outgrows in minutes (a queue empty at the last ANALYZE holds a
// million jobs now): with sequential and bitmap scans priced out, a stale
// estimate can no longer turn a claim's LIMIT-ed walk of jobs_claim into a
// scan and sort of the whole queue.
var sessionParams = map[string]string{
	"application_name":  "flexiq",
	"enable_seqscan":    "off",
	"enable_bitmapscan": "off",
}

// Store is a store.Store on a PostgreSQL database.
type Store struct {
	pool   *pgxpool.Pool
	faults store.Faults
}

var _ store.Store = (*Store)(nil)

// Open connects to the database at url (postgres://user:password@host:port/db?…;
// pgxpool's pool_max_conns and the like may be added) and migrates it.
func Open(ctx context.Context, url string, opt Options) (*Store, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres: parse URL: %w", err)
	}
	rp := cfg.ConnConfig.RuntimeParams
	if opt.Schema != "" {
		rp["search_path"] = pgx.Identifier{opt.Schema}.Sanitize()
	}
	for k, v := range sessionParams {
		if _, set := rp[k]; !set {
			rp[k] = v
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	s := &Store{pool: pool, faults: opt.Faults}
	if err := s.migrate(ctx, opt.Schema); err != nil {
		pool.Close()
		return nil, err
	}
	return s, nil
}

// Close closes the pool.
func (s *Store) Close() error {
	s.pool.Close()
	return nil
}

// Ping checks the database is reachable.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return nil
}

// migrateLockClass is the first key of the migration advisory lock (the
// second is the schema's hash): "FLXQ".
const migrateLockClass = 0x464c5851

// migrate applies the embedded migrations not yet applied, in one
// transaction under an advisory lock.
func (s *Store) migrate(ctx context.Context, schema string) error {
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	sort.Strings(names)
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		// Per schema: the named one, else the one search_path picks.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1, hashtext(coalesce(nullif($2, ''), current_schema(), '')))`,
			migrateLockClass, schema); err != nil {
			return err
		}
		if schema != "" {
			if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{schema}.Sanitize()); err != nil {
				return err
			}
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS flexiq_migrations (
			version integer PRIMARY KEY, applied_at bigint NOT NULL)`); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, `SELECT version FROM flexiq_migrations`)
		if err != nil {
			return err
		}
		applied, err := pgx.CollectRows(rows, pgx.RowTo[int32])
		if err != nil {
			return err
		}
		for _, name := range names {
			base := path.Base(name)
			v, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
			if err != nil {
				return fmt.Errorf("migration %s: bad version: %w", base, err)
			}
			done := false
			for _, a := range applied {
				done = done || int(a) == v
			}
			if done {
				continue
			}
			body, err := migrationFS.ReadFile(name)
			if err != nil {
				return err
			}
			// No arguments: pgx sends it with the simple protocol, which
			// takes many statements.
			if _, err := tx.Exec(ctx, string(body)); err != nil {
				return fmt.Errorf("migration %s: %w", base, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO flexiq_migrations (version, applied_at) VALUES ($1, $2)`,
				v, time.Now().UnixNano()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("postgres: migrate: %w", err)
	}
	return nil
}

// ---------------------------------------------------------------------------
// Write transactions

// maxTries bounds the runs of one write on deadlocks, serialization
// failures and (for writes that check keys before writing them) unique
// violations: each means a concurrent transaction, on another node while
// an actor moves, changed what the write had read; run again, the write's
// fresh statements see the other's result.
const maxTries = 8

// txn is one write transaction on one connection. Statements are queued
// and sent in pipelined batches, so a write that needs no answer before it
// is done (an enqueue group, an update group) is one round trip. pgx
// prepares each statement once per connection and caches it.
//
// A write sent as one batch needs no BEGIN or COMMIT: pgx ends a batch
// with a single Sync, and PostgreSQL runs the statements before a Sync as
// one implicit transaction, committed at the Sync if none failed and
// rolled back whole if one did. Only a write that reads an answer before
// it is done (a claim) opens a transaction block: its first flush begins
// it and its commit ends it. Two statements fewer a step made single-job
// enqueues and the bare protocol about 3 % faster (docs/performance.md,
// "PostgreSQL: a write of one batch is an implicit transaction").
//
// Everything that must stop a write is checked by the server (an error
// there skips the rest of the batch, the commit included), never by a
// result handler: the handlers of the last batch run after its commit.
//
// Fault steps come before each statement and before the commit, as in
// the SQLite backend. A fault is planted in the batch as a statement that
// fails on the server: the statements before it run, none after it, and
// the transaction is rolled back — what a fault between two steps of a
// write would leave.
type txn struct {
	ctx   context.Context
	conn  *pgxpool.Conn
	batch *pgx.Batch
	begun bool
	fault error // the planted fault
	step  func() error
}

// faultSQL fails on the server in place of a statement a fault stops.
const faultSQL = `DO $$BEGIN RAISE EXCEPTION 'flexiq: injected fault'; END$$`

func (t *txn) queue(query string, args []any) *pgx.QueuedQuery {
	if t.batch == nil {
		t.batch = &pgx.Batch{}
	}
	t.plantFault()
	return t.batch.Queue(query, args...)
}

// plantFault takes a fault step and, if it fails, queues the failure.
func (t *txn) plantFault() {
	if t.fault != nil {
		return
	}
	if err := t.step(); err != nil {
		t.fault = err
		t.batch.Queue(faultSQL)
	}
}

// query queues a statement whose rows fn reads when its batch is read.
func (t *txn) query(query string, args []any, fn func(pgx.Rows) error) {
	t.queue(query, args).Query(fn)
}

// exec queues a statement whose command tag fn reads; fn may be nil.
func (t *txn) exec(query string, args []any, fn func(pgconn.CommandTag) error) {
	qq := t.queue(query, args)
	if fn != nil {
		qq.Exec(fn)
	}
}

// flush sends the queued statements and reads their results, inside a
// transaction block that the first flush begins: the write goes on after
// it, so its statements must not be committed at this batch's Sync.
func (t *txn) flush() error {
	if t.batch != nil && !t.begun {
		t.batch.QueuedQueries = slices.Insert(t.batch.QueuedQueries, 0, &pgx.QueuedQuery{SQL: "begin"})
		t.begun = true
	}
	return t.flushCtx(t.ctx)
}

func (t *txn) flushCtx(ctx context.Context) error {
	if t.batch == nil {
		return t.fault
	}
	b := t.batch
	t.batch = nil
	err := t.conn.SendBatch(ctx, b).Close()
	if t.fault != nil {
		return t.fault
	}
	return err
}

// commitTimeout bounds the wait for a sent commit's answer.
const commitTimeout = 30 * time.Second

// commit takes the last fault step and sends what is queued: as one
// implicit transaction when nothing was flushed before, else with the
// COMMIT of the block the first flush began. Once sent, the commit's
// answer is awaited even if the write's context ends (for up to
// commitTimeout): a write that fails did not land, unless the connection
// itself broke.
func (t *txn) commit() error {
	if !t.begun && t.batch == nil {
		// Nothing to write; the step still runs, so every write has one.
		return t.step()
	}
	if err := t.ctx.Err(); err != nil {
		return err
	}
	if t.batch == nil {
		t.batch = &pgx.Batch{}
	}
	t.plantFault()
	if t.begun {
		t.batch.Queue("commit").Exec(func(ct pgconn.CommandTag) error {
			// COMMIT of a failed transaction answers ROLLBACK, without error.
			if ct.String() != "COMMIT" {
				return fmt.Errorf("commit answered %q", ct)
			}
			return nil
		})
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), commitTimeout)
	defer cancel()
	return t.flushCtx(ctx)
}

// write runs fn as one transaction: fn queues statements (and may flush
// them to read what it needs), then write commits, sending what is left
// with the commit. Deadlocks and serialization failures run it again.
func (s *Store) write(ctx context.Context, op string, fn func(t *txn) error) error {
	return s.writeRetrying(ctx, op, false, fn)
}

// writeRetrying is write; retryUnique also runs fn again on a unique
// violation, for writes that check keys before they write them.
func (s *Store) writeRetrying(ctx context.Context, op string, retryUnique bool, fn func(t *txn) error) error {
	for try := 1; ; try++ {
		err := s.writeOnce(ctx, op, fn)
		if err == nil {
			return nil
		}
		if try < maxTries && ctx.Err() == nil && retryable(err, retryUnique) {
			continue
		}
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
			return err
		}
		if ferr := fencedError(err); ferr != nil {
			return fmt.Errorf("postgres: %s: %w", op, ferr)
		}
		return fmt.Errorf("postgres: %s: %w", op, err)
	}
}

func (s *Store) writeOnce(ctx context.Context, op string, fn func(t *txn) error) (err error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	// Deferred calls run last first: the rollback below, then Release,
	// which closes a connection still inside a transaction.
	defer conn.Release()
	n := 0
	t := &txn{ctx: ctx, conn: conn, step: func() error {
		if s.faults == nil {
			return nil
		}
		n++
		return s.faults.Fault(op, n)
	}}
	defer func() {
		if err != nil && !conn.Conn().IsClosed() && conn.Conn().PgConn().TxStatus() != 'I' {
			// On a fresh context: a cancelled one must not leave the
			// transaction open on a pooled connection.
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_, _ = conn.Exec(rctx, "rollback")
		}
	}()
	if err := fn(t); err != nil {
		return err
	}
	return t.commit()
}

func retryable(err error, unique bool) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "40001", "40P01": // serialization_failure, deadlock_detected
		return true
	case "23505": // unique_violation
		return unique
	}
	return false
}

// ---------------------------------------------------------------------------
// Values

// Times are stored as Unix nanoseconds, the zero time as NULL; all but
// run_at, which is Unix microseconds (migration 2): nanoseconds only reach
// the year 2262, and a job may run as late as 9999-12-31T23:59:59Z (see
// docs/protocol.md). The other times come from the node's clock.

func nanos(t time.Time) int64 { return t.UnixNano() }

func fromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

func fromNullNanos(n *int64) time.Time {
	if n == nil {
		return time.Time{}
	}
	return fromNanos(*n)
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
