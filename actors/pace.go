package actors

import (
	"slices"
	"time"

	"github.com/flexiq/flexiq/api"
)

// Pace is refusal pacing (docs/protocol.md "Refusals are paced"): a namespace
// that keeps calling past its quota costs the node CPU for every refused
// call (decoding, the actor's turn, the reply, and on the bus about as
// much again), and that CPU is every other namespace's latency. So a
// client's quota refusals beyond a burst are answered no faster than a
// steady rate, each held at most a while: a producer that waits for its
// answers (as the SDKs do) slows to that rate, one that stops calling
// soon gets its answers at once again. Admission itself is untouched:
// the call was refused, wrote nothing, and is answered the same, later.
type Pace struct {
	// Burst refusals in a row are answered at once...
	Burst int
	// ...then one every Interval.
	Interval time.Duration
	// MaxHold is the longest a refusal is held.
	MaxHold time.Duration
	// MaxHeld bounds the refusals a namespace holds; past it they are
	// answered at once (a held refusal keeps its answer and reply in
	// memory, and on the bus the caller's request stays open).
	MaxHeld int
}

// DefaultPace is a node's pace (docs/protocol.md): 100 a second after a
// burst of ten seconds' worth (1000 refusals at once, so a short run of
// refusals, a test's or a producer's before it backs off, is answered at
// once), each held at most 1 s, at most 256 held.
func DefaultPace() Pace { return PaceOf(100) }

// PaceOf is the pace of perSecond refusals a second after a burst of ten
// seconds' worth.
func PaceOf(perSecond int) Pace {
	return Pace{Burst: 10 * perSecond, Interval: time.Second / time.Duration(perSecond), MaxHold: time.Second, MaxHeld: 256}
}

// pacer is a namespace's refusal pacing: a GCRA over its quota refusals.
type pacer struct {
	cfg Pace
	// tat is when the refusal pace would next be at rest: each refusal
	// moves it an interval later; it is never more than the burst plus
	// the longest hold ahead of now.
	tat  time.Time
	held []HeldRefusal // by at, oldest first
}

// HeldRefusal is a refused call whose answer waits for its turn.
type HeldRefusal struct {
	Msg *Message
	Err *api.Error
	at  time.Time
}

// PaceRefusal decides when m's quota refusal err is answered: true, now;
// false, the core holds it and DueRefusals returns it at its turn. Only a
// client's calls (Message.Paced) are paced, and only quota refusals.
func (c *Core) PaceRefusal(m *Message, err *api.Error, now time.Time) bool {
	if !m.Paced || (err.Reason != api.ReasonQueueFull && err.Reason != api.ReasonRateLimited) {
		return true
	}
	p := &c.pace
	if p.cfg.Interval <= 0 {
		return true // no pace
	}
	burst := time.Duration(p.cfg.Burst) * p.cfg.Interval
	if p.tat.Before(now) {
		p.tat = now
	}
	// Within the burst the answer goes now; past it, at the time the
	// pace allows, capped at the longest hold.
	at := p.tat.Add(p.cfg.Interval - burst)
	p.tat = minTime(p.tat.Add(p.cfg.Interval), now.Add(burst+p.cfg.MaxHold))
	if !at.After(now) || len(p.held) >= p.cfg.MaxHeld {
		return true
	}
	at = minTime(at, now.Add(p.cfg.MaxHold))
	if !m.AnswerBy.IsZero() {
		if !m.AnswerBy.After(now) {
			return true
		}
		at = minTime(at, m.AnswerBy)
	}
	// The call's jobs are not needed to answer it: a held refusal keeps
	// only its answer, not a batch of up to the bus's 16 MiB.
	m.Body = nil
	// held stays in the order of the turns (a caller's deadline may come
	// before the turns of refusals held earlier).
	i := len(p.held)
	for i > 0 && p.held[i-1].at.After(at) {
		i--
	}
	p.held = slices.Insert(p.held, i, HeldRefusal{Msg: m, Err: err, at: at})
	return false
}

// DueRefusals takes the held refusals whose turn has come at now.
func (c *Core) DueRefusals(now time.Time) []HeldRefusal {
	p := &c.pace
	n := 0
	for n < len(p.held) && !p.held[n].at.After(now) {
		n++
	}
	if n == 0 {
		return nil
	}
	due := p.held[:n:n]
	p.held = append([]HeldRefusal(nil), p.held[n:]...)
	return due
}

// SetPace sets the pace of the namespace's refusals (a zero Interval:
// none are held).
func (c *Core) SetPace(p Pace) { c.pace.cfg = p }

// DropRefusals takes every held refusal (the actor is stopping: they are
// answered at once).
func (c *Core) DropRefusals() []HeldRefusal {
	held := c.pace.held
	c.pace.held = nil
	return held
}

// nextRefusal is when the first held refusal is due; zero when none is.
func (c *Core) nextRefusal() time.Time {
	if len(c.pace.held) == 0 {
		return time.Time{}
	}
	return c.pace.held[0].at
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}
