// Package sqlite is the SQLite backend of store.Store, on modernc.org/sqlite
// (pure Go, no cgo).
//
// One writer connection takes every write, so write transactions never
// fight over SQLite's single write lock; a small pool of read-only
// connections serves reads concurrently thanks to WAL. Migrations are
// embedded and applied at open.
//
// One node owns a SQLite store, so it is not a store.ClusterStore: it keeps
// no leases, and the Fence of a job write is ignored (the write lands as
// if it had none).
package sqlite

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/flexiq/flexiq/store"

	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

//go:embed migrations/*.sql
var migrationFS embed.FS

// Options tune the store.
type Options struct {
	// Synchronous is SQLite's synchronous setting: "NORMAL" (default; with
	// WAL an acknowledged write survives a process crash, not a power loss)
	// or "FULL" (survives power loss, at the cost of an fsync per commit).
	Synchronous string
	// Readers is the size of the read-only pool (default 4).
	Readers int
	// Faults fails write transactions part-way, for tests.
	Faults store.Faults
}

// Store is a store.Store on one SQLite file.
type Store struct {
	w      *sql.DB // exactly one connection, held by wc
	r      *sql.DB // read-only pool
	faults store.Faults

	// wmu serialises writers on wc, the one write connection, and guards
	// stmts: statements prepared on wc and reused by every transaction.
	wmu   sync.Mutex
	wc    *sql.Conn
	stmts map[string]*sql.Stmt
	// bulkSQL keeps the texts of bulkInsertSQL (guarded by wmu): building
	// a 256-row insert's text for every group was about 3 % of a batched
	// enqueue's time in the actor.
	bulkSQL map[bulkKey]string

	temp string // a temporary file to remove on Close

	// The checkpointer copies the WAL back into the database file from its
	// own connection, so the fsync that comes with it never stalls a
	// commit (an actor's step) as SQLite's automatic checkpoint would.
	ck     *sql.DB
	ckStop chan struct{}
	ckOnce sync.Once
	ckDone chan struct{}
}

// Checkpoints: every ckEvery from the checkpointer; the writer's own
// automatic checkpoint stays as a backstop at autoCheckpointPages, should
// the checkpointer fall behind.
const (
	ckEvery             = 100 * time.Millisecond
	autoCheckpointPages = 10000
)

var _ store.Store = (*Store)(nil)

// CheckSynchronous tells whether v is a synchronous setting Open takes
// ("" is the default, NORMAL).
func CheckSynchronous(v string) error {
	switch strings.ToUpper(v) {
	case "", "NORMAL", "FULL", "EXTRA", "OFF":
		return nil
	}
	return fmt.Errorf("synchronous must be NORMAL or FULL, got %q", v)
}

// Open opens (creating if needed) the database at path and migrates it.
// path ":memory:" is a private database for tests and simulations: a
// temporary file with synchronous OFF, removed on Close. (A real SQLite
// :memory: database is private to one connection, and the store needs a
// writer and readers.)
func Open(ctx context.Context, path string, opt Options) (*Store, error) {
	if err := CheckSynchronous(opt.Synchronous); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	sync := strings.ToUpper(opt.Synchronous)
	if sync == "" {
		sync = "NORMAL"
	}
	var temp string
	if path == ":memory:" {
		f, err := os.CreateTemp("", "flexiq-*.db")
		if err != nil {
			return nil, fmt.Errorf("sqlite: temporary database: %w", err)
		}
		f.Close()
		temp, path, sync = f.Name(), f.Name(), "OFF"
	} else if err := prepareFile(path); err != nil {
		return nil, fmt.Errorf("sqlite: %w", err)
	}
	q := url.Values{}
	q.Add("_pragma", "busy_timeout(10000)")
	q.Add("_pragma", "foreign_keys(0)")
	q.Add("_pragma", "cache_size(-8192)")
	q.Add("_pragma", "temp_store(memory)")
	q.Add("_pragma", "journal_mode(WAL)")
	q.Add("_pragma", "synchronous("+sync+")")
	q.Add("_pragma", "wal_autocheckpoint("+strconv.Itoa(autoCheckpointPages)+")")
	q.Set("_txlock", "immediate")
	w, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	w.SetMaxOpenConns(1)
	w.SetMaxIdleConns(1)
	w.SetConnMaxLifetime(0)
	w.SetConnMaxIdleTime(0)
	s := &Store{w: w, faults: opt.Faults, stmts: map[string]*sql.Stmt{}, bulkSQL: map[bulkKey]string{}, temp: temp}
	s.wc, err = w.Conn(ctx)
	if err != nil {
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := s.migrate(ctx); err != nil {
		s.wc.Close()
		w.Close()
		return nil, err
	}
	readers := opt.Readers
	if readers <= 0 {
		readers = 4
	}
	rq := url.Values{}
	rq.Add("_pragma", "busy_timeout(10000)")
	rq.Add("_pragma", "cache_size(-32768)")
	rq.Add("_pragma", "query_only(1)")
	s.r, err = sql.Open("sqlite", "file:"+path+"?"+rq.Encode())
	if err != nil {
		s.wc.Close()
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s for reading: %w", path, err)
	}
	s.r.SetMaxOpenConns(readers)
	s.r.SetMaxIdleConns(readers)
	cq := url.Values{}
	cq.Add("_pragma", "busy_timeout(10000)")
	s.ck, err = sql.Open("sqlite", "file:"+path+"?"+cq.Encode())
	if err != nil {
		s.r.Close()
		s.wc.Close()
		w.Close()
		return nil, fmt.Errorf("sqlite: open %s for checkpoints: %w", path, err)
	}
	s.ck.SetMaxOpenConns(1)
	s.ck.SetMaxIdleConns(1)
	s.ckStop, s.ckDone = make(chan struct{}), make(chan struct{})
	go s.checkpoints()
	return s, nil
}

// Modes of the database's files and of a directory Open creates for them
// (docs/security.md: the data dir 0700, every file in it 0600).
const (
	fileMode os.FileMode = 0o600
	dirMode  os.FileMode = 0o700
)

// prepareFile makes the database file at path 0600 before SQLite opens
// it. SQLite would create a missing one 0644 (less the umask), and it
// gives the -wal and -shm files it creates the database file's mode, so
// this one file decides all three. A file already there (a -wal or -shm
// left by a crash included) is tightened to 0600. A directory Open must
// create is 0700; one that exists is the operator's, and left as it is.
func prepareFile(path string) error {
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, dirMode); err != nil {
			return fmt.Errorf("create directory for %s: %w", path, err)
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, fileMode)
	if err == nil {
		// An empty file is an empty database to SQLite.
		return f.Close()
	}
	if !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("create %s: %w", path, err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		fi, err := os.Stat(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		if perm := fi.Mode().Perm(); perm&^fileMode != 0 {
			if err := os.Chmod(p, perm&fileMode); err != nil {
				return fmt.Errorf("tighten %s to %#o: %w", p, perm&fileMode, err)
			}
		}
	}
	return nil
}

// checkpoints runs a passive checkpoint every ckEvery until Close: it
// never waits for readers or the writer, and a WAL with nothing new to
// copy costs next to nothing.
func (s *Store) checkpoints() {
	defer close(s.ckDone)
	t := time.NewTicker(ckEvery)
	defer t.Stop()
	for {
		select {
		case <-s.ckStop:
			return
		case <-t.C:
		}
		// An error (busy, say) is retried on the next tick; the writer's
		// automatic checkpoint bounds the WAL meanwhile.
		_, _ = s.ck.ExecContext(context.Background(), "PRAGMA wal_checkpoint(PASSIVE)")
	}
}

// Close stops the checkpointer and closes the connections. A second Close
// does not panic; it reports the connections already closed.
func (s *Store) Close() error {
	s.ckOnce.Do(func() { close(s.ckStop) })
	<-s.ckDone
	s.wmu.Lock()
	defer s.wmu.Unlock()
	for _, st := range s.stmts {
		st.Close()
	}
	s.stmts = map[string]*sql.Stmt{}
	err := errors.Join(s.ck.Close(), s.r.Close(), s.wc.Close(), s.w.Close())
	if s.temp != "" {
		for _, suffix := range []string{"", "-wal", "-shm"} {
			os.Remove(s.temp + suffix)
		}
	}
	return err
}

// Ping checks both pools.
func (s *Store) Ping(ctx context.Context) error {
	var one int
	if err := s.r.QueryRowContext(ctx, "SELECT 1").Scan(&one); err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	return nil
}

func (s *Store) migrate(ctx context.Context) error {
	if _, err := s.wc.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
		version INTEGER PRIMARY KEY, applied_at INTEGER NOT NULL)`); err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	names, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return fmt.Errorf("sqlite: migrate: %w", err)
	}
	sort.Strings(names)
	for _, name := range names {
		base := filepath.Base(name)
		version, err := strconv.Atoi(strings.SplitN(base, "_", 2)[0])
		if err != nil {
			return fmt.Errorf("sqlite: migration %s: bad version: %w", base, err)
		}
		body, err := migrationFS.ReadFile(name)
		if err != nil {
			return fmt.Errorf("sqlite: migrate: %w", err)
		}
		err = s.tx(ctx, "migrate", func(tx *wtx, _ func() error) error {
			var n int
			if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM schema_migrations WHERE version = ?", version).Scan(&n); err != nil {
				return err
			}
			if n > 0 {
				return nil
			}
			// Not through the statement cache: a migration is many statements.
			if _, err := s.wc.ExecContext(ctx, string(body)); err != nil {
				return fmt.Errorf("migration %s: %w", base, err)
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO schema_migrations (version, applied_at) VALUES (?, ?)", version, time.Now().UnixNano())
			return err
		})
		if err != nil {
			return fmt.Errorf("sqlite: migrate: %w", err)
		}
	}
	return nil
}

// wtx is a write transaction on the one write connection. database/sql's
// Tx would re-prepare every statement on each use (Tx.StmtContext cannot
// reuse a statement prepared on a Conn), and SQLite's parser is the most
// expensive part of a small write; so transactions are plain BEGIN/COMMIT on
// the connection and statements stay prepared on it for the store's life.
type wtx struct {
	s   *Store
	ctx context.Context
}

func (t *wtx) prepared(query string) (*sql.Stmt, error) {
	st, ok := t.s.stmts[query]
	if !ok {
		var err error
		st, err = t.s.wc.PrepareContext(t.ctx, query)
		if err != nil {
			return nil, err
		}
		t.s.stmts[query] = st
	}
	return st, nil
}

// ExecContext runs a prepared statement; ctx is the transaction's.
func (t *wtx) ExecContext(_ context.Context, query string, args ...any) (sql.Result, error) {
	st, err := t.prepared(query)
	if err != nil {
		return nil, err
	}
	return st.ExecContext(t.ctx, args...)
}

// QueryContext runs a prepared query.
func (t *wtx) QueryContext(_ context.Context, query string, args ...any) (*sql.Rows, error) {
	st, err := t.prepared(query)
	if err != nil {
		return nil, err
	}
	return st.QueryContext(t.ctx, args...)
}

// QueryRowContext runs a prepared single-row query; a prepare error comes
// back from Scan.
func (t *wtx) QueryRowContext(_ context.Context, query string, args ...any) *sql.Row {
	st, err := t.prepared(query)
	if err != nil {
		// A row from a closed statement reports the error on Scan.
		return t.s.wc.QueryRowContext(t.ctx, query, args...)
	}
	return st.QueryRowContext(t.ctx, args...)
}

// tx runs fn in one write transaction. step is called by fn between the
// steps of a write and fails it when a fault is injected.
func (s *Store) tx(ctx context.Context, op string, fn func(tx *wtx, step func() error) error) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if _, err := s.exec(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("sqlite: %s: begin: %w", op, err)
	}
	n := 0
	step := func() error {
		if s.faults == nil {
			return nil
		}
		n++
		return s.faults.Fault(op, n)
	}
	rollback := func() {
		// A rollback on a dead context would fail and leave the
		// transaction open on the connection: use a fresh one.
		_, _ = s.wc.ExecContext(context.WithoutCancel(ctx), "ROLLBACK")
	}
	err := fn(&wtx{s: s, ctx: ctx}, step)
	if err == nil {
		err = step()
	}
	if err != nil {
		rollback()
		if errors.Is(err, store.ErrNotFound) || errors.Is(err, store.ErrConflict) {
			return err
		}
		return fmt.Errorf("sqlite: %s: %w", op, err)
	}
	if _, err := s.exec(context.WithoutCancel(ctx), "COMMIT"); err != nil {
		rollback()
		return fmt.Errorf("sqlite: %s: commit: %w", op, err)
	}
	return nil
}

// exec runs a statement on the write connection through the prepared
// statement cache: BEGIN and COMMIT run on every write, and preparing them
// each time costs more than running them.
func (s *Store) exec(ctx context.Context, query string) (sql.Result, error) {
	return (&wtx{s: s, ctx: ctx}).ExecContext(ctx, query)
}

// Times are stored as Unix nanoseconds, the zero time as NULL; all but
// run_at, which is Unix microseconds (migration 4): nanoseconds only reach
// the year 2262, and a job may run as late as 9999-12-31T23:59:59Z (see
// docs/protocol.md). The other times come from the node's clock.

func nanos(t time.Time) int64 { return t.UnixNano() }

func fromNanos(n sql.NullInt64) time.Time {
	if !n.Valid {
		return time.Time{}
	}
	return time.Unix(0, n.Int64).UTC()
}

func nullString(s string) any {
	if s == "" {
		return nil
	}
	return s
}

func nullBytes(b []byte) any {
	if b == nil {
		return nil
	}
	return b
}
