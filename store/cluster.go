package store

import (
	"context"
	"errors"
	"time"
)

// ErrFenced is a write refused because its fence is stale: the lease it
// names is now held by another node, or under a newer epoch (docs/cluster.md:
// a node that lost a namespace can no longer change its jobs, even if it
// does not know yet).
var ErrFenced = errors.New("store: fenced: the lease is held by another owner")

// ClusterStore is what several nodes on one store use to agree who does
// what: a row per live node (membership) and leases with epochs
// (ownership of namespace partitions and the maintenance leadership). A
// backend that can be shared (PostgreSQL, Redis) implements it; SQLite,
// which one node owns, does not.
//
// The store decides who may write: a lease is taken only when it is free,
// released or expired, and taking it from anyone (or after a release)
// increments its epoch. Job writes carrying a Fence are refused with
// ErrFenced unless the lease is still held by the fence's holder at the
// fence's epoch, checked in the same transaction or script as the write,
// so a stale owner's write never lands.
type ClusterStore interface {
	// MemberHeartbeat records p.Node as live until p.Now+p.TTL (creating
	// or refreshing its row with its Info) and returns every member still
	// live at p.Now, by id.
	MemberHeartbeat(ctx context.Context, p MemberHeartbeatParams) ([]Member, error)
	// MemberLeave removes node's row (a graceful leave).
	MemberLeave(ctx context.Context, node string) error
	// LeaseAcquire takes or renews, for p.Holder, each lease of p.Names
	// that is free (never taken, released), expired at p.Now, or already
	// p.Holder's; each is then held until p.Now+p.TTL. Taking a lease
	// that was not p.Holder's (or that was released) increments its
	// epoch; renewing keeps it. It returns the leases of p.Names that
	// p.Holder holds afterwards, in one transaction or script.
	LeaseAcquire(ctx context.Context, p LeaseAcquireParams) ([]Lease, error)
	// LeaseRelease gives up p.Holder's leases among p.Names at once (a
	// graceful hand-over); leases held by others are untouched.
	LeaseRelease(ctx context.Context, p LeaseReleaseParams) error
	// LeaseList returns every lease ever taken (free ones with Holder "").
	LeaseList(ctx context.Context) ([]Lease, error)
}

// MemberHeartbeatParams are a node's heartbeat.
type MemberHeartbeatParams struct {
	Node string
	Info MemberInfo
	Now  time.Time
	TTL  time.Duration
}

// MemberInfo is what a node says of itself.
type MemberInfo struct {
	// Maintenance: the node may lead retention and sweeps.
	Maintenance bool `json:"maintenance"`
	// Ready: the node serves requests.
	Ready bool `json:"ready"`
	// Owned is how many namespaces' actors the node holds.
	Owned int `json:"owned"`
	// Admin is the node's admin door URL, for operators.
	Admin string `json:"admin,omitempty"`
	// JobFormat is the newest job record format the node reads
	// (JobFormat); 0 from a node built before formats were told.
	JobFormat int `json:"job_format,omitempty"`
}

// Job record formats. JobFormat is the newest one this build reads and
// may write. A store writes a format only while every live member reads
// it (FormatEveryMemberReads), so that nodes of two builds can share a
// store during a rolling upgrade; it reads every older one.
const (
	// JobFormatOrderKey: a Redis job hash may keep its order key (field
	// ak) instead of its whole dispatch-order member (am).
	JobFormatOrderKey = 1
	// JobFormatLean: a Redis job hash written at enqueue also leaves out
	// what its key and its order key hold (namespace, id, priority) and
	// the attempt of a job never claimed (0). Four fields fewer of about
	// thirteen: Redis's time for a batched enqueue, its bottleneck, falls
	// by about 5 %.
	JobFormatLean = 2
	// JobFormatDefaults: a lean hash also leaves out max_attempts while
	// it is 0 (the namespace's default) and run_at_us while it is the
	// job's creation (to the µs), as it is for a job due at once: two
	// fields fewer of nine for most jobs.
	JobFormatDefaults = 3

	JobFormat = JobFormatDefaults
)

// FormatEveryMemberReads is the newest job record format every member
// reads, at most this build's (JobFormat).
func FormatEveryMemberReads(members []Member) int {
	f := JobFormat
	for _, m := range members {
		f = min(f, m.Info.JobFormat)
	}
	return f
}

// Member is a live node.
type Member struct {
	Node    string
	Info    MemberInfo
	Expires time.Time
}

// LeaseAcquireParams take or renew leases.
type LeaseAcquireParams struct {
	Holder string
	Names  []string
	Now    time.Time
	TTL    time.Duration
}

// LeaseReleaseParams give leases up.
type LeaseReleaseParams struct {
	Holder string
	Names  []string
}

// Lease is a named lease: who holds it, under which epoch, until when.
type Lease struct {
	Name    string
	Holder  string // "" when free (released)
	Epoch   int64
	Expires time.Time
}

// Fence is carried by a job write of a clustered node: the write lands
// only while Lease is held by Holder at Epoch.
type Fence struct {
	Lease  string
	Holder string
	Epoch  int64
}
