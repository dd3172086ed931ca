package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/flexiq/flexiq/node"
)

// The banner's store line never shows a password (docs/security.md).
func TestBannerStoreLabelHidesThePassword(t *testing.T) {
	for _, store := range []string{
		"redis://:s3cret@127.0.0.1:6379/0",
		"postgres://u:s3cret@db:5432/flexiq?sslmode=require",
		"postgres://u@db/flexiq?password=s3cret",
	} {
		got := storeLabel(node.Config{Store: store})
		if strings.Contains(got, "s3cret") || !strings.Contains(got, "***") {
			t.Errorf("storeLabel(%q) = %q", store, got)
		}
	}
	if got := storeLabel(node.Config{DataDir: "/d"}); got != "sqlite:///d/flexiq.db" {
		t.Errorf("default store: %q", got)
	}
}

// A start that fails on the store, unreachable (exit 1) or mistyped
// (exit 2), says so without the store's password.
func TestFailedStartNeverShowsTheStorePassword(t *testing.T) {
	for _, tc := range []struct {
		store string
		code  int
	}{
		{"redis://:s3cret@127.0.0.1:1", 1},
		{"postgres://u:s3cret@127.0.0.1:1/x?connect_timeout=1", 1},
		{"redis://:s3cret@127.0.0.1:x", 2},
		{"mysql://u:s3cret@db/flexiq", 2},
	} {
		var out, errb bytes.Buffer
		code := realMain([]string{"--data-dir", t.TempDir(), "--store", tc.store,
			"--nats-listen", "127.0.0.1:-1", "--admin-addr", "127.0.0.1:0"}, env(nil), &out, &errb)
		if code != tc.code || !strings.Contains(errb.String(), "store") {
			t.Errorf("%s: exit %d, stderr %q; want %d naming the store", tc.store, code, errb.String(), tc.code)
		}
		if strings.Contains(out.String()+errb.String(), "s3cret") {
			t.Errorf("%s: the password shows:\nstdout %q\nstderr %q", tc.store, out.String(), errb.String())
		}
	}
}
