package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/flexiq/flexiq/store"
)

// ---------------------------------------------------------------------------
// Settings and audit

// SettingGet returns one setting (a tombstone has a nil Value).
func (s *Store) SettingGet(ctx context.Context, key string) (store.Setting, error) {
	m, err := s.c.HGetAll(ctx, s.p+"set:"+key).Result()
	if err != nil {
		return store.Setting{}, wrap("SettingGet", err)
	}
	if len(m) == 0 {
		return store.Setting{Key: key}, fmt.Errorf("setting %q: %w", key, store.ErrNotFound)
	}
	st, err := settingFrom(key, m["value"], m["rev"], m["updated_at"])
	if _, ok := m["value"]; !ok {
		st.Value = nil
	}
	return st, wrap("SettingGet", err)
}

func settingFrom(key, value, rev, updated string) (store.Setting, error) {
	st := store.Setting{Key: key, Value: []byte(value)}
	var err error
	if st.Revision, err = strconv.ParseInt(rev, 10, 64); err != nil {
		return st, fmt.Errorf("setting %q: bad revision %q", key, rev)
	}
	st.UpdatedAt, err = parseTime(updated)
	return st, err
}

// SettingPut writes or deletes a setting with its audit entry, in one script.
func (s *Store) SettingPut(ctx context.Context, p store.SettingPutParams) (store.Setting, error) {
	const op = "SettingPut"
	ifRev := ""
	if p.IfRevision != nil {
		ifRev = strconv.FormatInt(*p.IfRevision, 10)
	}
	var value any = ""
	if p.Value != nil {
		value = p.Value
	}
	args := []any{p.Key, flag(p.Value != nil), value, nsStr(p.Now), ifRev}
	if a := p.Audit; a != nil {
		args = append(args, "1", a.Actor, a.Action, a.TargetKind, a.Target, a.Namespace, enc(a.Namespace))
	} else {
		args = append(args, "0", "", "", "", "", "", "")
	}
	if err := s.fault(op, 1); err != nil {
		return store.Setting{}, err
	}
	v, err := s.run(ctx, scriptSettingPut, args...)
	if err != nil {
		return store.Setting{}, wrap(op, err)
	}
	status, rev, err := statusReply(v)
	if err != nil {
		return store.Setting{}, wrap(op, err)
	}
	if status == "conflict" {
		return store.Setting{}, fmt.Errorf("setting %q at revision %d, not %s: %w", p.Key, rev, ifRev, store.ErrConflict)
	}
	return store.Setting{Key: p.Key, Value: p.Value, Revision: rev, UpdatedAt: p.Now.UTC()}, nil
}

// statusReply reads a {status, number} script reply.
func statusReply(v any) (string, int64, error) {
	a, err := toSlice(v)
	if err != nil || len(a) != 2 {
		return "", 0, fmt.Errorf("bad reply %v: %v", v, err)
	}
	status, err := toString(a[0])
	if err != nil {
		return "", 0, err
	}
	n, err := toInt(a[1])
	return status, n, err
}

// SettingList lists live settings under prefix, by key.
func (s *Store) SettingList(ctx context.Context, prefix string) ([]store.Setting, error) {
	v, err := s.run(ctx, scriptSettingList, prefix)
	if err != nil {
		return nil, wrap("SettingList", err)
	}
	a, err := toSlice(v)
	if err != nil || len(a)%4 != 0 {
		return nil, wrap("SettingList", fmt.Errorf("bad reply: %v", err))
	}
	var out []store.Setting
	for i := 0; i < len(a); i += 4 {
		var f [4]string
		for k := range f {
			if f[k], err = toString(a[i+k]); err != nil {
				return nil, wrap("SettingList", err)
			}
		}
		st, err := settingFrom(f[0], f[1], f[2], f[3])
		if err != nil {
			return nil, wrap("SettingList", err)
		}
		out = append(out, st)
	}
	return out, nil
}

// AuditList lists a namespace's audit entries, newest first.
func (s *Store) AuditList(ctx context.Context, p store.AuditListParams) ([]store.AuditEntry, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	v, err := s.run(ctx, scriptAuditList, enc(p.Namespace), strconv.Itoa(limit))
	if err != nil {
		return nil, wrap("AuditList", err)
	}
	a, err := toSlice(v)
	if err != nil {
		return nil, wrap("AuditList", err)
	}
	out := make([]store.AuditEntry, 0, len(a))
	for _, x := range a {
		m, err := toMap(x)
		if err != nil {
			return nil, wrap("AuditList", err)
		}
		e := store.AuditEntry{
			AuditRecord: store.AuditRecord{
				Actor: m["actor"], Action: m["action"], TargetKind: m["target_kind"], Target: m["target"], Namespace: m["namespace"],
			},
			Before: bytesOf(m, "before"),
			After:  bytesOf(m, "after"),
		}
		if e.ID, err = intOf(m, "id"); err != nil {
			return nil, wrap("AuditList", err)
		}
		if e.At, err = parseTime(m["at"]); err != nil {
			return nil, wrap("AuditList", err)
		}
		out = append(out, e)
	}
	return out, nil
}

// ---------------------------------------------------------------------------
// Tokens

func tokenFrom(m map[string]string) (store.Token, error) {
	t := store.Token{ID: m["id"], Hash: []byte(m["hash"]), Namespace: m["namespace"], Role: m["role"]}
	var err error
	t.CreatedAt, err = parseTime(m["created_at"])
	return t, err
}

// TokenCreate stores a token; an id or hash already stored is ErrConflict.
func (s *Store) TokenCreate(ctx context.Context, t store.Token) error {
	const op = "TokenCreate"
	if err := s.fault(op, 1); err != nil {
		return err
	}
	v, err := s.run(ctx, scriptTokenCreate, t.ID, t.Hash, hexOf(t.Hash), t.Namespace, t.Role, nsStr(t.CreatedAt))
	if err != nil {
		return wrap(op, err)
	}
	if v == "conflict" {
		return fmt.Errorf("token %q: id or hash exists: %w", t.ID, store.ErrConflict)
	}
	return nil
}

// TokenGetByHash finds a live token.
func (s *Store) TokenGetByHash(ctx context.Context, hash []byte) (store.Token, error) {
	v, err := s.run(ctx, scriptTokenGet, hexOf(hash))
	if err != nil {
		return store.Token{}, wrap("TokenGetByHash", err)
	}
	m, err := toMap(v)
	if err != nil {
		return store.Token{}, wrap("TokenGetByHash", err)
	}
	if len(m) == 0 {
		return store.Token{}, fmt.Errorf("token: %w", store.ErrNotFound)
	}
	t, err := tokenFrom(m)
	return t, wrap("TokenGetByHash", err)
}

// TokenRevoke revokes a live token.
func (s *Store) TokenRevoke(ctx context.Context, id string, now time.Time) (store.Token, error) {
	const op = "TokenRevoke"
	if err := s.fault(op, 1); err != nil {
		return store.Token{}, err
	}
	v, err := s.run(ctx, scriptTokenRevoke, id, nsStr(now))
	if err != nil {
		return store.Token{}, wrap(op, err)
	}
	m, err := toMap(v)
	if err != nil {
		return store.Token{}, wrap(op, err)
	}
	if len(m) == 0 {
		return store.Token{}, fmt.Errorf("token %q: %w", id, store.ErrNotFound)
	}
	t, err := tokenFrom(m)
	return t, wrap(op, err)
}

// ---------------------------------------------------------------------------
// Configuration

func configFrom(m map[string]string) (store.ConfigItem, error) {
	it := store.ConfigItem{Namespace: m["namespace"], Kind: m["kind"], Name: m["name"], Value: []byte(m["value"])}
	var err error
	if it.Seq, err = intOf(m, "seq"); err != nil {
		return it, err
	}
	if it.Revision, err = intOf(m, "rev"); err != nil {
		return it, err
	}
	it.UpdatedAt, err = parseTime(m["updated_at"])
	return it, err
}

func (s *Store) configKey(namespace, kind, name string) string {
	return s.p + "c:" + enc(namespace) + ":" + enc(kind) + ":" + name
}

// ConfigGet returns one configuration item.
func (s *Store) ConfigGet(ctx context.Context, namespace, kind, name string) (store.ConfigItem, error) {
	m, err := s.c.HGetAll(ctx, s.configKey(namespace, kind, name)).Result()
	if err != nil {
		return store.ConfigItem{}, wrap("ConfigGet", err)
	}
	if len(m) == 0 {
		return store.ConfigItem{}, fmt.Errorf("%s %q: %w", kind, name, store.ErrNotFound)
	}
	it, err := configFrom(m)
	return it, wrap("ConfigGet", err)
}

// ConfigPut creates or replaces an item.
func (s *Store) ConfigPut(ctx context.Context, p store.ConfigPutParams) (store.ConfigItem, error) {
	const op = "ConfigPut"
	it := p.Item
	ifRev := ""
	if p.IfRevision != nil {
		ifRev = strconv.FormatInt(*p.IfRevision, 10)
	}
	if err := s.fault(op, 1); err != nil {
		return store.ConfigItem{}, err
	}
	v, err := s.run(ctx, scriptConfigPut, enc(it.Namespace), enc(it.Kind), it.Name, it.Namespace, it.Kind, it.Value,
		nsStr(p.Now), flag(p.Create), ifRev)
	if err != nil {
		return store.ConfigItem{}, wrap(op, err)
	}
	a, err := toSlice(v)
	if err != nil || len(a) != 2 {
		return store.ConfigItem{}, wrap(op, fmt.Errorf("bad reply: %v", err))
	}
	if status, _ := toString(a[0]); status == "conflict" {
		rev, _ := toInt(a[1])
		if p.Create && rev > 0 {
			return store.ConfigItem{}, fmt.Errorf("%s %q exists: %w", it.Kind, it.Name, store.ErrConflict)
		}
		return store.ConfigItem{}, fmt.Errorf("%s %q at revision %d, not %s: %w", it.Kind, it.Name, rev, ifRev, store.ErrConflict)
	}
	m, err := toMap(a[1])
	if err != nil {
		return store.ConfigItem{}, wrap(op, err)
	}
	out, err := configFrom(m)
	return out, wrap(op, err)
}

// ConfigDelete removes an item.
func (s *Store) ConfigDelete(ctx context.Context, namespace, kind, name string) error {
	const op = "ConfigDelete"
	if err := s.fault(op, 1); err != nil {
		return err
	}
	v, err := s.run(ctx, scriptConfigDelete, enc(namespace), enc(kind), name)
	if err != nil {
		return wrap(op, err)
	}
	if n, err := toInt(v); err != nil {
		return wrap(op, err)
	} else if n == 0 {
		return fmt.Errorf("%s %q: %w", kind, name, store.ErrNotFound)
	}
	return nil
}

// ConfigList lists items of kind in creation order; an empty namespace
// lists every namespace's.
func (s *Store) ConfigList(ctx context.Context, namespace, kind string) ([]store.ConfigItem, error) {
	E := ""
	if namespace != "" {
		E = enc(namespace)
	}
	v, err := s.run(ctx, scriptConfigList, E, enc(kind))
	if err != nil {
		return nil, wrap("ConfigList", err)
	}
	a, err := toSlice(v)
	if err != nil {
		return nil, wrap("ConfigList", err)
	}
	var out []store.ConfigItem
	for _, x := range a {
		m, err := toMap(x)
		if err != nil {
			return nil, wrap("ConfigList", err)
		}
		it, err := configFrom(m)
		if err != nil {
			return nil, wrap("ConfigList", err)
		}
		out = append(out, it)
	}
	return out, nil
}
