// Package testserver gives tests throwaway database servers: one server per
// backend per test binary, started on first use and shared by its tests,
// each test getting a fresh, empty database of its own so tests may run in
// parallel.
//
// A test binary that uses it runs its tests through Main (or Run), which
// stops the servers once the tests are done:
//
//	func TestMain(m *testing.M) { testserver.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		url := testserver.Postgres(t) // postgres://… of a new database
//		rdb := testserver.Redis(t)    // redis://… of a flushed database
//		…
//	}
//
// A backend whose server can be neither found nor started skips the test
// with a message naming the backend and the reason; with
// FLEXIQ_REQUIRE_ALL_BACKENDS=1 (for CI) it fails the test instead.
//
// Environment:
//
//	FLEXIQ_TEST_POSTGRES_URL     use this PostgreSQL server instead of starting one
//	                             (postgres://user:password@host:port/db?…); each test
//	                             gets a database of its own on it, or a schema of its
//	                             own when the role may not create databases
//	FLEXIQ_TEST_REDIS_URL        use this Redis server instead of starting one (see
//	                             EnvRedisURL: its other databases are flushed)
//	FLEXIQ_REQUIRE_ALL_BACKENDS  1: fail, rather than skip, when a backend is missing
//
// The PostgreSQL server runs as the current user or, when that is root
// (which PostgreSQL refuses), as the user "postgres" (else "nobody").
// Servers get the parent-death signal on Linux, so even a test binary that
// dies without running Main takes its servers with it.
package testserver

import (
	"os"
	"sync"
	"sync/atomic"
	"testing"
)

const envRequireAll = "FLEXIQ_REQUIRE_ALL_BACKENDS"

var (
	// mainRunning is set by Main: a server started outside it would never
	// be stopped, so starting one requires it.
	mainRunning atomic.Bool

	stopMu sync.Mutex
	stops  []func()
)

// Main runs the tests of m and then stops every server this package
// started, and exits with the tests' code. Call it from TestMain.
func Main(m *testing.M) {
	mainRunning.Store(true)
	code := m.Run()
	runStops()
	os.Exit(code)
}

// atExit registers f to run when Main finishes, after the tests; the last
// registered runs first.
func atExit(f func()) {
	stopMu.Lock()
	defer stopMu.Unlock()
	stops = append(stops, f)
}

func runStops() {
	stopMu.Lock()
	fs := stops
	stops = nil
	stopMu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// requireAll reports whether a missing backend must fail the test.
func requireAll() bool {
	return os.Getenv(envRequireAll) == "1"
}

// unavailable ends t because backend cannot be had: a skip, or a failure
// under FLEXIQ_REQUIRE_ALL_BACKENDS=1.
func unavailable(t testing.TB, backend string, err error) {
	t.Helper()
	if requireAll() {
		t.Fatalf("%s backend unavailable (%s=1, so this fails rather than skips): %v", backend, envRequireAll, err)
	}
	t.Skipf("%s backend skipped: %v (set %s=1 to fail instead)", backend, err, envRequireAll)
}
