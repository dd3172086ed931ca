package node

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
)

// The data dir holds the database, its WAL and the secrets (root.token,
// cluster.secret): docs/security.md has the dir 0700 and every file in it 0600, so
// no other user of the machine can read a token or a job.
const (
	dataDirMode os.FileMode = 0o700
	secretMode  os.FileMode = 0o600
)

// secureDataDir creates dir 0700, or tightens the one found to 0700, and
// tightens every file directly in it to 0600, each change logged. Files
// created later are made 0600 by their writers (writeSecret, the SQLite
// store). Symbolic links are left alone: chmod would follow them out of
// the dir. Subdirectories are out of reach behind the dir's own 0700.
func secureDataDir(dir string, log *slog.Logger) error {
	if err := os.MkdirAll(dir, dataDirMode); err != nil {
		return err
	}
	if err := secureDir(dir, log); err != nil {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if err := secureFile(filepath.Join(dir, e.Name()), log); err != nil {
			return err
		}
	}
	return nil
}

// secureDir takes any access but the owner's off the directory at path.
func secureDir(path string, log *slog.Logger) error {
	return tighten(path, dataDirMode, log)
}

// secureFile takes any access but the owner's read and write off the file
// at path.
func secureFile(path string, log *slog.Logger) error {
	return tighten(path, secretMode, log)
}

// tighten clears every permission bit of path outside limit, logging the
// change; a mode already within limit is left as it is (a 0400 file stays
// 0400). The log line names the path and modes only: never content.
func tighten(path string, limit os.FileMode, log *slog.Logger) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	perm := fi.Mode().Perm()
	if perm&^limit == 0 {
		return nil
	}
	if err := os.Chmod(path, perm&limit); err != nil {
		return fmt.Errorf("tighten %s from %#o to %#o: %w", path, perm, perm&limit, err)
	}
	if log != nil {
		log.Warn("tightened permissions: no one but the owner may read the data dir", "path", path,
			"from", fmt.Sprintf("%#o", perm), "to", fmt.Sprintf("%#o", perm&limit))
	}
	return nil
}

// writeSecret creates path 0600 holding data. It never writes into a file
// that exists (whose mode, and maybe owner, another put there); a partial
// file is removed.
func writeSecret(path string, data []byte) (err error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, secretMode)
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, os.Remove(path))
		}
	}()
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
