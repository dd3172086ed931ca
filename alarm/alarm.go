// Package alarm raises an alarm before a namespace reaches a limit of its
// quota (docs/alarms.md): at 80 % of any limit the alarm is raised, once;
// below 70 % it clears. The gap between the two is the hysteresis that keeps
// a namespace hovering at 80 % from raising and clearing on every look.
//
// The state lives in the store's settings, under the reserved prefix
// "flexiq:alarm:", one document per namespace. Each namespace is evaluated
// by the node that owns it (the only node that sees its enqueue rate), and
// every node reads the same documents, so GET /v1/alarms and the
// flexiq_quota_alarm gauge answer the same on every node.
package alarm

import (
	"encoding/json"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
)

// The thresholds, in percent of a limit.
const (
	// RaisePercent raises an alarm that is not raised.
	RaisePercent = 80
	// ClearPercent: a raised alarm clears below it.
	ClearPercent = 70
)

// KeepCleared is how long a cleared alarm is still listed, so that an
// operator who looks after the fact sees what alarmed and when it cleared.
const KeepCleared = time.Hour

// KeyPrefix starts every alarm document's settings key. The admin door
// reserves "flexiq:" (docs/admin-api.md): the generic settings API never
// lists, reads or writes such a key.
const KeyPrefix = "flexiq:alarm:"

// Key is the settings key of namespace ns's alarms. The namespace's
// length comes first, as in quota.Key, so that no namespace's key is a
// prefix of another's.
func Key(ns string) string { return KeyPrefix + strconv.Itoa(len(ns)) + ":" + ns }

// namespaceFromKey inverts Key.
func namespaceFromKey(key string) (string, bool) {
	rest, ok := strings.CutPrefix(key, KeyPrefix)
	if !ok {
		return "", false
	}
	lenText, ns, ok := strings.Cut(rest, ":")
	if !ok {
		return "", false
	}
	n, err := strconv.Atoi(lenText)
	if err != nil || n != len(ns) {
		return "", false
	}
	return ns, true
}

// Next is the hysteresis: whether an alarm is raised after a reading of
// percent, given whether it was raised before.
func Next(raised bool, percent float64) bool {
	if raised {
		return percent >= ClearPercent
	}
	return percent >= RaisePercent
}

// Percent is usage as a percentage of max. A limit of 0 is a real limit
// (nothing more fits): it reads 100 % once anything counts against it, and
// 0 % while nothing does, so a namespace paused on purpose with an empty
// backlog does not alarm.
func Percent(usage float64, max int64) float64 {
	if max <= 0 {
		if usage > 0 {
			return 100
		}
		return 0
	}
	return usage * 100 / float64(max)
}

// Reading is one limit of a quota document beside its usage.
type Reading struct {
	Limit string `json:"limit"`
	// Usage counts against Max: jobs for the counting limits, jobs
	// admitted per unit of the rate for enqueue_rate.
	Usage   float64 `json:"usage"`
	Max     int64   `json:"max"`
	Percent float64 `json:"percent"`
	// Rate is enqueue_rate as written ("500/s"); empty for the others.
	Rate string `json:"rate,omitempty"`
}

// Rates tells how fast a namespace enqueues: the jobs admitted per unit
// over the last unit (or the last sample interval, if longer). ok is false
// when this node has not seen the namespace enqueue; the rate then reads 0.
type Rates interface {
	Admitted(ns string, unit time.Duration) (perUnit float64, ok bool)
}

// NeedsCounts reports whether doc has a limit that counts jobs in the store.
func NeedsCounts(doc quota.Document) bool {
	return doc.MaxPending != nil || doc.MaxRunning != nil || doc.MaxArchivedRows != nil || doc.MaxDeadRows != nil
}

// needsFinished reports whether doc limits the completed or dead rows,
// which only the store counts.
func needsFinished(doc quota.Document) bool {
	return doc.MaxArchivedRows != nil || doc.MaxDeadRows != nil
}

// Readings puts each limit doc sets beside its usage, in the document's
// field order. rates may be nil (the rate then reads 0).
func Readings(ns string, doc quota.Document, c store.Counts, rates Rates) []Reading {
	var out []Reading
	add := func(field string, max *int64, usage int64) {
		if max != nil {
			out = append(out, reading(field, float64(usage), *max))
		}
	}
	add(quota.FieldMaxPending, doc.MaxPending, c.Pending)
	if r := doc.EnqueueRate; r != nil {
		var perUnit float64
		if rates != nil {
			perUnit, _ = rates.Admitted(ns, r.Unit)
		}
		rd := reading(quota.FieldEnqueueRate, perUnit, r.Count)
		rd.Rate = r.Text
		out = append(out, rd)
	}
	add(quota.FieldMaxRunning, doc.MaxRunning, c.Running)
	add(quota.FieldMaxArchivedRows, doc.MaxArchivedRows, c.Completed)
	add(quota.FieldMaxDeadRows, doc.MaxDeadRows, c.Dead)
	return out
}

func reading(field string, usage float64, max int64) Reading {
	return Reading{Limit: field, Usage: round(usage), Max: max, Percent: round(Percent(usage, max))}
}

// round keeps one decimal: what a person reads, and stable in JSON.
func round(f float64) float64 {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return 0
	}
	return math.Round(f*10) / 10
}

// Closest is the reading nearest its limit (the highest percent); ok is
// false when there is none.
func Closest(rs []Reading) (Reading, bool) {
	if len(rs) == 0 {
		return Reading{}, false
	}
	best := rs[0]
	for _, r := range rs[1:] {
		if r.Percent > best.Percent {
			best = r
		}
	}
	return best, true
}

// Entry is one limit's alarm as stored.
type Entry struct {
	Raised    bool       `json:"raised"`
	RaisedAt  time.Time  `json:"raised_at"`
	ClearedAt *time.Time `json:"cleared_at"`
	// The reading at the last change (raise or clear).
	Percent float64 `json:"percent"`
	Usage   float64 `json:"usage"`
	Max     int64   `json:"max"`
	Rate    string  `json:"rate,omitempty"`
}

// record is a namespace's alarm document: its entries by limit.
type record struct {
	Namespace string            `json:"namespace"`
	Limits    map[string]*Entry `json:"limits"`
}

// Alarm is one alarm as GET /v1/alarms shows it.
type Alarm struct {
	Namespace string `json:"namespace"`
	Limit     string `json:"limit"`
	// State is "raised" or "cleared".
	State     string     `json:"state"`
	RaisedAt  time.Time  `json:"raised_at"`
	ClearedAt *time.Time `json:"cleared_at"`
	Percent   float64    `json:"percent"`
	Usage     float64    `json:"usage"`
	Max       int64      `json:"max"`
	Rate      string     `json:"rate,omitempty"`
}

// The states of an Alarm.
const (
	StateRaised  = "raised"
	StateCleared = "cleared"
)

// decode reads a stored alarm document; one that does not decode (written
// behind FlexiQ's back) reads as none, and is replaced at the next change.
func decode(ns string, value []byte) *record {
	rec := &record{Namespace: ns, Limits: map[string]*Entry{}}
	if value == nil {
		return rec
	}
	var r record
	if json.Unmarshal(value, &r) != nil {
		return rec
	}
	for k, e := range r.Limits {
		if e != nil {
			rec.Limits[k] = e
		}
	}
	return rec
}

func (r *record) encode() []byte {
	if len(r.Limits) == 0 {
		return nil
	}
	b, _ := json.Marshal(r)
	return b
}

func (r *record) clone() *record {
	c := &record{Namespace: r.Namespace, Limits: make(map[string]*Entry, len(r.Limits))}
	for k, e := range r.Limits {
		ec := *e
		c.Limits[k] = &ec
	}
	return c
}

// alarms lists r's entries, raised first, then by limit.
func (r *record) alarms() []Alarm {
	out := make([]Alarm, 0, len(r.Limits))
	for limit, e := range r.Limits {
		a := Alarm{Namespace: r.Namespace, Limit: limit, State: StateCleared, RaisedAt: e.RaisedAt.UTC(),
			Percent: e.Percent, Usage: e.Usage, Max: e.Max, Rate: e.Rate}
		if e.Raised {
			a.State = StateRaised
		}
		if e.ClearedAt != nil {
			t := e.ClearedAt.UTC()
			a.ClearedAt = &t
		}
		out = append(out, a)
	}
	sortAlarms(out)
	return out
}

func sortAlarms(as []Alarm) {
	sort.Slice(as, func(i, j int) bool {
		a, b := as[i], as[j]
		if (a.State == StateRaised) != (b.State == StateRaised) {
			return a.State == StateRaised
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Limit < b.Limit
	})
}

// Change is an alarm raised or cleared.
type Change struct {
	Namespace, Limit string
	Raised           bool
	Reading          Reading
}

// apply moves r's entries to what readings say at now: raises, clears
// (also of a limit no longer set), and forgets entries cleared more than
// KeepCleared ago. It returns the raises and clears.
func (r *record) apply(readings []Reading, now time.Time) []Change {
	var changes []Change
	set := make(map[string]bool, len(readings))
	for _, rd := range readings {
		set[rd.Limit] = true
		e := r.Limits[rd.Limit]
		was := e != nil && e.Raised
		is := Next(was, rd.Percent)
		switch {
		case is && !was:
			r.Limits[rd.Limit] = &Entry{Raised: true, RaisedAt: now, Percent: rd.Percent, Usage: rd.Usage, Max: rd.Max, Rate: rd.Rate}
			changes = append(changes, Change{Namespace: r.Namespace, Limit: rd.Limit, Raised: true, Reading: rd})
		case was && !is:
			t := now
			e.Raised, e.ClearedAt = false, &t
			e.Percent, e.Usage, e.Max, e.Rate = rd.Percent, rd.Usage, rd.Max, rd.Rate
			changes = append(changes, Change{Namespace: r.Namespace, Limit: rd.Limit, Reading: rd})
		}
	}
	for limit, e := range r.Limits {
		if set[limit] {
			if !e.Raised && e.ClearedAt != nil && now.Sub(*e.ClearedAt) > KeepCleared {
				delete(r.Limits, limit)
			}
			continue
		}
		// The limit is no longer set: nothing counts against it.
		switch {
		case e.Raised:
			t := now
			e.Raised, e.ClearedAt, e.Percent = false, &t, 0
			changes = append(changes, Change{Namespace: r.Namespace, Limit: limit, Reading: Reading{Limit: limit}})
		case e.ClearedAt == nil || now.Sub(*e.ClearedAt) > KeepCleared:
			delete(r.Limits, limit)
		}
	}
	return changes
}

// equal reports whether a and b hold the same entries.
func equal(a, b *record) bool {
	x, _ := json.Marshal(a.Limits)
	y, _ := json.Marshal(b.Limits)
	return string(x) == string(y)
}
