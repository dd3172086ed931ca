package e2e

import (
	"fmt"
	"os"
	"runtime/debug"
	"testing"

	"go.uber.org/goleak"

	"github.com/flexiq/flexiq/internal/testserver"
	"github.com/flexiq/flexiq/node"
)

// binDir holds the binaries this test binary builds (fq-node,
// nats-server), made and removed by TestMain: each is tens of megabytes,
// and a directory left behind per run fills a CI machine's /tmp.
var binDir string

// TestMain runs the tests, stops the throwaway database servers they
// started, removes the binaries they built, and then checks that nothing
// the nodes started lingers.
func TestMain(m *testing.M) {
	// The nodes run in this process: collect garbage as fq-node does, so
	// the benchmarks measure the node as it ships.
	if pct, ok := node.GCPercent(os.Getenv); ok {
		debug.SetGCPercent(pct)
	}
	dir, err := os.MkdirTemp("", "flexiq-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "a directory for the binaries the tests build:", err)
		os.Exit(1)
	}
	binDir = dir
	code := testserver.Run(m)
	if err := os.RemoveAll(dir); err != nil {
		fmt.Fprintln(os.Stderr, "removing the built binaries:", err)
		code = 1
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}
