package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/flexiq/flexiq/store"
)

// Several nodes share the server: membership and leases with epochs, each
// call one script, and fenced job writes (checkFence in scripts.go).

var _ store.ClusterStore = (*Store)(nil)

// leaseKey is the key of lease name: P lease:<name>.
func (s *Store) leaseKey(name string) string { return s.p + "lease:" + name }

// MemberHeartbeat records p.Node as live until p.Now+p.TTL and returns the
// live members by node, in one script.
func (s *Store) MemberHeartbeat(ctx context.Context, p store.MemberHeartbeatParams) ([]store.Member, error) {
	const op = "MemberHeartbeat"
	if p.Node == "" || p.TTL <= 0 {
		return nil, wrap(op, fmt.Errorf("node %q with TTL %v: want a node and a positive TTL", p.Node, p.TTL))
	}
	info, err := json.Marshal(p.Info)
	if err != nil {
		return nil, wrap(op, err)
	}
	v, err := s.run(ctx, scriptMemberHeartbeat, p.Node, info, usStr(p.Now.Add(p.TTL)), usStr(p.Now))
	if err != nil {
		return nil, wrap(op, err)
	}
	a, err := toSlice(v)
	if err != nil || len(a)%3 != 0 {
		return nil, wrap(op, fmt.Errorf("bad reply of %d items: %v", len(a), err))
	}
	out := make([]store.Member, 0, len(a)/3)
	for i := 0; i < len(a); i += 3 {
		var m store.Member
		node, err1 := toString(a[i])
		raw, err2 := toString(a[i+1])
		score, err3 := toString(a[i+2])
		if err1 != nil || err2 != nil || err3 != nil {
			return nil, wrap(op, fmt.Errorf("bad member reply %v", a[i:i+3]))
		}
		m.Node = node
		if err := json.Unmarshal([]byte(raw), &m.Info); err != nil {
			return nil, wrap(op, fmt.Errorf("member %q: info: %w", node, err))
		}
		// A score is a double; microseconds are exact in it until 2255.
		us, err := strconv.ParseFloat(score, 64)
		if err != nil || math.IsInf(us, 0) || math.IsNaN(us) {
			return nil, wrap(op, fmt.Errorf("member %q: bad expiry %q", node, score))
		}
		m.Expires = time.UnixMicro(int64(us)).UTC()
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b store.Member) int { return strings.Compare(a.Node, b.Node) })
	return out, nil
}

// MemberLeave removes node.
func (s *Store) MemberLeave(ctx context.Context, node string) error {
	_, err := s.run(ctx, scriptMemberLeave, node)
	return wrap("MemberLeave", err)
}

// LeaseAcquire takes or renews p.Holder's leases among p.Names in one
// script and returns those it holds afterwards, by name.
func (s *Store) LeaseAcquire(ctx context.Context, p store.LeaseAcquireParams) ([]store.Lease, error) {
	const op = "LeaseAcquire"
	if p.Holder == "" || p.TTL <= 0 {
		return nil, wrap(op, fmt.Errorf("holder %q with TTL %v: want a holder and a positive TTL", p.Holder, p.TTL))
	}
	names := sortedNames(p.Names)
	if len(names) == 0 {
		return nil, nil
	}
	expires := p.Now.Add(p.TTL)
	args := make([]any, 0, 3+len(names))
	args = append(args, p.Holder, usStr(p.Now), usStr(expires))
	for _, n := range names {
		args = append(args, n)
	}
	v, err := s.run(ctx, scriptLeaseAcquire, args...)
	if err != nil {
		return nil, wrap(op, err)
	}
	a, err := toSlice(v)
	if err != nil || len(a)%2 != 0 {
		return nil, wrap(op, fmt.Errorf("bad reply of %d items: %v", len(a), err))
	}
	out := make([]store.Lease, 0, len(a)/2)
	for i := 0; i < len(a); i += 2 {
		name, err1 := toString(a[i])
		epoch, err2 := toInt(a[i+1])
		if err1 != nil || err2 != nil {
			return nil, wrap(op, fmt.Errorf("bad lease reply %v", a[i:i+2]))
		}
		// As LeaseList reads it back: to the microsecond.
		out = append(out, store.Lease{Name: name, Holder: p.Holder, Epoch: epoch, Expires: time.UnixMicro(expires.UnixMicro()).UTC()})
	}
	slices.SortFunc(out, func(a, b store.Lease) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// LeaseRelease gives p.Holder's leases among p.Names up, in one script.
func (s *Store) LeaseRelease(ctx context.Context, p store.LeaseReleaseParams) error {
	names := sortedNames(p.Names)
	if p.Holder == "" || len(names) == 0 {
		return nil
	}
	args := make([]any, 0, 1+len(names))
	args = append(args, p.Holder)
	for _, n := range names {
		args = append(args, n)
	}
	_, err := s.run(ctx, scriptLeaseRelease, args...)
	return wrap("LeaseRelease", err)
}

// LeaseList returns every lease, by name.
func (s *Store) LeaseList(ctx context.Context) ([]store.Lease, error) {
	const op = "LeaseList"
	v, err := s.run(ctx, scriptLeaseList)
	if err != nil {
		return nil, wrap(op, err)
	}
	a, err := toSlice(v)
	if err != nil || len(a)%4 != 0 {
		return nil, wrap(op, fmt.Errorf("bad reply of %d items: %v", len(a), err))
	}
	out := make([]store.Lease, 0, len(a)/4)
	for i := 0; i < len(a); i += 4 {
		var l store.Lease
		var exp string
		var err1, err2, err3, err4 error
		l.Name, err1 = toString(a[i])
		l.Holder, err2 = toString(a[i+1])
		l.Epoch, err3 = toInt(a[i+2])
		exp, err4 = toString(a[i+3])
		if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
			return nil, wrap(op, fmt.Errorf("bad lease reply %v", a[i:i+4]))
		}
		if exp != "" {
			if l.Expires, err = parseMicros(exp); err != nil {
				return nil, wrap(op, fmt.Errorf("lease %q: %w", l.Name, err))
			}
		}
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b store.Lease) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// sortedNames is names sorted, each once.
func sortedNames(names []string) []string {
	out := slices.Clone(names)
	slices.Sort(out)
	return slices.Compact(out)
}
