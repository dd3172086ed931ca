//go:build unix

package node

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// withUmask022 runs the test under the usual umask: a stricter one would
// hide modes the code got wrong.
func withUmask022(t *testing.T) {
	old := syscall.Umask(0o022)
	t.Cleanup(func() { syscall.Umask(old) })
}

func perm(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func writeFile(t *testing.T, path, data string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
}

const secretText = "fq_root_S3CRET-CONTENT"

func TestSecureDataDirCreatesItOwnerOnly(t *testing.T) {
	withUmask022(t)
	dir := filepath.Join(t.TempDir(), "new", "data")
	var log bytes.Buffer
	if err := secureDataDir(dir, slog.New(slog.NewTextHandler(&log, nil))); err != nil {
		t.Fatal(err)
	}
	if m := perm(t, dir); m != 0o700 {
		t.Fatalf("new data dir: mode %#o, want 0700", m)
	}
	if log.Len() != 0 {
		t.Fatalf("nothing was tightened, yet the log says %q", log.String())
	}
}

// A data dir and files found with wider modes are tightened, each with a
// log line that names the path and never the content. A mode already
// stricter stays; a symbolic link is not followed out of the dir.
func TestSecureDataDirTightensWhatItFinds(t *testing.T) {
	withUmask022(t)
	base := t.TempDir()
	dir := filepath.Join(base, "data")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	wide := map[string]os.FileMode{
		"root.token": 0o644, "cluster.secret": 0o640, "flexiq.db": 0o666, "flexiq.db-wal": 0o604, "flexiq.db-shm": 0o755,
	}
	for name, m := range wide {
		writeFile(t, filepath.Join(dir, name), secretText, m)
	}
	writeFile(t, filepath.Join(dir, "readonly"), "x", 0o400)
	outside := filepath.Join(base, "outside")
	writeFile(t, outside, "x", 0o644)
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}

	var log bytes.Buffer
	if err := secureDataDir(dir, slog.New(slog.NewTextHandler(&log, nil))); err != nil {
		t.Fatal(err)
	}
	if m := perm(t, dir); m != 0o700 {
		t.Errorf("data dir: mode %#o, want 0700", m)
	}
	for name := range wide {
		if m := perm(t, filepath.Join(dir, name)); m != 0o600 {
			t.Errorf("%s: mode %#o, want 0600", name, m)
		}
	}
	if m := perm(t, filepath.Join(dir, "readonly")); m != 0o400 {
		t.Errorf("a 0400 file became %#o", m)
	}
	if m := perm(t, outside); m != 0o644 {
		t.Errorf("a file outside the data dir, reached by a link, became %#o", m)
	}
	out := log.String()
	if strings.Contains(out, "S3CRET") {
		t.Fatalf("the log shows a secret:\n%s", out)
	}
	if n := strings.Count(out, "tightened permissions"); n != len(wide)+1 {
		t.Errorf("%d log lines, want one per tightened file and the dir:\n%s", n, out)
	}
	for name := range wide {
		if !strings.Contains(out, filepath.Join(dir, name)) {
			t.Errorf("the log does not name %s:\n%s", name, out)
		}
	}
}

func TestWriteSecretIsOwnerOnlyAndNeverOverwrites(t *testing.T) {
	withUmask022(t)
	path := filepath.Join(t.TempDir(), "cluster.secret")
	if err := writeSecret(path, []byte(secretText)); err != nil {
		t.Fatal(err)
	}
	if m := perm(t, path); m != 0o600 {
		t.Fatalf("mode %#o, want 0600", m)
	}
	if err := writeSecret(path, []byte("other")); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second write: %v, want it refused", err)
	}
	if got, _ := os.ReadFile(path); string(got) != secretText {
		t.Fatalf("the existing secret became %q", got)
	}
}

// A start reaches the data dir before anything heavy: even one that fails
// on an unreachable store (no NATS started) has made the dir 0700, the
// root token it found 0600 and a new one 0600, and says nothing of the
// store's password or the token.
func TestStartSecuresTheDataDirAndHidesTheStorePassword(t *testing.T) {
	withUmask022(t)
	for _, existing := range []bool{true, false} {
		dir := filepath.Join(t.TempDir(), "data")
		if existing {
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			writeFile(t, filepath.Join(dir, "root.token"), secretText+"\n", 0o644)
		}
		var log bytes.Buffer
		cfg := Defaults()
		cfg.DataDir = dir
		cfg.Store = "redis://:s3cret@127.0.0.1:1/0?dial_timeout=1s"
		cfg.Log = slog.New(slog.NewTextHandler(&log, nil))
		n, err := Start(context.Background(), cfg)
		if err == nil {
			n.Stop(context.Background())
			t.Fatal("started on an unreachable store")
		}
		if strings.Contains(err.Error(), "s3cret") || strings.Contains(log.String(), "s3cret") {
			t.Fatalf("the store password shows: %v\n%s", err, log.String())
		}
		if strings.Contains(log.String(), "S3CRET") {
			t.Fatalf("the log shows the root token:\n%s", log.String())
		}
		if m := perm(t, dir); m != 0o700 {
			t.Errorf("existing=%v: data dir mode %#o, want 0700", existing, m)
		}
		if m := perm(t, filepath.Join(dir, "root.token")); m != 0o600 {
			t.Errorf("existing=%v: root.token mode %#o, want 0600", existing, m)
		}
		if existing && !strings.Contains(log.String(), "tightened permissions") {
			t.Errorf("nothing logged of the tightening:\n%s", log.String())
		}
	}
}
