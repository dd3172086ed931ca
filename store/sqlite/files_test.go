//go:build unix

package sqlite_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/flexiq/flexiq/store"
	"github.com/flexiq/flexiq/store/sqlite"
)

// withUmask022 runs the test under the usual umask, with which SQLite on
// its own would create the database and its -wal and -shm 0644: a
// stricter umask would hide what Open does.
func withUmask022(t *testing.T) {
	old := syscall.Umask(0o022)
	t.Cleanup(func() { syscall.Umask(old) })
}

func mode(t *testing.T, path string) os.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

// write puts a setting, so the WAL and its index exist, and keeps the
// store open while the test looks at them.
func write(t *testing.T, s *sqlite.Store) {
	t.Helper()
	if _, err := s.SettingPut(context.Background(), store.SettingPutParams{Key: "k", Value: []byte(`1`), Now: time.Unix(1000, 0)}); err != nil {
		t.Fatal(err)
	}
}

// A new database, its -wal and -shm are 0600, and the directories Open
// creates for it 0700 (docs/security.md).
func TestNewDatabaseFilesAreOwnerOnly(t *testing.T) {
	withUmask022(t)
	base := t.TempDir()
	path := filepath.Join(base, "a", "b", "flexiq.db")
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	write(t, s)
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if m := mode(t, p); m != 0o600 {
			t.Errorf("%s: mode %#o, want 0600", filepath.Base(p), m)
		}
	}
	for _, d := range []string{filepath.Join(base, "a"), filepath.Dir(path)} {
		if m := mode(t, d); m != 0o700 {
			t.Errorf("directory %s: mode %#o, want 0700", d, m)
		}
	}
}

// A database found with a wider mode, and a -wal and -shm left behind
// with one, are tightened to 0600 at open; the directory, which Open did
// not create, is left alone.
func TestExistingDatabaseFilesAreTightened(t *testing.T) {
	withUmask022(t)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "flexiq.db")
	s, err := sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	write(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
		if err := os.Chmod(p, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err = sqlite.Open(context.Background(), path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	write(t, s)
	for _, p := range []string{path, path + "-wal", path + "-shm"} {
		if m := mode(t, p); m != 0o600 {
			t.Errorf("%s: mode %#o, want 0600", filepath.Base(p), m)
		}
	}
	if m := mode(t, dir); m != 0o755 {
		t.Errorf("the operator's directory: mode %#o, want it left at 0755", m)
	}
}
