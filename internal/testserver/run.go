package testserver

import "testing"

// Run is Main without the exit: it runs the tests, stops the servers and
// returns the tests' code, for a TestMain with more to check afterwards
// (goroutine leaks, say).
func Run(m *testing.M) int {
	mainRunning.Store(true)
	code := m.Run()
	runStops()
	return code
}
