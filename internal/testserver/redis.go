package testserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// EnvRedisURL names an existing Redis server for the tests to use instead
// of starting one (redis://[user:password@]host:port[/db]). Its database
// numbers other than db (default 0) are handed out to tests and flushed:
// point it at a server you can spare.
const EnvRedisURL = "FLEXIQ_TEST_REDIS_URL"

// redisDatabases is how many databases a started server has: one holds the
// leases, the others are handed out.
const redisDatabases = 256

// redisLeaseTTL bounds how long a lease of a test binary that died
// without releasing it keeps its database.
const redisLeaseTTL = time.Hour

// RedisServer is a Redis server that hands out fresh databases (database
// numbers, flushed): one this package started (StartRedis) or an existing
// one (ConnectRedis). Leases are kept in the server itself, in its lease
// database, so test binaries sharing one server never get the same
// database at once.
type RedisServer struct {
	// URL reaches the server's lease database.
	URL string

	opts      *goredis.Options
	admin     *goredis.Client
	leaseDB   int
	databases int
	owner     string // this process's lease value

	mu     sync.Mutex
	leased map[int]bool
	freed  chan struct{} // a lease of this process was released

	// A started server only.
	cmd     *exec.Cmd
	dir     string
	logPath string
	exited  chan struct{}
	stopped sync.Once
	stopErr error
}

var (
	redisOnce     sync.Once
	redisShared   *RedisServer
	redisErr      error
	redisExternal bool
)

// Redis returns the URL of a fresh, empty Redis database for t, flushed and
// handed back when t ends. The first call of a test binary starts its
// server: the one FLEXIQ_TEST_REDIS_URL names, else a throwaway
// redis-server (which needs Main in TestMain). Without either, t is skipped
// (failed under FLEXIQ_REQUIRE_ALL_BACKENDS=1).
func Redis(t testing.TB) string {
	t.Helper()
	external := os.Getenv(EnvRedisURL) != ""
	if !external && !mainRunning.Load() {
		t.Fatal("testserver.Redis starts a throwaway Redis server that only testserver.Main stops: " +
			"add func TestMain(m *testing.M) { testserver.Main(m) } to the package's tests")
	}
	redisOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if u := os.Getenv(EnvRedisURL); u != "" {
			redisExternal = true
			redisShared, redisErr = ConnectRedis(ctx, u)
			if redisErr != nil {
				redisErr = fmt.Errorf("%s: %w", EnvRedisURL, redisErr)
			}
		} else {
			redisShared, redisErr = StartRedis(ctx)
		}
		if redisErr == nil {
			atExit(func() { _ = redisShared.Stop() })
		}
	})
	if redisErr != nil {
		if redisExternal {
			t.Fatalf("redis backend: %v", redisErr)
		}
		unavailable(t, "redis", redisErr)
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	u, release, err := redisShared.NewDatabase(ctx)
	if err != nil {
		t.Fatalf("redis backend: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := release(ctx); err != nil {
			t.Errorf("redis backend: %v", err)
		}
	})
	return u
}

// ConnectRedis uses an existing server. Its database in rawURL (default 0)
// holds the leases; the others are handed out.
func ConnectRedis(ctx context.Context, rawURL string) (*RedisServer, error) {
	s := &RedisServer{URL: rawURL}
	if err := s.connect(ctx); err != nil {
		return nil, err
	}
	n, err := s.admin.ConfigGet(ctx, "databases").Result()
	s.databases = 16 // Redis's default, where CONFIG is not allowed
	if err == nil {
		if d, err := strconv.Atoi(n["databases"]); err == nil {
			s.databases = d
		}
	}
	if s.databases < 2 {
		s.admin.Close()
		return nil, fmt.Errorf("%s has %d database(s); the tests need one for leases and more to hand out", redact(rawURL), s.databases)
	}
	return s, nil
}

// StartRedis starts a throwaway redis-server on a free loopback port with
// persistence off. Stop stops it.
func StartRedis(ctx context.Context) (*RedisServer, error) {
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		return nil, errors.New("redis-server not found on PATH; install it (apt-get install redis-server) or set " + EnvRedisURL)
	}
	dir, err := os.MkdirTemp("", "flexiq-redis-")
	if err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	s := &RedisServer{dir: dir, logPath: filepath.Join(dir, "redis.log"), databases: redisDatabases}
	ok := false
	defer func() {
		if !ok {
			_ = s.Stop()
		}
	}()
	// A port found free may be taken before redis-server binds it: try a few.
	for try := 0; ; try++ {
		err = s.start(ctx, bin)
		if err == nil {
			break
		}
		if try == 2 || ctx.Err() != nil {
			return nil, err
		}
	}
	ok = true
	return s, nil
}

func (s *RedisServer) start(ctx context.Context, bin string) error {
	port, err := freePort()
	if err != nil {
		return err
	}
	logf, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("server log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--databases", strconv.Itoa(redisDatabases), "--dir", s.dir)
	cmd.Dir, cmd.Stdout, cmd.Stderr = s.dir, logf, logf
	if err := setServerProc(cmd, nil, true); err != nil {
		return err
	}
	exited := make(chan struct{})
	started := make(chan error, 1)
	go func() {
		// The parent-death signal follows the thread that forked the
		// server: fork from one that lives as long as the server.
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
	s.URL = fmt.Sprintf("redis://127.0.0.1:%d/0", port)
	if s.admin != nil {
		s.admin.Close()
		s.admin = nil
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := s.connect(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-exited:
			s.cmd = nil
			return fmt.Errorf("redis-server exited before accepting connections: %s", s.logTail())
		case <-ctx.Done():
			return fmt.Errorf("redis-server not ready: %w (%v)", ctx.Err(), err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server not accepting connections after 30s: %v\n%s", err, s.logTail())
		}
	}
}

func (s *RedisServer) connect(ctx context.Context) error {
	opts, err := goredis.ParseURL(s.URL)
	if err != nil {
		return fmt.Errorf("parse %s: %w", redact(s.URL), err)
	}
	opts.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	opts.PoolSize = 4
	admin := goredis.NewClient(opts)
	if err := admin.Ping(ctx).Err(); err != nil {
		admin.Close()
		return fmt.Errorf("connect %s: %w", redact(s.URL), err)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	s.opts, s.admin, s.leaseDB = opts, admin, opts.DB
	s.owner = fmt.Sprintf("pid %d %s", os.Getpid(), hex.EncodeToString(b[:]))
	s.leased = map[int]bool{}
	s.freed = make(chan struct{}, 1)
	return nil
}

func redisLeaseKey(db int) string { return "flexiq:testserver:lease:" + strconv.Itoa(db) }

// redisRelease deletes a lease key only if it still holds our value.
var redisRelease = goredis.NewScript(`if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`)

// NewDatabase leases a database number, flushes it and returns its URL and
// the func that flushes it and hands it back. It waits while every
// database is leased.
func (s *RedisServer) NewDatabase(ctx context.Context) (dbURL string, release func(context.Context) error, err error) {
	for {
		db, err := s.lease(ctx)
		if err != nil {
			return "", nil, err
		}
		if db >= 0 {
			if err := s.flush(ctx, db); err != nil {
				_ = s.unlease(ctx, db)
				return "", nil, err
			}
			u, err := url.Parse(s.URL)
			if err != nil {
				_ = s.unlease(ctx, db)
				return "", nil, fmt.Errorf("parse %s: %w", redact(s.URL), err)
			}
			u.Path = "/" + strconv.Itoa(db)
			return u.String(), func(ctx context.Context) error {
				return errors.Join(s.flush(ctx, db), s.unlease(ctx, db))
			}, nil
		}
		// All taken: wait for one of ours, or poll for other processes'.
		select {
		case <-s.freed:
		case <-time.After(100 * time.Millisecond):
		case <-ctx.Done():
			return "", nil, fmt.Errorf("no free database among %d on %s: %w", s.databases-1, redact(s.URL), ctx.Err())
		}
	}
}

// lease takes a free database number, or returns -1 when there is none.
func (s *RedisServer) lease(ctx context.Context) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for db := 0; db < s.databases; db++ {
		if db == s.leaseDB || s.leased[db] {
			continue
		}
		ok, err := s.admin.SetNX(ctx, redisLeaseKey(db), s.owner, redisLeaseTTL).Result()
		if err != nil {
			return -1, fmt.Errorf("lease a database: %w", err)
		}
		if ok {
			s.leased[db] = true
			return db, nil
		}
	}
	return -1, nil
}

func (s *RedisServer) unlease(ctx context.Context, db int) error {
	err := redisRelease.Run(ctx, s.admin, []string{redisLeaseKey(db)}, s.owner).Err()
	s.mu.Lock()
	delete(s.leased, db)
	s.mu.Unlock()
	select {
	case s.freed <- struct{}{}:
	default:
	}
	if err != nil {
		return fmt.Errorf("release database %d: %w", db, err)
	}
	return nil
}

func (s *RedisServer) flush(ctx context.Context, db int) error {
	opts := *s.opts
	opts.DB, opts.PoolSize = db, 1
	c := goredis.NewClient(&opts)
	defer c.Close()
	if err := c.FlushDB(ctx).Err(); err != nil {
		return fmt.Errorf("flush database %d: %w", db, err)
	}
	return nil
}

// Stop closes the admin connection and, for a server StartRedis started,
// shuts it down (SIGTERM, then a kill after 10 s) and removes its directory.
func (s *RedisServer) Stop() error {
	s.stopped.Do(func() {
		if s.admin != nil {
			s.admin.Close()
		}
		s.stopErr = stopProcess(s.cmd, s.exited, syscall.SIGTERM, "redis-server", s.dir)
	})
	return s.stopErr
}

func (s *RedisServer) logTail() string {
	b, _ := os.ReadFile(s.logPath)
	return tail(b)
}
