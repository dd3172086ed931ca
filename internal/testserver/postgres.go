package testserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EnvPostgresURL names an existing PostgreSQL server for the tests to use
// instead of starting one.
const EnvPostgresURL = "FLEXIQ_TEST_POSTGRES_URL"

// PostgresServer is a PostgreSQL server that hands out fresh databases:
// one this package started (StartPostgres) or an existing one
// (ConnectPostgres).
type PostgresServer struct {
	// URL reaches the server's maintenance database as a role that may
	// create databases (or, failing that, schemas).
	URL string

	admin   *pgxpool.Pool
	seq     atomic.Int64
	schemas atomic.Bool // the role may not create databases: schemas instead

	// A started server only.
	cmd     *exec.Cmd
	dir     string
	logPath string
	exited  chan struct{} // closed once the server process is gone
	stopped sync.Once
	stopErr error
}

var (
	pgOnce   sync.Once
	pgShared *PostgresServer
	pgErr    error
	// pgExternal says pgErr concerns the server FLEXIQ_TEST_POSTGRES_URL
	// names: asked for explicitly, so its failure fails the test.
	pgExternal bool
)

// Postgres returns the URL of a fresh, empty database for t, dropped when t
// ends. The first call of a test binary starts its server: the one
// FLEXIQ_TEST_POSTGRES_URL names, else a throwaway server (which needs Main
// in TestMain). Without any, t is skipped (failed under
// FLEXIQ_REQUIRE_ALL_BACKENDS=1).
func Postgres(t testing.TB) string {
	t.Helper()
	external := os.Getenv(EnvPostgresURL) != ""
	if !external && !mainRunning.Load() {
		t.Fatal("testserver.Postgres starts a throwaway PostgreSQL server that only testserver.Main stops: " +
			"add func TestMain(m *testing.M) { testserver.Main(m) } to the package's tests")
	}
	pgOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if u := os.Getenv(EnvPostgresURL); u != "" {
			pgExternal = true
			pgShared, pgErr = ConnectPostgres(ctx, u)
			if pgErr != nil {
				pgErr = fmt.Errorf("%s: %w", EnvPostgresURL, pgErr)
			}
		} else {
			pgShared, pgErr = StartPostgres(ctx)
		}
		if pgErr == nil {
			atExit(func() { _ = pgShared.Stop() })
		}
	})
	if pgErr != nil {
		if pgExternal {
			t.Fatalf("postgres backend: %v", pgErr)
		}
		unavailable(t, "postgres", pgErr)
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	u, drop, err := pgShared.NewDatabase(ctx)
	if err != nil {
		t.Fatalf("postgres backend: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := drop(ctx); err != nil {
			t.Errorf("postgres backend: %v", err)
		}
	})
	return u
}

// ConnectPostgres uses an existing server: rawURL must be a postgres:// URL
// whose role may create databases (or at least schemas in its database).
func ConnectPostgres(ctx context.Context, rawURL string) (*PostgresServer, error) {
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, fmt.Errorf("want a postgres:// URL, got %q", redact(rawURL))
	}
	s := &PostgresServer{URL: rawURL}
	if err := s.connectAdmin(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// StartPostgres starts a throwaway server: initdb into a temporary
// directory, then postgres on a free loopback port with durability off.
// Stop stops it and removes the directory.
func StartPostgres(ctx context.Context) (*PostgresServer, error) {
	bin, err := findPostgresBin()
	if err != nil {
		return nil, err
	}
	cred, err := serverUser()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "flexiq-pg-")
	if err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	s := &PostgresServer{dir: dir, logPath: filepath.Join(dir, "postgres.log")}
	ok := false
	defer func() {
		if !ok {
			_ = s.Stop()
		}
	}()
	if cred != nil {
		if err := os.Chown(dir, int(cred.uid), int(cred.gid)); err != nil {
			return nil, fmt.Errorf("hand %s to user %s: %w", dir, cred.name, err)
		}
	}
	data := filepath.Join(dir, "data")
	var out bytes.Buffer
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"),
		"-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--locale=C", "--no-sync")
	initdb.Dir, initdb.Env, initdb.Stdout, initdb.Stderr = dir, serverEnv(dir), &out, &out
	if err := setServerProc(initdb, cred, false); err != nil {
		return nil, err
	}
	if err := initdb.Run(); err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", initdb, err, tail(out.Bytes()))
	}
	// A port found free may be taken before postgres binds it: try a few.
	for try := 0; ; try++ {
		err = s.start(ctx, bin, data, cred)
		if err == nil {
			break
		}
		if try == 2 || ctx.Err() != nil {
			return nil, err
		}
	}
	if err := s.connectAdmin(ctx); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

func (s *PostgresServer) start(ctx context.Context, bin, data string, cred *osUser) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("server log: %w", err)
	}
	defer logf.Close()
	sockDir := s.dir
	if len(sockDir) > 80 { // a Unix socket path holds about 100 bytes
		sockDir = ""
	}
	cmd := exec.Command(filepath.Join(bin, "postgres"),
		"-D", data, "-p", strconv.Itoa(port), "-k", sockDir,
		"-c", "listen_addresses=127.0.0.1",
		"-F", "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300")
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = s.dir, serverEnv(s.dir), logf, logf
	if err := setServerProc(cmd, cred, true); err != nil {
		return err
	}
	exited := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		// The parent-death signal follows the thread that forked the
		// server, so fork from a thread that lives as long as the server
		// (a locked goroutine's thread ends with it, after Wait).
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			close(exited)
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(exited)
	}()
	if err := <-started; err != nil {
		return fmt.Errorf("start %s: %w", cmd, err)
	}
	s.cmd, s.exited = cmd, exited
	s.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)

	deadline := time.Now().Add(time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		c, err := pgconn.Connect(cctx, s.URL)
		cancel()
		if err == nil {
			_ = c.Close(ctx)
			return nil
		}
		select {
		case <-exited:
			s.cmd = nil
			return fmt.Errorf("postgres exited before accepting connections: %s", s.logTail())
		case <-ctx.Done():
			return fmt.Errorf("postgres not ready: %w (%v)", ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not accepting connections after a minute: %v\n%s", err, s.logTail())
		}
	}
}

func (s *PostgresServer) connectAdmin(ctx context.Context) error {
	cfg, err := pgxpool.ParseConfig(s.URL)
	if err != nil {
		return fmt.Errorf("parse %s: %w", redact(s.URL), err)
	}
	cfg.MaxConns = 4
	s.admin, err = pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect %s: %w", redact(s.URL), err)
	}
	if err := s.admin.Ping(ctx); err != nil {
		s.admin.Close()
		s.admin = nil
		return fmt.Errorf("connect %s: %w", redact(s.URL), err)
	}
	return nil
}

// NewDatabase creates a fresh, empty database and returns its URL and the
// func that drops it. Where the role may not create databases it creates a
// schema instead, and the URL selects it (options=-c search_path=…).
func (s *PostgresServer) NewDatabase(ctx context.Context) (dbURL string, drop func(context.Context) error, err error) {
	name := fmt.Sprintf("flexiq_test_%d_%d", os.Getpid(), s.seq.Add(1))
	ident := pgx.Identifier{name}.Sanitize()
	u, err := url.Parse(s.URL)
	if err != nil {
		return "", nil, fmt.Errorf("parse %s: %w", redact(s.URL), err)
	}
	if !s.schemas.Load() {
		_, err := s.admin.Exec(ctx, "CREATE DATABASE "+ident)
		var pgErr *pgconn.PgError
		switch {
		case err == nil:
			u.Path = "/" + name
			return u.String(), func(ctx context.Context) error {
				if _, err := s.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
					return fmt.Errorf("drop database %s: %w", name, err)
				}
				return nil
			}, nil
		case errors.As(err, &pgErr) && pgErr.Code == "42501": // insufficient_privilege
			s.schemas.Store(true)
		default:
			return "", nil, fmt.Errorf("create database %s: %w", name, err)
		}
	}
	if _, err := s.admin.Exec(ctx, "CREATE SCHEMA "+ident); err != nil {
		return "", nil, fmt.Errorf("create schema %s: %w", name, err)
	}
	q := u.Query()
	q.Set("options", "-csearch_path="+name) // no space: URL encoders disagree on "+"
	u.RawQuery = q.Encode()
	return u.String(), func(ctx context.Context) error {
		if _, err := s.admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+ident+" CASCADE"); err != nil {
			return fmt.Errorf("drop schema %s: %w", name, err)
		}
		return nil
	}, nil
}

// Stop closes the admin connections and, for a server StartPostgres
// started, shuts it down (fast shutdown, then a kill after 10 s) and
// removes its directory.
func (s *PostgresServer) Stop() error {
	s.stopped.Do(func() {
		if s.admin != nil {
			s.admin.Close()
		}
		s.stopErr = stopProcess(s.cmd, s.exited, syscall.SIGINT, "postgres", s.dir)
	})
	return s.stopErr
}

func (s *PostgresServer) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	return tail(b)
}

// findPostgresBin finds a directory holding both initdb and postgres: on
// PATH, else the newest /usr/lib/postgresql/*/bin (Debian, Ubuntu) or
// /usr/pgsql-*/bin (RHEL).
func findPostgresBin() (string, error) {
	var dirs []string
	for _, name := range []string{"postgres", "initdb", "pg_ctl"} {
		if p, err := exec.LookPath(name); err == nil {
			dirs = append(dirs, filepath.Dir(p))
		}
	}
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin", "/usr/local/pgsql/bin"} {
		found, _ := filepath.Glob(pattern)
		slices.SortFunc(found, func(a, b string) int { return versionOf(b) - versionOf(a) })
		dirs = append(dirs, found...)
	}
	for _, d := range dirs {
		if isExecutable(filepath.Join(d, "initdb")) && isExecutable(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errors.New("no PostgreSQL server found (initdb and postgres on PATH or in /usr/lib/postgresql/*/bin); " +
		"install it (apt-get install postgresql) or set " + EnvPostgresURL)
}

// versionOf reads the major version out of a path like
// /usr/lib/postgresql/16/bin.
func versionOf(dir string) int {
	for _, part := range strings.Split(dir, string(filepath.Separator)) {
		part = strings.TrimPrefix(part, "pgsql-")
		if n, err := strconv.Atoi(part); err == nil {
			return n
		}
	}
	return 0
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

type osUser struct {
	name     string
	uid, gid uint32
}

// serverUser is the user to run the server as: nil (the current user)
// unless that is root, which PostgreSQL refuses; then "postgres", else
// "nobody".
func serverUser() (*osUser, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			continue
		}
		return &osUser{name: name, uid: uint32(uid), gid: uint32(gid)}, nil
	}
	return nil, errors.New("running as root, which PostgreSQL refuses, and neither user postgres nor nobody exists to run it as")
}

// serverEnv is the environment for initdb and postgres: ours without
// libpq's PG* variables, in the C locale.
func serverEnv(home string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") || strings.HasPrefix(kv, "LC_") || strings.HasPrefix(kv, "LANG=") || strings.HasPrefix(kv, "HOME=") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C", "LANG=C", "HOME="+home)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail is the end of a log, for error messages.
func tail(b []byte) string {
	const max = 2000
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return strings.TrimSpace(string(b))
}

// redact hides a URL's password.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}
