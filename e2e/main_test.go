package e2e

import (
	"testing"

	"go.uber.org/goleak"
)

// Every node a test starts is stopped by its cleanup; nothing may linger.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
