package sqlite_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The store runs a checkpointer goroutine; Close must end it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
