package e2e

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/flexiq/flexiq/internal/testserver"
)

// TestMain runs the tests, stops the throwaway database servers they
// started, and then checks that nothing the nodes started lingers.
func TestMain(m *testing.M) {
	code := testserver.Run(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutines left behind:", err)
			code = 1
		}
	}
	os.Exit(code)
}
