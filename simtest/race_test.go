//go:build race

package simtest

// raceEnabled: the race detector slows SQLite (pure Go) some 30 times, so
// TestSeeds plays shorter runs by default.
const raceEnabled = true
