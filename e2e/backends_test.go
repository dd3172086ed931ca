package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flexiq/flexiq/internal/testserver"
)

// backends are the stores every end-to-end test runs against.
var backends = []string{"sqlite", "postgres", "redis"}

// eachBackend runs fn once per backend, as subtests named after it; start
// and storeURLFor read the backend from the subtest's name.
func eachBackend(t *testing.T, fn func(t *testing.T)) {
	for _, b := range backends {
		t.Run(b, fn)
	}
}

// eachSharedBackend is eachBackend for tests of several nodes on one
// store: SQLite cannot be shared (a node refuses to serve next to another).
func eachSharedBackend(t *testing.T, fn func(t *testing.T)) {
	for _, b := range backends {
		if b != "sqlite" {
			t.Run(b, fn)
		}
	}
}

// backendOf is the backend of a test run by eachBackend (sqlite otherwise).
func backendOf(t testing.TB) string {
	parts := strings.Split(t.Name(), "/")
	if len(parts) > 1 {
		for _, b := range backends {
			if parts[1] == b {
				return b
			}
		}
	}
	return "sqlite"
}

// storeURLFor gives the test a fresh, empty store of its backend.
func storeURLFor(t testing.TB, dir string) string {
	switch backendOf(t) {
	case "postgres":
		return testserver.Postgres(t)
	case "redis":
		return testserver.Redis(t)
	default:
		return "sqlite://" + filepath.Join(dir, "flexiq.db")
	}
}

func httpGet(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func decode(t *testing.T, b []byte, v any) {
	t.Helper()
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
}
