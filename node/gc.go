package node

// DefaultGCPercent is a node's garbage-collection target unless GOGC says
// otherwise. A node's live heap is small (tens of MiB) and it allocates
// per request, so at Go's default of 100 it collects several times a
// second under load; 400 costs about 20 MiB of peak memory and measured
// 4-20 % more jobs/s (README, Garbage collection). GOMEMLIMIT, when set,
// still caps the heap.
const DefaultGCPercent = 400

// GCPercent says what GC target a process running a node should set: none
// when the operator set GOGC. cmd/node applies it, and so do the in-process
// benchmarks, to measure the node as it ships.
func GCPercent(getenv func(string) string) (int, bool) {
	if getenv("GOGC") != "" {
		return 0, false
	}
	return DefaultGCPercent, true
}
