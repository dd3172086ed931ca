// Package redis is the Redis backend of store.Store, on
// github.com/redis/go-redis/v9. It needs Redis 7 or later (or a server
// speaking its scripting dialect, such as Valkey): scripts declare their
// flags in a shebang line.
//
// # Atomicity
//
// Every write is one Lua script, and Redis runs a script to its end with no
// other command in between, so a write lands whole. Redis does not undo a
// script that fails half-way, so each script does its checks before its
// first write and is fed arguments the Go side has already validated.
// The scripts that write a group of jobs send a group's sorted-set
// entries one command per key, mostly at their end (see luaLib's gather);
// they run whole all the same, so no other client sees a job before its
// index entries.
//
// A group (JobEnqueueMany's calls, JobClaimMany's claims, JobUpdateMany's
// updates) must land as one, so the whole group is one script: the Go side
// prepares it (and calls store.Faults between its steps), then one script
// applies it. A fault injected before that script leaves nothing written.
// JobClaimMany's Allow callback must run in Go, which a script cannot call:
// the claim reads the heads of its queues, walks them in dispatch order
// asking Allow, and then runs one script that claims exactly the chosen
// jobs after checking that each is still available. When one is not (a
// concurrent claimer took it, or a coalesce moved it), the script writes
// nothing and the group is planned again; jobs Allow already took are not
// asked about twice. Claims of one namespace through one Store take turns,
// so such a retry only happens between processes.
//
// # Several nodes
//
// The Store is a store.ClusterStore: membership and leases are one script
// a call. A job write's Fence is checked by the first lines of each of
// its scripts that writes (the enqueue and update scripts; a claim's
// promotion script and its claim script), before anything is written: a
// stale fence is an error reply and store.ErrFenced, and nothing lands.
// Redis runs a script whole, so a lease taken by another node (which
// bumps its epoch, in a script too) is taken wholly before or after each
// of them.
//
// # Key layout
//
// Every key starts with Options.Prefix (P, "fq:" by default). A
// namespace, queue or kind inside a key is written <byte length>:<text>
// (E for the namespace, Q for a queue), so no name can run into the next
// part of the key.
//
//	P seq                 string  job Seq counter (INCR), one order for the whole store
//	P j:E:<id>            hash    the job: the one source of truth for it
//	P st:E:<status>       zset    ids by Seq, one per status (pending, running,
//	                              completed, dead): counts and JobList
//	P av:E:Q              zset    available (due pending) jobs, all at score 0,
//	                              ordered by member: dispatch order
//	P sc:E:Q              zset    scheduled (pending, not yet due) ids by run_at (µs)
//	P scn:E               zset    the same for the whole namespace (JobNextRunAt of
//	                              every queue)
//	P run:E               zset    running ids by lease_until (µs)
//	P uk:E, P dk:E        hash    unique key → id (pending or running holder),
//	                              debounce key → id (pending holder)
//	P fin:E:<status>      zset    finished (completed or dead) jobs by
//	                              finished_at (µs), member <Seq hex><id>: ceilings
//	P fin:<status>        zset    the same across namespaces, member E:<id>: TTL sweeps
//	P rt:E:Q              zset    dead letters the auto-retry sweep may replay (not shed,
//	                              not retry:false) by finished_at, member <Seq hex><id>
//	P set:<key>, P sets   hash, zset  a setting (value, rev, updated_at); live keys
//	P aseq, P a:<id>, P al:E      audit id counter, entry, a namespace's ids newest first
//	P t:<id>, P th:<hash hex>     token; live token hash → id
//	P cseq, P c:E:K:<name>        config Seq counter; an item
//	P ci:E:K, P ck:K              an item's name by Seq per namespace; E:K:<name> by Seq
//	P lease:<name>        hash    a lease: holder ("" once released), epoch,
//	                              expires (µs; absent once released)
//	P leases              zset    every lease name, score 0 (LeaseList)
//	P members             zset    live nodes by expiry (µs)
//	P members:info        hash    node → its store.MemberInfo as JSON
//
// A job's dispatch order (priority descending, run_at, Seq) does not fit a
// score: a double holds 53 bits and the three take 192. So the available
// index keeps every member at score 0 and orders by the member's bytes:
// 16 hex digits of the priority (sign bit flipped, then complemented so
// higher comes first), 16 of run_at in Unix nanoseconds (sign bit
// flipped; see runAtKey), 16 of Seq, then the task's length (4 hex digits),
// the task and the id. The job hash keeps the member's first two parts
// (field ak, the order key) and a script builds the member from it, the
// seq, the task and the id to find or re-key it; a claim reads tasks and
// ids straight from the members. The whole member (about 90 bytes) is not
// kept: it would be the one value of a small job over Redis's
// hash-max-listpack-value (64 by default), which makes Redis store the
// hash as a hash table, twice the memory and slower to write. While a
// node built before job formats shares the store (Store.SetJobFormat) the
// hashes are written with the whole member (field am) instead, which is
// also what a hash written before ak holds until its order next changes;
// every script reads both. A lean hash (store.JobFormatLean, once every
// node reads it) leaves out, at enqueue, its namespace and id (its key
// holds them: scripts return a hash with its id, jobOf), its priority
// (the order key's first part) and its attempt until a claim sets it,
// and from store.JobFormatDefaults its max_attempts while 0 and its
// run_at_us while it is its creation: Redis writes a new hash field by
// field, and these were six of about thirteen.
//
// Other scores are microseconds (exact in a double until the year 2255)
// or Seq; due checks and retention cut-offs are therefore exact to the
// microsecond, the precision the store contract asks for. A run_at
// past 2255 (up to 9999 is allowed) rounds in the scheduled indexes by at
// most 16 µs, which a due check made before 2255 cannot see; JobNextRunAt
// may then name one of two such jobs that lie that close. The job hash
// keeps run_at to the microsecond (run_at_us; so it reaches 9999) and
// every other time to the nanosecond.
//
// A pending job with a future run_at sits in the scheduled indexes; a
// claim first moves its queues' due jobs to the available index (a move
// that changes nothing a reader of the Store can see but JobNextRunAt,
// which may report a due job either way), in chunks, then reads the heads.
// With NoPromote it skips the move.
//
// The indexes are derivable from the job hashes and every script that
// changes a job changes them with it, so a job is never, say, running
// without a lease entry or holding a unique key once it finished. The
// live jobs of a namespace (what quotas count) are its pending and running
// status indexes.
//
// Scripts build keys from the prefix rather than receiving them in KEYS
// (but for a fenced write's lease key, KEYS[1], itself under the prefix),
// so the backend wants a standalone Redis (replicas and Sentinel are
// fine); on a Redis Cluster give a prefix with a hash tag, such as
// "{fq}:", so every key lives in one slot.
package redis

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/store"

	goredis "github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// Options tune the store.
type Options struct {
	// Faults fails writes part-way, for tests.
	Faults store.Faults
	// Prefix starts every key (default "fq:"), so several stores (tests,
	// clusters) can share one Redis database.
	Prefix string
}

// Store is a store.Store on one Redis server.
type Store struct {
	c      *goredis.Client
	p      string
	faults store.Faults

	// claimMu makes claims of one namespace through this Store take turns
	// (by a hash of the namespace), so they never conflict with each other.
	claimMu   [64]sync.Mutex
	claimSeed maphash.Seed

	// format is the job record format job hashes are written in
	// (store.JobFormat): 0 until SetJobFormat, so a node of this build
	// writes what a node of any older build on the same store reads.
	format atomic.Int32
}

// SetJobFormat says which job record format job hashes may be written
// in: at most the newest every node on the store reads
// (store.FormatEveryMemberReads), and at most this build's. Every
// format is read.
func (s *Store) SetJobFormat(format int) {
	s.format.Store(int32(min(max(format, 0), store.JobFormat)))
}

// formatArg is the job record format as scripts take it.
func (s *Store) formatArg() string { return strconv.Itoa(int(s.format.Load())) }

var _ store.Store = (*Store)(nil)

// Open connects to the Redis server at url (redis://[user:password@]host:port/db
// or rediss:// for TLS, as redis.ParseURL reads it) and checks that it
// speaks Redis 7 or later.
func Open(ctx context.Context, url string, opt Options) (*Store, error) {
	o, err := goredis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	// A write script whose reply was lost must not run again: a repeated
	// enqueue would come back deduplicated, a repeated update not applied.
	// The caller sees the error instead.
	if o.MaxRetries == 0 {
		o.MaxRetries = -1
	}
	if o.MaintNotificationsConfig == nil {
		o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	}
	prefix := opt.Prefix
	if prefix == "" {
		prefix = "fq:"
	}
	s := &Store{c: goredis.NewClient(o), p: prefix, faults: opt.Faults, claimSeed: maphash.MakeSeed()}
	if err := s.checkServer(ctx); err != nil {
		s.c.Close()
		return nil, fmt.Errorf("redis: open %s: %w", o.Addr, err)
	}
	return s, nil
}

func (s *Store) checkServer(ctx context.Context) error {
	info, err := s.c.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	for _, line := range strings.Split(info, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:")
		if !ok {
			continue
		}
		major, _, _ := strings.Cut(v, ".")
		if n, err := strconv.Atoi(major); err != nil || n < 7 {
			return fmt.Errorf("server is Redis %s; FlexiQ needs 7 or later", v)
		}
		return nil
	}
	return errors.New("server did not report redis_version")
}

// Close closes the connection pool.
func (s *Store) Close() error {
	if err := s.c.Close(); err != nil {
		return fmt.Errorf("redis: close: %w", err)
	}
	return nil
}

// Ping checks the server answers.
func (s *Store) Ping(ctx context.Context) error {
	if err := s.c.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	return nil
}

// fault asks the injected faults whether step of op fails.
func (s *Store) fault(op string, step int) error {
	if s.faults == nil {
		return nil
	}
	if err := s.faults.Fault(op, step); err != nil {
		return fmt.Errorf("redis: %s: %w", op, err)
	}
	return nil
}

// run runs a script with the key prefix as ARGV[1].
func (s *Store) run(ctx context.Context, sc *goredis.Script, args ...any) (any, error) {
	return sc.Run(ctx, s.c, nil, append([]any{s.p}, args...)...).Result()
}

// runFenced runs a job write's script, which starts with checkFence: the
// fence's lease key (under the prefix, so a hash-tagged prefix keeps it in
// the slot of every other key) is KEYS[1], and ARGV is the prefix, the
// fence's holder and epoch (both empty without a fence), then args.
func (s *Store) runFenced(ctx context.Context, sc *goredis.Script, f *store.Fence, args ...any) (any, error) {
	var (
		keys          []string
		holder, epoch string
	)
	if f != nil {
		keys = []string{s.leaseKey(f.Lease)}
		holder, epoch = f.Holder, strconv.FormatInt(f.Epoch, 10)
	}
	return sc.Run(ctx, s.c, keys, append([]any{s.p, holder, epoch}, args...)...).Result()
}

// fencedPrefix starts the error reply of checkFence.
const fencedPrefix = "FENCED "

// wrap makes err a redis: op error, keeping the store's sentinel errors
// testable with errors.Is; checkFence's reply becomes store.ErrFenced.
func wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	if msg, ok := strings.CutPrefix(err.Error(), fencedPrefix); ok {
		return fmt.Errorf("redis: %s: %w (%s)", op, store.ErrFenced, msg)
	}
	return fmt.Errorf("redis: %s: %w", op, err)
}

// enc writes a name inside a key: <byte length>:<name>.
func enc(s string) string { return strconv.Itoa(len(s)) + ":" + s }

// Times: nanoseconds in hashes, but run_at (run_at_us) in microseconds, so
// that it reaches the year 9999; microseconds in scores.

func nsStr(t time.Time) string { return strconv.FormatInt(t.UnixNano(), 10) }
func usStr(t time.Time) string { return strconv.FormatInt(t.UnixMicro(), 10) }

// due reports whether a job due at runAt is available at now: when its
// run_at as stored (to the microsecond) is not after now, as a claim's
// promotion decides.
func due(runAt, now time.Time) bool { return !runAt.Truncate(time.Microsecond).After(now) }

func parseMicros(s string) (time.Time, error) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("bad time %q: %w", s, err)
	}
	return time.UnixMicro(n).UTC(), nil
}

func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("bad time %q: %w", s, err)
	}
	return time.Unix(0, n).UTC(), nil
}

const signBit = 1 << 63

// hex16 is v in 16 lower-case hex digits.
func hex16(v uint64) string {
	const digits = "0123456789abcdef"
	var b [16]byte
	for i := 15; i >= 0; i-- {
		b[i] = digits[v&0xf]
		v >>= 4
	}
	return string(b[:])
}

// orderPrefix is the start of a job's dispatch-order member: its priority,
// higher first, then its run_at, earlier first.
func orderPrefix(priority int64, runAt time.Time) string {
	return hex16(^(uint64(priority) ^ signBit)) + runAtKey(runAt)
}

// priorityOf is a job hash's priority: its field priority or, in a lean
// hash, the first part of its order key (ak, or a whole member am).
func priorityOf(m map[string]string) (int64, error) {
	if _, ok := m["priority"]; ok {
		return intOf(m, "priority")
	}
	k := m["ak"]
	if k == "" {
		k = m["am"]
	}
	if len(k) < 16 {
		return 0, fmt.Errorf("job hash has no priority and no order key (ak %q, am %q)", m["ak"], m["am"])
	}
	x, err := strconv.ParseUint(k[:16], 16, 64)
	if err != nil {
		return 0, fmt.Errorf("bad order key %q: %w", k, err)
	}
	return int64(^x ^ signBit), nil
}

// runAtKey is run_at's part of a dispatch-order member: run_at as stored
// (to the microsecond) in Unix nanoseconds, sign bit flipped. Nanoseconds,
// as before run_at_us, so members written then sort with today's. Only
// available (due) jobs are ordered by it, and a due run_at is at most now,
// which nanoseconds hold until 2262; a later run_at (up to 9999 is
// allowed) saturates rather than wraps, so the key never sorts it early.
func runAtKey(t time.Time) string {
	ns := int64(math.MaxInt64)
	switch us := t.UnixMicro(); {
	case us < math.MinInt64/1000:
		ns = math.MinInt64
	case us <= math.MaxInt64/1000:
		ns = us * 1000
	}
	return hex16(uint64(ns) ^ signBit)
}

// member is a dispatch-order member, read back.
type member struct {
	raw, task, id string
}

func parseMember(m string) (member, error) {
	if len(m) < 52 {
		return member{}, fmt.Errorf("bad order member %q", m)
	}
	n, err := strconv.ParseUint(m[48:52], 16, 16)
	if err != nil || 52+int(n) > len(m) {
		return member{}, fmt.Errorf("bad order member %q", m)
	}
	return member{raw: m, task: m[52 : 52+n], id: m[52+n:]}, nil
}

// Reply decoding.

func toSlice(v any) ([]any, error) {
	switch x := v.(type) {
	case []any:
		return x, nil
	case nil:
		return nil, nil
	}
	return nil, fmt.Errorf("unexpected reply %T", v)
}

func toString(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	}
	return "", fmt.Errorf("unexpected reply %T", v)
}

func toInt(v any) (int64, error) {
	switch x := v.(type) {
	case int64:
		return x, nil
	case string:
		return strconv.ParseInt(x, 10, 64)
	}
	return 0, fmt.Errorf("unexpected reply %T", v)
}

// toMap reads a flat field, value, … array (HGETALL from a script).
func toMap(v any) (map[string]string, error) {
	a, err := toSlice(v)
	if err != nil {
		return nil, err
	}
	if len(a)%2 != 0 {
		return nil, errors.New("odd-length hash reply")
	}
	m := make(map[string]string, len(a)/2)
	for i := 0; i < len(a); i += 2 {
		k, err := toString(a[i])
		if err != nil {
			return nil, err
		}
		val, err := toString(a[i+1])
		if err != nil {
			return nil, err
		}
		m[k] = val
	}
	return m, nil
}

func bytesOf(m map[string]string, k string) []byte {
	v, ok := m[k]
	if !ok {
		return nil
	}
	return []byte(v)
}

func intOf(m map[string]string, k string) (int64, error) {
	v, ok := m[k]
	if !ok || v == "" {
		return 0, nil
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("bad %s %q: %w", k, v, err)
	}
	return n, nil
}

// jobFromMap reads job hash m of namespace, with its id (field id, which
// scripts add: jobOf). A lean hash (store.JobFormatLean) has no
// namespace, id, priority (its order key has it) or attempt while 0; from
// store.JobFormatDefaults no max_attempts while 0 and no run_at_us while
// it is the job's creation.
func jobFromMap(m map[string]string, namespace string) (store.Job, error) {
	j := store.Job{
		Namespace:   namespace,
		ID:          m["id"],
		Queue:       m["queue"],
		Task:        m["task"],
		Payload:     bytesOf(m, "payload"),
		Status:      api.Status(m["status"]),
		UniqueKey:   m["unique_key"],
		DebounceKey: m["debounce_key"],
		Worker:      m["worker"],
		Error:       m["error"],
		Result:      bytesOf(m, "result"),
		DeadMeta:    bytesOf(m, "dead_meta"),
		Shed:        m["shed"] == "1",
		NoRetry:     m["no_retry"] == "1",
	}
	var err error
	for _, f := range []struct {
		dst  *int64
		name string
	}{{&j.Seq, "seq"}, {&j.MaxAttempts, "max_attempts"}, {&j.Attempt, "attempt"}, {&j.DeadReplays, "dead_replays"}} {
		if *f.dst, err = intOf(m, f.name); err != nil {
			return j, err
		}
	}
	if j.Priority, err = priorityOf(m); err != nil {
		return j, err
	}
	for _, f := range []struct {
		dst  *time.Time
		name string
	}{{&j.LeaseUntil, "lease_until"}, {&j.CreatedAt, "created_at"}, {&j.FinishedAt, "finished_at"}} {
		if *f.dst, err = parseTime(m[f.name]); err != nil {
			return j, err
		}
	}
	// A job hash written before run_at_us holds run_at in nanoseconds; one
	// that leaves it out (store.JobFormatDefaults) was due when created.
	switch us, ok := m["run_at_us"]; {
	case ok:
		j.RunAt, err = parseMicros(us)
	case m["run_at"] != "":
		j.RunAt, err = parseTime(m["run_at"])
	default:
		j.RunAt = j.CreatedAt.Truncate(time.Microsecond)
	}
	return j, err
}

// jobsFrom reads an array of job hashes of namespace.
func jobsFrom(v any, namespace string) ([]store.Job, error) {
	a, err := toSlice(v)
	if err != nil {
		return nil, err
	}
	out := make([]store.Job, 0, len(a))
	for _, x := range a {
		m, err := toMap(x)
		if err != nil {
			return nil, err
		}
		j, err := jobFromMap(m, namespace)
		if err != nil {
			return nil, err
		}
		out = append(out, j)
	}
	return out, nil
}

func hexOf(b []byte) string { return hex.EncodeToString(b) }

func flag(b bool) string {
	if b {
		return "1"
	}
	return "0"
}
