package admin

import (
	"encoding/json"
	"errors"
	"net/http"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/auth"
	"github.com/flexiq/flexiq/cachebust"
	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
)

// QuotaReply is GET /v1/quota's body.
type QuotaReply struct {
	Namespace string          `json:"namespace"`
	Quota     json.RawMessage `json:"quota"`
	Revision  int64           `json:"revision"`
	// Error says why a stored document cannot be read (the namespace is
	// stopped until it is replaced or cleared).
	Error *api.Error `json:"error,omitempty"`
}

// Usage is the usage part of GET /v1/usage.
type Usage struct {
	Pending  int64 `json:"pending"`
	Running  int64 `json:"running"`
	Archived int64 `json:"archived"`
	Dead     int64 `json:"dead"`
}

// UsageReply is GET /v1/usage's body.
type UsageReply struct {
	QuotaReply
	Usage Usage `json:"usage"`
}

// readQuota returns ns's stored document, its revision and whether it
// decodes.
func (s *Server) readQuota(r *http.Request, ns string) (QuotaReply, quota.Document, error) {
	out := QuotaReply{Namespace: ns, Quota: json.RawMessage("{}")}
	set, err := s.d.Store.SettingGet(r.Context(), quota.Key(ns))
	if errors.Is(err, store.ErrNotFound) {
		return out, quota.Document{}, nil
	}
	if err != nil {
		return out, quota.Document{}, storeErr(err)
	}
	out.Revision = set.Revision
	if set.Value == nil {
		return out, quota.Document{}, nil
	}
	doc, derr := quota.Decode(set.Value)
	if derr != nil {
		out.Error = cachebust.Unreadable(ns, derr)
		if json.Valid(set.Value) {
			out.Quota = json.RawMessage(set.Value)
		} else {
			out.Quota = json.RawMessage("null")
		}
		return out, doc, nil
	}
	out.Quota = doc.Encode()
	return out, doc, nil
}

func (s *Server) getQuota(r *http.Request, p auth.Principal) (int, any, error) {
	out, _, err := s.readQuota(r, p.Namespace)
	return http.StatusOK, out, err
}

func (s *Server) getUsage(r *http.Request, p auth.Principal) (int, any, error) {
	q, _, err := s.readQuota(r, p.Namespace)
	if err != nil {
		return 0, nil, err
	}
	c, err := s.d.Store.JobCount(r.Context(), p.Namespace)
	if err != nil {
		return 0, nil, storeErr(err)
	}
	return http.StatusOK, UsageReply{QuotaReply: q, Usage: Usage{Pending: c.Pending, Running: c.Running, Archived: c.Completed, Dead: c.Dead}}, nil
}

// writeQuota stores doc (nil clears) with its audit entry and tells every
// node. ifRev makes it conditional.
func (s *Server) writeQuota(r *http.Request, p auth.Principal, doc *quota.Document, ifRev *int64) (QuotaReply, error) {
	ns := p.Namespace
	action := "quota.set"
	var value []byte
	if doc != nil {
		value = doc.Encode()
	} else {
		action = "quota.clear"
	}
	now := s.d.Now()
	set, err := s.d.Store.SettingPut(r.Context(), store.SettingPutParams{
		Key: quota.Key(ns), Value: value, Now: now, IfRevision: ifRev,
		Audit: &store.AuditRecord{Actor: p.TokenID, Action: action, TargetKind: "namespace", Target: ns, Namespace: ns},
	})
	if err != nil {
		return QuotaReply{}, err
	}
	// This node at once; the others by broadcast (and the TTL if it is lost).
	s.d.Cache.Invalidate(ns, set.Revision)
	if err := s.d.Publisher.QuotaChanged(ns, set.Revision, now); err != nil {
		s.d.Log.Warn("quota change broadcast failed; other nodes catch up within the cache TTL", "namespace", ns, "err", err)
	}
	out := QuotaReply{Namespace: ns, Quota: json.RawMessage("{}"), Revision: set.Revision}
	if doc != nil {
		out.Quota = doc.Encode()
	}
	return out, nil
}

func (s *Server) putQuota(r *http.Request, p auth.Principal) (int, any, error) {
	body, err := readJSON(r)
	if err != nil {
		return 0, nil, err
	}
	doc, err := quota.Decode(body)
	if err != nil {
		return 0, nil, err
	}
	out, err := s.writeQuota(r, p, &doc, nil)
	return http.StatusOK, out, storeErr(err)
}

func (s *Server) patchQuota(r *http.Request, p auth.Principal) (int, any, error) {
	patch, err := readJSON(r)
	if err != nil {
		return 0, nil, err
	}
	// Read, merge, write if nobody wrote in between; a race retries.
	for attempt := 0; attempt < 10; attempt++ {
		cur, doc, err := s.readQuota(r, p.Namespace)
		if err != nil {
			return 0, nil, err
		}
		if cur.Error != nil {
			return 0, nil, api.Errorf(api.CodeFailedPrecondition, api.ReasonQuotaUnreadable,
				"the stored quota of namespace '%s' cannot be read, so it cannot be patched: replace it with PUT or clear it with DELETE", p.Namespace)
		}
		merged, err := doc.Merge(patch)
		if err != nil {
			return 0, nil, err
		}
		rev := cur.Revision
		out, err := s.writeQuota(r, p, &merged, &rev)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		return http.StatusOK, out, storeErr(err)
	}
	return 0, nil, api.Errorf(api.CodeAborted, "", "the quota kept changing; try again")
}

func (s *Server) deleteQuota(r *http.Request, p auth.Principal) (int, any, error) {
	out, err := s.writeQuota(r, p, nil, nil)
	return http.StatusOK, out, storeErr(err)
}

// ---------------------------------------------------------------------------
// Jobs and dead letters

func (s *Server) jobView(r *http.Request, ns string, j *store.Job) api.Job {
	snap := s.d.Cache.Get(r.Context(), ns, s.d.Now())
	max := j.MaxAttempts
	if max <= 0 {
		max = api.DefaultMaxAttempts
		if qs, ok := snap.Queues[j.Queue]; ok && qs.MaxAttempts != nil {
			max = *qs.MaxAttempts
		}
	}
	return actors.JobView(j, max)
}

func (s *Server) getJob(r *http.Request, p auth.Principal) (int, any, error) {
	id := r.PathValue("id")
	j, err := s.d.Store.JobGet(r.Context(), p.Namespace, id)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, actors.UnknownJob(id)
	}
	if err != nil {
		return 0, nil, storeErr(err)
	}
	return http.StatusOK, s.jobView(r, p.Namespace, &j), nil
}

// JobsReply is a job listing.
type JobsReply struct {
	Jobs []api.Job `json:"jobs"`
}

func (s *Server) listJobs(r *http.Request, p auth.Principal) (int, any, error) {
	q := r.URL.Query()
	params := store.JobListParams{Namespace: p.Namespace, Queue: q.Get("queue")}
	switch st := api.Status(q.Get("status")); st {
	case "", api.StatusPending, api.StatusRunning, api.StatusCompleted, api.StatusDead:
		params.Status = st
	default:
		return 0, nil, api.InvalidArgument("status: must be pending, running, completed or dead, got %q", st)
	}
	if params.Queue != "" {
		if err := api.CheckName("queue", params.Queue); err != nil {
			return 0, nil, err
		}
	}
	shed, err := queryBool(r, "shed")
	if err != nil {
		return 0, nil, err
	}
	params.Shed = shed
	if params.Limit, err = queryInt(r, "limit", 100, 10000); err != nil {
		return 0, nil, err
	}
	jobs, err := s.d.Store.JobList(r.Context(), params)
	if err != nil {
		return 0, nil, storeErr(err)
	}
	out := JobsReply{Jobs: make([]api.Job, len(jobs))}
	for i := range jobs {
		out.Jobs[i] = s.jobView(r, p.Namespace, &jobs[i])
	}
	return http.StatusOK, out, nil
}

func (s *Server) replay(r *http.Request, p auth.Principal) (int, any, error) {
	var req api.ReplayRequest
	if err := decodeJSON(r, &req); err != nil {
		return 0, nil, err
	}
	if err := req.Validate(); err != nil {
		return 0, nil, err
	}
	body, err := s.ask(r.Context(), p.Namespace, actors.OpReplay, &req)
	return http.StatusOK, body, err
}
