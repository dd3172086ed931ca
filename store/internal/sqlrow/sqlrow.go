// Package sqlrow is what the SQL stores (PostgreSQL and SQLite) share of
// how a job is kept in a row: its status as a small integer, which the
// status column holds and the partial indexes' predicates and the
// statements name by number (status = 0, status IN (2, 3)), and its
// run_at in microseconds. Both stores' migrations rely on these numbers,
// so they are written here once and never renumbered.
package sqlrow

import (
	"fmt"
	"time"

	"github.com/flexiq/flexiq/api"
)

// Status codes in the status column.
const (
	Pending   = 0
	Running   = 1
	Completed = 2
	Dead      = 3
	Scheduled = 4 // pending, run_at in the future
)

// names is the api status of each code (Scheduled is pending).
var names = [...]api.Status{api.StatusPending, api.StatusRunning, api.StatusCompleted, api.StatusDead, api.StatusPending}

// PendingStatus is the code of a pending job due at runAt, seen at now:
// due when its run_at as stored (to the microsecond) is not after now, as
// a claim's promotion decides.
func PendingStatus(runAt, now time.Time) int {
	if runAt.Truncate(time.Microsecond).After(now) {
		return Scheduled
	}
	return Pending
}

// StatusCode is the code of s (Pending for pending: a filter by status
// that must also find scheduled jobs says so itself).
func StatusCode(s api.Status) (int, bool) {
	switch s {
	case api.StatusPending:
		return Pending, true
	case api.StatusRunning:
		return Running, true
	case api.StatusCompleted:
		return Completed, true
	case api.StatusDead:
		return Dead, true
	}
	return 0, false
}

// FinishedStatus is the code of a finished status, which retention
// deletes: completed or dead.
func FinishedStatus(s api.Status) (int, error) {
	if s != api.StatusCompleted && s != api.StatusDead {
		return 0, fmt.Errorf("retention works on completed or dead jobs, not %q", s)
	}
	code, _ := StatusCode(s)
	return code, nil
}

// StatusName is the api status of code, "" for a code no store writes.
func StatusName(code int) api.Status {
	if code >= 0 && code < len(names) {
		return names[code]
	}
	return ""
}

// RunAtMicros is run_at as the run_at column holds it.
func RunAtMicros(t time.Time) int64 { return t.UnixMicro() }

// FromRunAtMicros is the run_at column's value as a time.
func FromRunAtMicros(us int64) time.Time { return time.UnixMicro(us).UTC() }
