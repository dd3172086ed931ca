package sqlrow

import (
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
)

// The migrations' partial indexes name the codes by number: they may not
// move, and each reads back as its api status.
func TestStatusCodesAreFixed(t *testing.T) {
	for code, want := range map[int]api.Status{0: api.StatusPending, 1: api.StatusRunning, 2: api.StatusCompleted, 3: api.StatusDead, 4: api.StatusPending} {
		if got := StatusName(code); got != want {
			t.Errorf("StatusName(%d) = %q, want %q", code, got, want)
		}
		if c, ok := StatusCode(want); !ok || (code != Scheduled && c != code) {
			t.Errorf("StatusCode(%q) = %d, %v; want %d", want, c, ok, code)
		}
	}
	if got := StatusName(5); got != "" {
		t.Errorf("StatusName(5) = %q, want none", got)
	}
	if _, err := FinishedStatus(api.StatusRunning); err == nil || err.Error() != `retention works on completed or dead jobs, not "running"` {
		t.Errorf("FinishedStatus(running) = %v", err)
	}
	if c, err := FinishedStatus(api.StatusDead); err != nil || c != Dead {
		t.Errorf("FinishedStatus(dead) = %d, %v", c, err)
	}
}

// A job is due when its run_at as stored (to the microsecond) is not after
// now, and run_at round-trips through the column to the microsecond, also
// before 1970.
func TestRunAtToTheMicrosecond(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 1000, time.UTC)
	for _, c := range []struct {
		runAt time.Time
		want  int
	}{
		{now, Pending},
		{now.Add(999 * time.Nanosecond), Pending}, // stored as now
		{now.Add(time.Microsecond), Scheduled},
		{now.Add(-time.Hour), Pending},
	} {
		if got := PendingStatus(c.runAt, now); got != c.want {
			t.Errorf("PendingStatus(%v, %v) = %d, want %d", c.runAt, now, got, c.want)
		}
	}
	for _, at := range []time.Time{now.Add(123 * time.Nanosecond), time.Date(1969, 12, 31, 23, 59, 59, 999999500, time.UTC)} {
		if got, want := FromRunAtMicros(RunAtMicros(at)), at.Truncate(time.Microsecond); !got.Equal(want) {
			t.Errorf("%v through the column: %v, want %v", at, got, want)
		}
	}
}
