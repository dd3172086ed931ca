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

// TestMain runs the tests, stops the throwaway database servers they
// started, and then checks that nothing the nodes started lingers.
func TestMain(m *testing.M) {
	// The nodes run in this process: collect garbage as fq-node does, so
	// the benchmarks measure the node as it ships.
	if pct, ok := node.GCPercent(os.Getenv); ok {
		debug.SetGCPercent(pct)
	}
	code := testserver.Run(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}
