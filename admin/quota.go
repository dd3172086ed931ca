package admin

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

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

// The quota, usage and dead-letter operations below are the admin door's
// and the gRPC Admin service's alike: each surface authenticates, checks
// the same auth.Action and renders the result, and the rule lives here
// once.

// readQuota returns ns's stored document, its revision and whether it
// decodes.
func (s *Server) readQuota(ctx context.Context, ns string) (QuotaReply, quota.Document, error) {
	out := QuotaReply{Namespace: ns, Quota: json.RawMessage("{}")}
	set, err := s.d.Store.SettingGet(ctx, quota.Key(ns))
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

// Quota is namespace ns's quota document and revision; a stored document
// that cannot be read is reported in the reply's Error, not as a failure.
func (s *Server) Quota(ctx context.Context, ns string) (QuotaReply, error) {
	out, _, err := s.readQuota(ctx, ns)
	return out, err
}

func (s *Server) getQuota(r *http.Request, p auth.Principal) (int, any, error) {
	out, err := s.Quota(r.Context(), p.Namespace)
	return http.StatusOK, out, err
}

// Usage is namespace ns's quota with its counts beside it.
func (s *Server) Usage(ctx context.Context, ns string) (UsageReply, error) {
	q, _, err := s.readQuota(ctx, ns)
	if err != nil {
		return UsageReply{}, err
	}
	c, err := s.d.Store.JobCount(ctx, ns)
	if err != nil {
		return UsageReply{}, storeErr(err)
	}
	return UsageReply{QuotaReply: q, Usage: Usage{Pending: c.Pending, Running: c.Running, Archived: c.Completed, Dead: c.Dead}}, nil
}

func (s *Server) getUsage(r *http.Request, p auth.Principal) (int, any, error) {
	out, err := s.Usage(r.Context(), p.Namespace)
	return http.StatusOK, out, err
}

// writeQuota stores doc (nil clears) with its audit entry and tells every
// node. ifRev makes it conditional.
func (s *Server) writeQuota(ctx context.Context, p auth.Principal, doc *quota.Document, ifRev *int64) (QuotaReply, error) {
	ns := p.Namespace
	action := "quota.set"
	var value []byte
	if doc != nil {
		value = doc.Encode()
	} else {
		action = "quota.clear"
	}
	now := s.d.Now()
	set, err := s.d.Store.SettingPut(ctx, store.SettingPutParams{
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

// SetQuota replaces p's namespace's document whole with body, the bare
// document as JSON text.
func (s *Server) SetQuota(ctx context.Context, p auth.Principal, body []byte) (QuotaReply, error) {
	if err := checkJSON(body); err != nil {
		return QuotaReply{}, err
	}
	doc, err := quota.Decode(body)
	if err != nil {
		return QuotaReply{}, err
	}
	out, err := s.writeQuota(ctx, p, &doc, nil)
	return out, storeErr(err)
}

func (s *Server) putQuota(r *http.Request, p auth.Principal) (int, any, error) {
	body, err := readBody(r)
	if err != nil {
		return 0, nil, err
	}
	out, err := s.SetQuota(r.Context(), p, body)
	return http.StatusOK, out, err
}

// PatchQuota applies patch, a JSON merge patch (RFC 7386) of the bare
// document, to p's namespace's document.
func (s *Server) PatchQuota(ctx context.Context, p auth.Principal, patch []byte) (QuotaReply, error) {
	if err := checkJSON(patch); err != nil {
		return QuotaReply{}, err
	}
	// Read, merge, write if nobody wrote in between; a race retries.
	for attempt := 0; attempt < 10; attempt++ {
		cur, doc, err := s.readQuota(ctx, p.Namespace)
		if err != nil {
			return QuotaReply{}, err
		}
		if cur.Error != nil {
			return QuotaReply{}, api.Errorf(api.CodeFailedPrecondition, api.ReasonQuotaUnreadable,
				"the stored quota of namespace '%s' cannot be read, so it cannot be patched: replace it with PUT or clear it with DELETE", p.Namespace)
		}
		merged, err := doc.Merge(patch)
		if err != nil {
			return QuotaReply{}, err
		}
		rev := cur.Revision
		out, err := s.writeQuota(ctx, p, &merged, &rev)
		if errors.Is(err, store.ErrConflict) {
			continue
		}
		return out, storeErr(err)
	}
	return QuotaReply{}, api.Errorf(api.CodeAborted, "", "the quota kept changing; try again")
}

func (s *Server) patchQuota(r *http.Request, p auth.Principal) (int, any, error) {
	patch, err := readBody(r)
	if err != nil {
		return 0, nil, err
	}
	out, err := s.PatchQuota(r.Context(), p, patch)
	return http.StatusOK, out, err
}

// ClearQuota makes everything unlimited in p's namespace.
func (s *Server) ClearQuota(ctx context.Context, p auth.Principal) (QuotaReply, error) {
	out, err := s.writeQuota(ctx, p, nil, nil)
	return out, storeErr(err)
}

func (s *Server) deleteQuota(r *http.Request, p auth.Principal) (int, any, error) {
	out, err := s.ClearQuota(r.Context(), p)
	return http.StatusOK, out, err
}

// ---------------------------------------------------------------------------
// Jobs and dead letters

func (s *Server) jobView(ctx context.Context, ns string, j *store.Job) api.Job {
	snap := s.d.Cache.Get(ctx, ns, s.d.Now())
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
	return http.StatusOK, s.jobView(r.Context(), p.Namespace, &j), nil
}

// JobsReply is a job listing.
type JobsReply struct {
	Jobs []api.Job `json:"jobs"`
}

// JobFilter selects the jobs of a listing.
type JobFilter struct {
	Status api.Status // "" = any
	Queue  string     // "" = any
	Shed   *bool      // nil = shed or not
	Limit  *int       // nil = DefaultJobLimit
}

// The bounds of a job listing.
const (
	DefaultJobLimit = 100
	MaxJobLimit     = 10000
)

// Jobs lists namespace ns's jobs, newest first.
func (s *Server) Jobs(ctx context.Context, ns string, f JobFilter) (JobsReply, error) {
	params := store.JobListParams{Namespace: ns, Queue: f.Queue, Shed: f.Shed, Limit: DefaultJobLimit}
	switch f.Status {
	case "", api.StatusPending, api.StatusRunning, api.StatusCompleted, api.StatusDead:
		params.Status = f.Status
	default:
		return JobsReply{}, api.InvalidArgument("status: must be pending, running, completed or dead, got %q", f.Status)
	}
	if params.Queue != "" {
		if err := api.CheckName("queue", params.Queue); err != nil {
			return JobsReply{}, err
		}
	}
	if f.Limit != nil {
		if *f.Limit < 1 || *f.Limit > MaxJobLimit {
			return JobsReply{}, limitErr(strconv.Itoa(*f.Limit))
		}
		params.Limit = *f.Limit
	}
	jobs, err := s.d.Store.JobList(ctx, params)
	if err != nil {
		return JobsReply{}, storeErr(err)
	}
	out := JobsReply{Jobs: make([]api.Job, len(jobs))}
	for i := range jobs {
		out.Jobs[i] = s.jobView(ctx, ns, &jobs[i])
	}
	return out, nil
}

// limitErr refuses a listing's limit, got as the caller wrote it.
func limitErr(got string) error {
	return api.InvalidArgument("limit: must be an integer 1-%d, got %q", MaxJobLimit, got)
}

func (s *Server) listJobs(r *http.Request, p auth.Principal) (int, any, error) {
	q := r.URL.Query()
	f := JobFilter{Status: api.Status(q.Get("status")), Queue: q.Get("queue")}
	shed, err := queryBool(r, "shed")
	if err != nil {
		return 0, nil, err
	}
	f.Shed = shed
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, nil, limitErr(v)
		}
		f.Limit = &n
	}
	out, err := s.Jobs(r.Context(), p.Namespace, f)
	return http.StatusOK, out, err
}

// Replay sends dead letters of namespace ns back through admission; the
// reply has the shape of an enqueue's.
func (s *Server) Replay(ctx context.Context, ns string, req *api.ReplayRequest) (any, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	return s.ask(ctx, ns, actors.OpReplay, req)
}

func (s *Server) replay(r *http.Request, p auth.Principal) (int, any, error) {
	var req api.ReplayRequest
	if err := decodeJSON(r, &req); err != nil {
		return 0, nil, err
	}
	body, err := s.Replay(r.Context(), p.Namespace, &req)
	return http.StatusOK, body, err
}
