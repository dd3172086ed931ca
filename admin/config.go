package admin

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/auth"
	"github.com/flexiq/flexiq/maintenance"
	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
)

// ---------------------------------------------------------------------------
// Generic settings (root only). quota: keys are reserved: never listed, GET
// is 404, PUT and DELETE are 403.

// SettingReply is one setting.
type SettingReply struct {
	Key   string          `json:"key"`
	Value json.RawMessage `json:"value"`
}

// maxKeyBytes bounds a settings key.
const maxKeyBytes = 256

func settingKey(r *http.Request, write bool) (string, error) {
	key := r.PathValue("key")
	if key == "" || len(key) > maxKeyBytes {
		return "", api.InvalidArgument("key: must be 1-%d bytes, got %d", maxKeyBytes, len(key))
	}
	if strings.HasPrefix(key, quota.KeyPrefix) {
		if write {
			return "", api.Errorf(api.CodePermissionDenied, "", "key %q: the quota: prefix is reserved; use /v1/quota or fq quota", key)
		}
		return "", api.Errorf(api.CodeNotFound, "", "setting %q not found", key)
	}
	if strings.HasPrefix(key, ReservedPrefix) {
		if write {
			return "", api.Errorf(api.CodePermissionDenied, "", "key %q: the flexiq: prefix is reserved for FlexiQ's own records (alarms, the token list)", key)
		}
		return "", api.Errorf(api.CodeNotFound, "", "setting %q not found", key)
	}
	return key, nil
}

// ReservedPrefix starts the settings keys of FlexiQ's own records: the
// quota alarms (alarm.KeyPrefix) and the token list (tokenKeyPrefix). Like
// quota:, the generic settings API never lists, reads or writes them.
const ReservedPrefix = "flexiq:"

// hiddenSetting reports whether the generic settings API hides key.
func hiddenSetting(key string) bool {
	return strings.HasPrefix(key, quota.KeyPrefix) || strings.HasPrefix(key, ReservedPrefix)
}

func (s *Server) listSettings(r *http.Request, _ auth.Principal) (int, any, error) {
	all, err := s.d.Store.SettingList(r.Context(), "")
	if err != nil {
		return 0, nil, storeErr(err)
	}
	out := struct {
		Settings []SettingReply `json:"settings"`
	}{Settings: []SettingReply{}}
	for _, st := range all {
		if hiddenSetting(st.Key) {
			continue
		}
		out.Settings = append(out.Settings, SettingReply{Key: st.Key, Value: st.Value})
	}
	return http.StatusOK, out, nil
}

func (s *Server) getSetting(r *http.Request, _ auth.Principal) (int, any, error) {
	key, err := settingKey(r, false)
	if err != nil {
		return 0, nil, err
	}
	st, err := s.d.Store.SettingGet(r.Context(), key)
	if errors.Is(err, store.ErrNotFound) || (err == nil && st.Value == nil) {
		return 0, nil, api.Errorf(api.CodeNotFound, "", "setting %q not found", key)
	}
	if err != nil {
		return 0, nil, storeErr(err)
	}
	return http.StatusOK, SettingReply{Key: key, Value: st.Value}, nil
}

func (s *Server) putSetting(r *http.Request, p auth.Principal) (int, any, error) {
	key, err := settingKey(r, true)
	if err != nil {
		return 0, nil, err
	}
	body, err := readJSON(r)
	if err != nil {
		return 0, nil, err
	}
	_, err = s.d.Store.SettingPut(r.Context(), store.SettingPutParams{
		Key: key, Value: body, Now: s.d.Now(),
		Audit: &store.AuditRecord{Actor: p.TokenID, Action: "setting.put", TargetKind: "setting", Target: key},
	})
	if err != nil {
		return 0, nil, storeErr(err)
	}
	return http.StatusOK, SettingReply{Key: key, Value: body}, nil
}

func (s *Server) deleteSetting(r *http.Request, p auth.Principal) (int, any, error) {
	key, err := settingKey(r, true)
	if err != nil {
		return 0, nil, err
	}
	st, err := s.d.Store.SettingGet(r.Context(), key)
	if errors.Is(err, store.ErrNotFound) || (err == nil && st.Value == nil) {
		return 0, nil, api.Errorf(api.CodeNotFound, "", "setting %q not found", key)
	}
	if err != nil {
		return 0, nil, storeErr(err)
	}
	rev := st.Revision
	_, err = s.d.Store.SettingPut(r.Context(), store.SettingPutParams{
		Key: key, Now: s.d.Now(), IfRevision: &rev,
		Audit: &store.AuditRecord{Actor: p.TokenID, Action: "setting.delete", TargetKind: "setting", Target: key},
	})
	if err != nil {
		return 0, nil, storeErr(err)
	}
	return http.StatusOK, api.Empty{}, nil
}

// ---------------------------------------------------------------------------
// Audit

// AuditEntry is one audit record as the API shows it.
type AuditEntry struct {
	At         time.Time       `json:"at"`
	Actor      string          `json:"actor"`
	Action     string          `json:"action"`
	TargetKind string          `json:"target_kind"`
	Target     string          `json:"target"`
	Before     json.RawMessage `json:"before"`
	After      json.RawMessage `json:"after"`
}

func rawOrNull(b []byte) json.RawMessage {
	if b == nil {
		return json.RawMessage("null")
	}
	if !json.Valid(b) {
		s, _ := json.Marshal(string(b)) // an unreadable stored value, shown as text
		return s
	}
	return b
}

func (s *Server) listAudit(r *http.Request, p auth.Principal) (int, any, error) {
	limit, err := queryInt(r, "limit", 100, 10000)
	if err != nil {
		return 0, nil, err
	}
	entries, err := s.d.Store.AuditList(r.Context(), store.AuditListParams{Namespace: p.Namespace, Limit: limit})
	if err != nil {
		return 0, nil, storeErr(err)
	}
	out := struct {
		Entries []AuditEntry `json:"entries"`
	}{Entries: make([]AuditEntry, len(entries))}
	for i, e := range entries {
		out.Entries[i] = AuditEntry{At: e.At.UTC(), Actor: e.Actor, Action: e.Action, TargetKind: e.TargetKind,
			Target: e.Target, Before: rawOrNull(e.Before), After: rawOrNull(e.After)}
	}
	return http.StatusOK, out, nil
}

// ---------------------------------------------------------------------------
// Tokens (root only)

// TokenReply is a created token; the secret is shown only here.
type TokenReply struct {
	ID        string `json:"id"`
	Token     string `json:"token,omitempty"`
	Namespace string `json:"namespace"`
	Role      string `json:"role"`
}

func (s *Server) createToken(r *http.Request, _ auth.Principal) (int, any, error) {
	var req struct {
		Namespace string `json:"namespace"`
		Role      string `json:"role"`
	}
	if err := decodeJSON(r, &req); err != nil {
		return 0, nil, err
	}
	if err := quota.CheckNamespace(req.Namespace); err != nil {
		return 0, nil, err
	}
	role, err := auth.ParseRole(req.Role)
	if err != nil {
		return 0, nil, err
	}
	id, secret, err := auth.NewToken()
	if err != nil {
		return 0, nil, err
	}
	now := s.d.Now()
	// The token list first (GET /v1/tokens; the token store cannot list),
	// so that no token exists unlisted; a token that then fails to be
	// created is taken off the list again.
	if err := s.listToken(r.Context(), TokenInfo{ID: id, Namespace: req.Namespace, Role: string(role), CreatedAt: now.UTC()}, now); err != nil {
		return 0, nil, storeErr(err)
	}
	if err := s.d.Store.TokenCreate(r.Context(), store.Token{
		ID: id, Hash: auth.Hash(secret), Namespace: req.Namespace, Role: string(role), CreatedAt: now,
	}); err != nil {
		s.unlistToken(r.Context(), id)
		return 0, nil, storeErr(err)
	}
	return http.StatusCreated, TokenReply{ID: id, Token: secret, Namespace: req.Namespace, Role: string(role)}, nil
}

func (s *Server) revokeToken(r *http.Request, _ auth.Principal) (int, any, error) {
	id := r.PathValue("id")
	t, err := s.d.Store.TokenRevoke(r.Context(), id, s.d.Now())
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, api.Errorf(api.CodeNotFound, "", "token %q not found", id)
	}
	if err != nil {
		return 0, nil, storeErr(err)
	}
	s.d.Auth.Forget(id)
	s.unlistToken(r.Context(), id)
	if err := s.d.Publisher.TokenRevoked(id); err != nil {
		s.d.Log.Warn("token revocation broadcast failed; other nodes forget it within 10 s", "token", id, "err", err)
	}
	return http.StatusOK, TokenReply{ID: t.ID, Namespace: t.Namespace, Role: t.Role}, nil
}

// ---------------------------------------------------------------------------
// Triggers, periodic jobs, queue and task settings: configuration items of
// the token's namespace. Each write tells every node.

func (s *Server) configChanged(ns, kind string) {
	s.d.Cache.InvalidateConfig(ns)
	if err := s.d.Publisher.ConfigChanged(ns, kind); err != nil {
		s.d.Log.Warn("config change broadcast failed; other nodes catch up within the cache TTL", "namespace", ns, "err", err)
	}
}

func randomID(prefix string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func (s *Server) listTriggers(r *http.Request, p auth.Principal) (int, any, error) {
	items, err := s.d.Store.ConfigList(r.Context(), p.Namespace, store.KindTrigger)
	if err != nil {
		return 0, nil, storeErr(err)
	}
	out := struct {
		Triggers []api.Trigger `json:"triggers"`
	}{Triggers: []api.Trigger{}}
	for _, it := range items {
		var tr api.Trigger
		if json.Unmarshal(it.Value, &tr) == nil {
			tr.ID = it.Name
			out.Triggers = append(out.Triggers, tr)
		}
	}
	return http.StatusOK, out, nil
}

func (s *Server) createTrigger(r *http.Request, p auth.Principal) (int, any, error) {
	var tr api.Trigger
	if err := decodeJSON(r, &tr); err != nil {
		return 0, nil, err
	}
	if tr.Event == "" || len(tr.Event) > api.MaxNameBytes {
		return 0, nil, api.InvalidArgument("event: must be 1-%d bytes, got %d", api.MaxNameBytes, len(tr.Event))
	}
	if err := api.CheckName("queue", tr.Queue); err != nil {
		return 0, nil, err
	}
	if err := api.CheckName("task", tr.Task); err != nil {
		return 0, nil, err
	}
	tr.ID = randomID("trg_")
	value, _ := json.Marshal(api.Trigger{Event: tr.Event, Queue: tr.Queue, Task: tr.Task})
	if _, err := s.d.Store.ConfigPut(r.Context(), store.ConfigPutParams{
		Item: store.ConfigItem{Namespace: p.Namespace, Kind: store.KindTrigger, Name: tr.ID, Value: value},
		Now:  s.d.Now(), Create: true,
	}); err != nil {
		return 0, nil, storeErr(err)
	}
	s.configChanged(p.Namespace, store.KindTrigger)
	return http.StatusCreated, tr, nil
}

func (s *Server) deleteTrigger(r *http.Request, p auth.Principal) (int, any, error) {
	return s.deleteItem(r, p, store.KindTrigger, r.PathValue("id"), "trigger")
}

// deleteItem removes one configuration item of the namespace and tells
// every node.
func (s *Server) deleteItem(r *http.Request, p auth.Principal, kind, name, what string) (int, any, error) {
	err := s.d.Store.ConfigDelete(r.Context(), p.Namespace, kind, name)
	if errors.Is(err, store.ErrNotFound) {
		return 0, nil, api.Errorf(api.CodeNotFound, "", "%s %q not found", what, name)
	}
	if err != nil {
		return 0, nil, storeErr(err)
	}
	s.configChanged(p.Namespace, kind)
	return http.StatusOK, api.Empty{}, nil
}

// ParseCron validates a schedule: at most api.MaxCronBytes of 5-field
// cron or a descriptor such as "@every 30s" (the same parser the periodic
// firer uses).
func ParseCron(spec string) error {
	if len(spec) > api.MaxCronBytes {
		return api.InvalidArgument("cron: must be at most %d bytes, got %d", api.MaxCronBytes, len(spec))
	}
	if _, err := maintenance.ParseCron(spec); err != nil {
		return api.InvalidArgument("cron: %v (want 5 fields such as \"*/5 * * * *\" or @every 30s)", err)
	}
	return nil
}

func (s *Server) listPeriodic(r *http.Request, p auth.Principal) (int, any, error) {
	items, err := s.d.Store.ConfigList(r.Context(), p.Namespace, store.KindPeriodic)
	if err != nil {
		return 0, nil, storeErr(err)
	}
	out := struct {
		Periodic []api.Periodic `json:"periodic"`
	}{Periodic: []api.Periodic{}}
	for _, it := range items {
		var pj api.Periodic
		if json.Unmarshal(it.Value, &pj) == nil {
			out.Periodic = append(out.Periodic, pj)
		}
	}
	return http.StatusOK, out, nil
}

func (s *Server) createPeriodic(r *http.Request, p auth.Principal) (int, any, error) {
	var pj api.Periodic
	if err := decodeJSON(r, &pj); err != nil {
		return 0, nil, err
	}
	if pj.Name == "" || len(pj.Name) > api.MaxNameBytes {
		return 0, nil, api.InvalidArgument("name: must be 1-%d bytes, got %d", api.MaxNameBytes, len(pj.Name))
	}
	if err := ParseCron(pj.Cron); err != nil {
		return 0, nil, err
	}
	if err := api.CheckName("queue", pj.Queue); err != nil {
		return 0, nil, err
	}
	if err := api.CheckName("task", pj.Task); err != nil {
		return 0, nil, err
	}
	if len(pj.Payload) > api.MaxPayloadBytes {
		return 0, nil, api.InvalidArgument("payload: must be at most %d bytes", api.MaxPayloadBytes)
	}
	value, _ := json.Marshal(pj)
	_, err := s.d.Store.ConfigPut(r.Context(), store.ConfigPutParams{
		Item: store.ConfigItem{Namespace: p.Namespace, Kind: store.KindPeriodic, Name: pj.Name, Value: value},
		Now:  s.d.Now(), Create: true,
	})
	if errors.Is(err, store.ErrConflict) {
		return 0, nil, api.Errorf(api.CodeAlreadyExists, "", "periodic job %q exists; remove it first", pj.Name)
	}
	if err != nil {
		return 0, nil, storeErr(err)
	}
	s.configChanged(p.Namespace, store.KindPeriodic)
	return http.StatusCreated, pj, nil
}

func (s *Server) deletePeriodic(r *http.Request, p auth.Principal) (int, any, error) {
	return s.deleteItem(r, p, store.KindPeriodic, r.PathValue("name"), "periodic job")
}

// settingsDoc is a queue's or task's settings document.
type settingsDoc interface{ Encode() []byte }

func (s *Server) getNamed(r *http.Request, p auth.Principal, kind string) (int, any, error) {
	name := r.PathValue("name")
	if err := api.CheckName(kind, name); err != nil {
		return 0, nil, err
	}
	it, err := s.d.Store.ConfigGet(r.Context(), p.Namespace, kind, name)
	if errors.Is(err, store.ErrNotFound) {
		return http.StatusOK, json.RawMessage("{}"), nil
	}
	if err != nil {
		return 0, nil, storeErr(err)
	}
	return http.StatusOK, json.RawMessage(it.Value), nil
}

func (s *Server) putNamed(r *http.Request, p auth.Principal, kind string, decode func([]byte) (settingsDoc, error)) (int, any, error) {
	name := r.PathValue("name")
	if err := api.CheckName(kind, name); err != nil {
		return 0, nil, err
	}
	body, err := readJSON(r)
	if err != nil {
		return 0, nil, err
	}
	doc, err := decode(body)
	if err != nil {
		return 0, nil, err
	}
	value := doc.Encode()
	if _, err := s.d.Store.ConfigPut(r.Context(), store.ConfigPutParams{
		Item: store.ConfigItem{Namespace: p.Namespace, Kind: kind, Name: name, Value: value}, Now: s.d.Now(),
	}); err != nil {
		return 0, nil, storeErr(err)
	}
	s.configChanged(p.Namespace, kind)
	return http.StatusOK, json.RawMessage(value), nil
}

func (s *Server) listNamed(r *http.Request, p auth.Principal, kind, field string) (int, any, error) {
	items, err := s.d.Store.ConfigList(r.Context(), p.Namespace, kind)
	if err != nil {
		return 0, nil, storeErr(err)
	}
	out := map[string]json.RawMessage{}
	for _, it := range items {
		out[it.Name] = it.Value
	}
	return http.StatusOK, map[string]any{field: out}, nil
}

func (s *Server) getQueue(r *http.Request, p auth.Principal) (int, any, error) {
	return s.getNamed(r, p, store.KindQueue)
}

func (s *Server) putQueue(r *http.Request, p auth.Principal) (int, any, error) {
	return s.putNamed(r, p, store.KindQueue, func(b []byte) (settingsDoc, error) { return quota.DecodeQueueSettings(b) })
}

func (s *Server) listQueues(r *http.Request, p auth.Principal) (int, any, error) {
	return s.listNamed(r, p, store.KindQueue, "queues")
}

func (s *Server) getTask(r *http.Request, p auth.Principal) (int, any, error) {
	return s.getNamed(r, p, store.KindTask)
}

func (s *Server) putTask(r *http.Request, p auth.Principal) (int, any, error) {
	return s.putNamed(r, p, store.KindTask, func(b []byte) (settingsDoc, error) { return quota.DecodeTaskSettings(b) })
}

func (s *Server) listTasks(r *http.Request, p auth.Principal) (int, any, error) {
	return s.listNamed(r, p, store.KindTask, "tasks")
}
