// Package admin is the HTTP admin door of docs/admin-api.md: quotas, usage, jobs,
// dead-letter replay, generic settings, audit, tokens, triggers, periodic
// jobs, queue and task settings, Prometheus metrics and health; and what
// the dashboard of docs/dashboard.md reads: the usage history, the quota
// alarms, the namespace ranking and the token list.
//
// Every quota write goes through the store's audited SettingPut and is then
// broadcast on fq.v1.quota.changed, so every node drops its cached copy.
package admin

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/auth"
	"github.com/flexiq/flexiq/cachebust"
	"github.com/flexiq/flexiq/cluster"
	"github.com/flexiq/flexiq/store"
)

// Store is what the admin door reads and writes.
type Store interface {
	store.SettingStore
	store.TokenStore
	store.ConfigStore
	JobGet(ctx context.Context, namespace, id string) (store.Job, error)
	JobList(ctx context.Context, p store.JobListParams) ([]store.Job, error)
	JobCount(ctx context.Context, namespace string) (store.Counts, error)
	Ping(ctx context.Context) error
}

// Publisher broadcasts changes to every node (bus.Publisher).
type Publisher interface {
	QuotaChanged(ns string, rev int64, at time.Time) error
	ConfigChanged(ns, kind string) error
	TokenRevoked(id string) error
}

// Cache is the node's quota and configuration cache (cachebust.Cache).
type Cache interface {
	Get(ctx context.Context, ns string, now time.Time) cachebust.Snapshot
	Invalidate(ns string, rev int64)
	InvalidateConfig(ns string)
}

// Sender hands a message to a namespace's actor (actors.System).
type Sender interface {
	Send(ns string, m *actors.Message)
}

// Authenticator resolves bearer tokens (auth.Authenticator).
type Authenticator interface {
	Authenticate(ctx context.Context, header string) (auth.Principal, *api.Error)
	Forget(tokenID string)
}

// ClusterView reports the cluster (node.Node).
type ClusterView interface {
	ClusterStatus() cluster.Status
	OwnerOf(ns string) string
}

// Deps are the admin door's collaborators.
type Deps struct {
	Store     Store
	Auth      Authenticator
	Cache     Cache
	Publisher Publisher
	Actors    Sender
	Metrics   *Metrics
	// Cluster is the node's view of the cluster (GET /v1/cluster).
	Cluster ClusterView
	// History is this node's usage history (GET /v1/usage/history and the
	// enqueue rate in GET /v1/namespaces); nil serves none.
	History *History
	// UI serves the dashboard under /ui/ (package ui); nil serves none.
	UI http.Handler
	// Healthy reports whether the node reaches NATS (the store is pinged
	// here).
	Healthy func() error
	Now     func() time.Time
	Log     *slog.Logger
}

// Server is the admin door's handler.
type Server struct {
	d   Deps
	mux *http.ServeMux
}

// New builds the admin door.
func New(d Deps) *Server {
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	s := &Server{d: d, mux: http.NewServeMux()}
	s.routes()
	return s
}

// ServeHTTP serves the admin door.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// handler is an authenticated endpoint: it returns a status and body, or
// an error rendered the one way every surface renders it.
type handler func(r *http.Request, p auth.Principal) (int, any, error)

func (s *Server) routes() {
	s.mux.HandleFunc("GET /healthz", s.healthz)
	// Root only: the metrics name every namespace.
	s.mux.Handle("GET /metrics", s.authed(auth.Root, "reading metrics", func(w http.ResponseWriter, r *http.Request) {
		promhttp.HandlerFor(s.d.Metrics.Registry, promhttp.HandlerOpts{}).ServeHTTP(w, r)
	}))

	s.act("GET /v1/quota", auth.ActReadQuota, s.getQuota)
	s.act("PUT /v1/quota", auth.ActSetQuota, s.putQuota)
	s.act("PATCH /v1/quota", auth.ActChangeQuota, s.patchQuota)
	s.act("DELETE /v1/quota", auth.ActClearQuota, s.deleteQuota)
	s.act("GET /v1/usage", auth.ActReadUsage, s.getUsage)

	s.handle("GET /v1/jobs/{id}", auth.Admin, "read jobs", s.getJob)
	s.act("GET /v1/jobs", auth.ActListJobs, s.listJobs)
	s.act("POST /v1/dead/replay", auth.ActReplay, s.replay)

	s.handle("GET /v1/settings", auth.Root, "the settings API", s.listSettings)
	s.handle("GET /v1/settings/{key...}", auth.Root, "the settings API", s.getSetting)
	s.handle("PUT /v1/settings/{key...}", auth.Root, "the settings API", s.putSetting)
	s.handle("DELETE /v1/settings/{key...}", auth.Root, "the settings API", s.deleteSetting)

	s.handle("GET /v1/audit", auth.Admin, "read the audit trail", s.listAudit)

	s.handle("POST /v1/tokens", auth.Root, "creating tokens", s.createToken)
	s.handle("DELETE /v1/tokens/{id}", auth.Root, "revoking tokens", s.revokeToken)

	s.handle("GET /v1/cluster", auth.Root, "the cluster view", func(r *http.Request, _ auth.Principal) (int, any, error) {
		if s.d.Cluster == nil {
			return 0, nil, api.Errorf(api.CodeUnavailable, "", "no cluster view on this node")
		}
		st := s.d.Cluster.ClusterStatus()
		if ns := r.URL.Query().Get("namespace"); ns != "" {
			// Which node holds a namespace's actor: for operators
			// chasing one tenant, and for tests that kill its owner.
			st.Owner = s.d.Cluster.OwnerOf(ns)
			st.Namespace = ns
		}
		return http.StatusOK, st, nil
	})

	s.handle("GET /v1/triggers", auth.Admin, "manage triggers", s.listTriggers)
	s.handle("POST /v1/triggers", auth.Admin, "manage triggers", s.createTrigger)
	s.handle("DELETE /v1/triggers/{id}", auth.Admin, "manage triggers", s.deleteTrigger)

	s.handle("GET /v1/periodic", auth.Admin, "manage periodic jobs", s.listPeriodic)
	s.handle("POST /v1/periodic", auth.Admin, "manage periodic jobs", s.createPeriodic)
	s.handle("DELETE /v1/periodic/{name}", auth.Admin, "manage periodic jobs", s.deletePeriodic)

	s.handle("GET /v1/queues", auth.Admin, "read queue settings", s.listQueues)
	s.handle("GET /v1/queues/{name}", auth.Admin, "read queue settings", s.getQueue)
	s.handle("PUT /v1/queues/{name}", auth.Admin, "change queue settings", s.putQueue)
	s.handle("GET /v1/tasks", auth.Admin, "read task settings", s.listTasks)
	s.handle("GET /v1/tasks/{name}", auth.Admin, "read task settings", s.getTask)
	s.handle("PUT /v1/tasks/{name}", auth.Admin, "change task settings", s.putTask)

	s.dashboardRoutes()

	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, api.Errorf(api.CodeNotFound, "", "no such endpoint: %s %s", r.Method, r.URL.Path))
	})
}

// act registers an endpoint that other surfaces offer too: it needs what
// they need and is refused in their words.
func (s *Server) act(pattern string, a auth.Action, h handler) {
	s.handle(pattern, a.Perm, a.What, h)
}

// handle registers an endpoint that needs perm.
func (s *Server) handle(pattern string, perm auth.Permission, what string, h handler) {
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		p, aerr := s.d.Auth.Authenticate(r.Context(), r.Header.Get("Authorization"))
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		if aerr := p.Check(perm, what); aerr != nil {
			writeError(w, aerr)
			return
		}
		status, body, err := h(r, p)
		if err != nil {
			e := api.FromError(err)
			if e.Code == api.CodeInternal {
				s.d.Log.Error("admin request failed", "method", r.Method, "path", r.URL.Path, "err", err)
			}
			writeError(w, e)
			return
		}
		writeJSON(w, status, body)
	})
}

// authed wraps a plain handler (one that writes its own answer) with
// authentication and the permission check of perm.
func (s *Server) authed(perm auth.Permission, what string, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p, aerr := s.d.Auth.Authenticate(r.Context(), r.Header.Get("Authorization"))
		if aerr != nil {
			writeError(w, aerr)
			return
		}
		if aerr := p.Check(perm, what); aerr != nil {
			writeError(w, aerr)
			return
		}
		h(w, r)
	})
}

// Health is nil when the node reaches its store and NATS: GET /healthz,
// and the gRPC health service.
func (s *Server) Health(ctx context.Context) *api.Error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := s.d.Store.Ping(ctx); err != nil {
		return api.Errorf(api.CodeUnavailable, "", "store unreachable: %v", err)
	}
	if s.d.Healthy != nil {
		if err := s.d.Healthy(); err != nil {
			return api.Errorf(api.CodeUnavailable, "", "%v", err)
		}
	}
	return nil
}

func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	if e := s.Health(r.Context()); e != nil {
		writeError(w, e)
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if body != nil {
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false)
		_ = enc.Encode(body)
	}
}

func writeError(w http.ResponseWriter, e *api.Error) {
	writeJSON(w, api.HTTPStatus(e.Code), api.ErrorBody{Error: e})
}

// maxBody bounds a request body: a settings value or a batch of ids.
const maxBody = 8 << 20

// readBody reads a request body, bounded.
func readBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return nil, api.BadRequest("cannot read the request body: %v", err)
	}
	if len(body) > maxBody {
		return nil, api.BadRequest("request body over %d bytes", maxBody)
	}
	return body, nil
}

// checkJSON refuses a body that is not JSON in the words api.Decode uses
// for a NATS request body (docs/protocol.md: the same situation reads the same on
// every surface).
func checkJSON(body []byte) error {
	if !json.Valid(body) {
		var v any
		if err := api.Decode(body, &v); err != nil {
			return err
		}
		return api.BadRequest("request body is not valid JSON")
	}
	if !utf8.Valid(body) {
		return api.BadRequest("request body is not valid JSON: it is not UTF-8")
	}
	return nil
}

// readJSON reads a body that must be JSON.
func readJSON(r *http.Request) ([]byte, error) {
	body, err := readBody(r)
	if err != nil {
		return nil, err
	}
	if err := checkJSON(body); err != nil {
		return nil, err
	}
	return body, nil
}

// decodeJSON reads a JSON body into v.
func decodeJSON(r *http.Request, v any) error {
	body, err := readJSON(r)
	if err != nil {
		return err
	}
	return api.Decode(body, v)
}

// storeErr maps a store failure to the API.
func storeErr(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := api.AsError(err); ok {
		return err
	}
	if errors.Is(err, store.ErrNotFound) {
		return api.Errorf(api.CodeNotFound, "", "not found")
	}
	if errors.Is(err, store.ErrConflict) {
		return api.Errorf(api.CodeAborted, "", "changed concurrently, try again")
	}
	return api.Errorf(api.CodeUnavailable, "", "store unavailable, try again")
}

func queryInt(r *http.Request, name string, def, max int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > max {
		return 0, api.InvalidArgument("%s: must be an integer 1-%d, got %q", name, max, v)
	}
	return n, nil
}

func queryBool(r *http.Request, name string) (*bool, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return nil, nil
	}
	b, err := strconv.ParseBool(strings.ToLower(v))
	if err != nil {
		return nil, api.InvalidArgument("%s: must be true or false, got %q", name, v)
	}
	return &b, nil
}

// ask sends a message to a namespace's actor and waits for its answer.
func (s *Server) ask(ctx context.Context, ns string, op actors.Op, body any) (any, error) {
	out, err := actors.Ask(ctx, s.d.Actors.Send, ns, op, body)
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		return nil, api.Errorf(api.CodeUnavailable, "", "request cancelled")
	}
	return out, err
}
