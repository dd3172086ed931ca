package open

import (
	"context"
	"strings"
	"testing"
)

// What Check and Open say about a bad or unreachable store never shows
// its password.
func TestStoreErrorsNeverShowThePassword(t *testing.T) {
	for _, raw := range []string{
		"mysql://u:s3cret@h/db",
		"redis://:s3cret@h:x",
		"redis://:s3cret@h/0?prefix=",
		"postgres:/u:s3cret@h/db",
	} {
		if err := Check(raw); err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Check(%q) = %v; want an error without the password", raw, err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, raw := range []string{
		"postgres://u:s3cret@127.0.0.1:1/x?connect_timeout=1",
		"postgres://u:s3cret@127.0.0.1:1/x?connect_timeout=bad",
		// A password in the query, with a parse error to report.
		"postgres://u@127.0.0.1:1/x?password=s3cret&connect_timeout=bad",
		"redis://:s3cret@127.0.0.1:1/0?dial_timeout=1s",
		"redis://:s3cret@127.0.0.1:1/0?dial_timeout=soon",
	} {
		s, err := Open(ctx, raw)
		if err == nil {
			s.Close()
			t.Fatalf("Open(%q) succeeded", raw)
		}
		if strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q): %v", raw, err)
		}
	}
}
