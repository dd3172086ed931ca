// Package clustertest is an in-memory store.ClusterStore for tests of
// package cluster and of the simulator.
package clustertest

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/flexiq/flexiq/store"
)

// MemStore is store.ClusterStore in memory with the contract's rules
// (store/storetest checks the real backends against the same rules). Mu
// guards Members and Leases; a test may hold it across a fence check and
// a write, as PostgreSQL's FOR KEY SHARE on the lease row or a Redis script
// would.
type MemStore struct {
	Mu      sync.Mutex
	Members map[string]store.Member
	Leases  map[string]store.Lease
}

// NewMemStore returns an empty store.
func NewMemStore() *MemStore {
	return &MemStore{Members: map[string]store.Member{}, Leases: map[string]store.Lease{}}
}

// MemberHeartbeat implements store.ClusterStore.
func (m *MemStore) MemberHeartbeat(_ context.Context, p store.MemberHeartbeatParams) ([]store.Member, error) {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	m.Members[p.Node] = store.Member{Node: p.Node, Info: p.Info, Expires: p.Now.Add(p.TTL)}
	var out []store.Member
	for _, mem := range m.Members {
		if mem.Expires.After(p.Now) {
			out = append(out, mem)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, nil
}

// MemberLeave implements store.ClusterStore.
func (m *MemStore) MemberLeave(_ context.Context, node string) error {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	delete(m.Members, node)
	return nil
}

// LeaseAcquire implements store.ClusterStore.
func (m *MemStore) LeaseAcquire(_ context.Context, p store.LeaseAcquireParams) ([]store.Lease, error) {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	var out []store.Lease
	for _, name := range p.Names {
		l, ok := m.Leases[name]
		switch {
		case !ok:
			l = store.Lease{Name: name, Holder: p.Holder, Epoch: 1}
		case l.Holder == p.Holder:
		case l.Holder == "" || !l.Expires.After(p.Now):
			l.Holder, l.Epoch = p.Holder, l.Epoch+1
		default:
			continue
		}
		l.Expires = p.Now.Add(p.TTL)
		m.Leases[name] = l
		out = append(out, l)
	}
	return out, nil
}

// LeaseRelease implements store.ClusterStore.
func (m *MemStore) LeaseRelease(_ context.Context, p store.LeaseReleaseParams) error {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	for _, name := range p.Names {
		if l, ok := m.Leases[name]; ok && l.Holder == p.Holder {
			l.Holder, l.Expires = "", time.Time{}
			m.Leases[name] = l
		}
	}
	return nil
}

// LeaseList implements store.ClusterStore.
func (m *MemStore) LeaseList(context.Context) ([]store.Lease, error) {
	m.Mu.Lock()
	defer m.Mu.Unlock()
	out := make([]store.Lease, 0, len(m.Leases))
	for _, l := range m.Leases {
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
