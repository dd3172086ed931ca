package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"time"

	"github.com/flexiq/flexiq/alarm"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/auth"
	"github.com/flexiq/flexiq/cachebust"
	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
)

// The routes the dashboard (docs/dashboard.md) reads besides the ones
// every client uses: the usage history, the alarms, the namespaces ranked
// by how close they are to a limit, and the token list.

func (s *Server) dashboardRoutes() {
	s.act("GET /v1/usage/history", auth.ActReadUsage, s.getHistory)
	s.handle("GET /v1/alarms", auth.Admin, "read alarms", s.getAlarms)
	s.handle("GET /v1/namespaces", auth.Root, "the namespace ranking", s.rankNamespaces)
	s.handle("GET /v1/tokens", auth.Root, "listing tokens", s.listTokens)
	if s.d.UI != nil {
		// The sign-in page and its assets need no token: they hold no
		// data, and every call they make carries the operator's.
		s.mux.Handle("GET /ui/", s.d.UI)
		s.mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
		})
	}
}

// nodeID is this node's id ("" without a cluster view).
func (s *Server) nodeID() string {
	if s.d.Cluster == nil {
		return ""
	}
	return s.d.Cluster.ClusterStatus().Node
}

func (s *Server) ownerOf(ns string) string {
	if s.d.Cluster == nil {
		return ""
	}
	return s.d.Cluster.OwnerOf(ns)
}

func (s *Server) getHistory(r *http.Request, p auth.Principal) (int, any, error) {
	if s.d.History == nil {
		return 0, nil, api.Errorf(api.CodeUnavailable, "", "no usage history on this node")
	}
	_, doc, err := s.readQuota(r.Context(), p.Namespace)
	if err != nil {
		return 0, nil, err
	}
	out := s.d.History.Get(p.Namespace)
	out.Node, out.Owner = s.nodeID(), s.ownerOf(p.Namespace)
	if doc.EnqueueRate != nil {
		rs := alarm.Readings(p.Namespace, quota.Document{EnqueueRate: doc.EnqueueRate}, store.Counts{}, s.d.History)
		out.EnqueueRate = &rs[0]
	}
	return http.StatusOK, out, nil
}

// AlarmsReply is GET /v1/alarms's body.
type AlarmsReply struct {
	Alarms []alarm.Alarm `json:"alarms"`
}

func (s *Server) getAlarms(r *http.Request, p auth.Principal) (int, any, error) {
	ns := p.Namespace
	if p.IsRoot {
		ns = "" // root sees every namespace's
	}
	all, err := alarm.List(r.Context(), s.d.Store, ns)
	if err != nil {
		return 0, nil, storeErr(err)
	}
	return http.StatusOK, AlarmsReply{Alarms: all}, nil
}

// MaxRanked bounds the namespaces GET /v1/namespaces reads (each costs a
// count in the store); past it the reply says truncated.
const MaxRanked = 1000

// NamespaceRank is one namespace of GET /v1/namespaces.
type NamespaceRank struct {
	Namespace string `json:"namespace"`
	// Owner is the node holding the namespace's actor.
	Owner string `json:"owner,omitempty"`
	// Percent and Closest name the limit nearest its bound.
	Percent float64         `json:"percent"`
	Closest string          `json:"closest,omitempty"`
	Limits  []alarm.Reading `json:"limits"`
	Usage   Usage           `json:"usage"`
	// Alarms lists the limits whose alarm is raised.
	Alarms []string `json:"alarms"`
	// Error: the quota cannot be read, so the namespace is stopped.
	Error *api.Error `json:"error,omitempty"`
}

// NamespacesReply is GET /v1/namespaces's body.
type NamespacesReply struct {
	Node       string          `json:"node"`
	Namespaces []NamespaceRank `json:"namespaces"`
	Truncated  bool            `json:"truncated"`
}

// rankNamespaces lists the namespaces that have a quota document (one
// without has no limit to come near): stopped ones first, then by how
// close their nearest limit is.
func (s *Server) rankNamespaces(r *http.Request, _ auth.Principal) (int, any, error) {
	ctx := r.Context()
	docs, err := s.d.Store.SettingList(ctx, quota.KeyPrefix)
	if err != nil {
		return 0, nil, storeErr(err)
	}
	raised, err := s.raisedAlarms(ctx)
	if err != nil {
		return 0, nil, storeErr(err)
	}
	out := NamespacesReply{Node: s.nodeID(), Namespaces: []NamespaceRank{}}
	var rates alarm.Rates
	if s.d.History != nil {
		rates = s.d.History
	}
	for _, d := range docs {
		ns, ok := quota.NamespaceFromKey(d.Key)
		if !ok {
			continue
		}
		if len(out.Namespaces) == MaxRanked {
			out.Truncated = true
			break
		}
		c, err := s.d.Store.JobCount(ctx, ns)
		if err != nil {
			return 0, nil, storeErr(err)
		}
		rank := NamespaceRank{Namespace: ns, Owner: s.ownerOf(ns), Limits: []alarm.Reading{}, Alarms: raised[ns],
			Usage: Usage{Pending: c.Pending, Running: c.Running, Archived: c.Completed, Dead: c.Dead}}
		if rank.Alarms == nil {
			rank.Alarms = []string{}
		}
		doc, derr := quota.Decode(d.Value)
		if derr != nil {
			rank.Error = cachebust.Unreadable(ns, derr)
		} else {
			rank.Limits = alarm.Readings(ns, doc, c, rates)
			if best, ok := alarm.Closest(rank.Limits); ok {
				rank.Percent, rank.Closest = best.Percent, best.Limit
			}
		}
		out.Namespaces = append(out.Namespaces, rank)
	}
	sort.SliceStable(out.Namespaces, func(i, j int) bool {
		a, b := out.Namespaces[i], out.Namespaces[j]
		if (a.Error != nil) != (b.Error != nil) {
			return a.Error != nil
		}
		if a.Percent != b.Percent {
			return a.Percent > b.Percent
		}
		return a.Namespace < b.Namespace
	})
	return http.StatusOK, out, nil
}

// raisedAlarms maps each namespace to its limits with an alarm raised.
func (s *Server) raisedAlarms(ctx context.Context) (map[string][]string, error) {
	all, err := alarm.List(ctx, s.d.Store, "")
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, a := range all {
		if a.State == alarm.StateRaised {
			out[a.Namespace] = append(out[a.Namespace], a.Limit)
		}
	}
	return out, nil
}

// ---------------------------------------------------------------------------
// The token list. The token store finds tokens by hash and cannot list
// them, so the admin door keeps a list beside it, in the settings under
// tokenKeyPrefix: id, namespace, role and creation time, never the secret
// nor its hash. Tokens created before the list existed are not on it (they
// still work, and DELETE /v1/tokens/{id} revokes them).

const tokenKeyPrefix = ReservedPrefix + "token:"

// TokenInfo is one token of GET /v1/tokens.
type TokenInfo struct {
	ID        string    `json:"id"`
	Namespace string    `json:"namespace"`
	Role      string    `json:"role"`
	CreatedAt time.Time `json:"created_at"`
}

func (s *Server) listToken(ctx context.Context, t TokenInfo, now time.Time) error {
	value, _ := json.Marshal(t)
	_, err := s.d.Store.SettingPut(ctx, store.SettingPutParams{Key: tokenKeyPrefix + t.ID, Value: value, Now: now})
	return err
}

// unlistToken takes a token off the list; a failure leaves a revoked
// token listed, which is logged rather than failing the revocation.
func (s *Server) unlistToken(ctx context.Context, id string) {
	key := tokenKeyPrefix + id
	set, err := s.d.Store.SettingGet(ctx, key)
	if errors.Is(err, store.ErrNotFound) || (err == nil && set.Value == nil) {
		return
	}
	if err == nil {
		_, err = s.d.Store.SettingPut(ctx, store.SettingPutParams{Key: key, Now: s.d.Now()})
	}
	if err != nil {
		s.d.Log.Warn("cannot take a revoked token off the token list", "token", id, "err", err)
	}
}

func (s *Server) listTokens(r *http.Request, _ auth.Principal) (int, any, error) {
	all, err := s.d.Store.SettingList(r.Context(), tokenKeyPrefix)
	if err != nil {
		return 0, nil, storeErr(err)
	}
	out := struct {
		Tokens []TokenInfo `json:"tokens"`
	}{Tokens: []TokenInfo{}}
	for _, set := range all {
		var t TokenInfo
		if json.Unmarshal(set.Value, &t) == nil && t.ID != "" {
			out.Tokens = append(out.Tokens, t)
		}
	}
	// Newest first: the one just made is on top.
	sort.SliceStable(out.Tokens, func(i, j int) bool { return out.Tokens[i].CreatedAt.After(out.Tokens[j].CreatedAt) })
	return http.StatusOK, out, nil
}
