package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/flexiq/flexiq/store"
)

// SettingGet returns one setting (a tombstone has a nil Value).
func (s *Store) SettingGet(ctx context.Context, key string) (store.Setting, error) {
	st := store.Setting{Key: key}
	var updated int64
	err := s.r.QueryRowContext(ctx, `SELECT value, revision, updated_at FROM settings WHERE key = ?`, key).
		Scan(&st.Value, &st.Revision, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return st, fmt.Errorf("setting %q: %w", key, store.ErrNotFound)
	}
	if err != nil {
		return st, fmt.Errorf("sqlite: SettingGet: %w", err)
	}
	st.UpdatedAt = fromNanos(sql.NullInt64{Int64: updated, Valid: true})
	return st, nil
}

// SettingPut writes or deletes a setting with its audit entry.
func (s *Store) SettingPut(ctx context.Context, p store.SettingPutParams) (store.Setting, error) {
	out := store.Setting{Key: p.Key, Value: p.Value, UpdatedAt: p.Now.UTC()}
	err := s.tx(ctx, "SettingPut", func(tx *wtx, step func() error) error {
		var (
			before []byte
			rev    int64
		)
		err := tx.QueryRowContext(ctx, `SELECT value, revision FROM settings WHERE key = ?`, p.Key).Scan(&before, &rev)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if p.IfRevision != nil && *p.IfRevision != rev {
			return fmt.Errorf("setting %q at revision %d, not %d: %w", p.Key, rev, *p.IfRevision, store.ErrConflict)
		}
		out.Revision = rev + 1
		if _, err := tx.ExecContext(ctx, `INSERT INTO settings (key, value, revision, updated_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (key) DO UPDATE SET value = excluded.value, revision = excluded.revision, updated_at = excluded.updated_at`,
			p.Key, nullBytes(p.Value), out.Revision, nanos(p.Now)); err != nil {
			return err
		}
		if err := step(); err != nil {
			return err
		}
		if a := p.Audit; a != nil {
			if _, err := tx.ExecContext(ctx, `INSERT INTO audit (at, actor, action, target_kind, target, namespace, before, after)
				VALUES (?, ?, ?, ?, ?, ?, ?, ?)`, nanos(p.Now), a.Actor, a.Action, a.TargetKind, a.Target, a.Namespace,
				nullBytes(before), nullBytes(p.Value)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return store.Setting{}, err
	}
	return out, nil
}

// SettingList lists live settings under prefix.
func (s *Store) SettingList(ctx context.Context, prefix string) ([]store.Setting, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT key, value, revision, updated_at FROM settings
		WHERE key >= ? AND substr(key, 1, ?) = ? AND value IS NOT NULL ORDER BY key`, prefix, len(prefix), prefix)
	if err != nil {
		return nil, fmt.Errorf("sqlite: SettingList: %w", err)
	}
	defer rows.Close()
	var out []store.Setting
	for rows.Next() {
		var (
			st      store.Setting
			updated int64
		)
		if err := rows.Scan(&st.Key, &st.Value, &st.Revision, &updated); err != nil {
			return nil, fmt.Errorf("sqlite: SettingList: %w", err)
		}
		st.UpdatedAt = fromNanos(sql.NullInt64{Int64: updated, Valid: true})
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: SettingList: %w", err)
	}
	return out, nil
}

// AuditList lists a namespace's audit entries, newest first.
func (s *Store) AuditList(ctx context.Context, p store.AuditListParams) ([]store.AuditEntry, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.r.QueryContext(ctx, `SELECT id, at, actor, action, target_kind, target, namespace, before, after
		FROM audit WHERE namespace = ? ORDER BY id DESC LIMIT ?`, p.Namespace, limit)
	if err != nil {
		return nil, fmt.Errorf("sqlite: AuditList: %w", err)
	}
	defer rows.Close()
	var out []store.AuditEntry
	for rows.Next() {
		var (
			e  store.AuditEntry
			at int64
		)
		if err := rows.Scan(&e.ID, &at, &e.Actor, &e.Action, &e.TargetKind, &e.Target, &e.Namespace, &e.Before, &e.After); err != nil {
			return nil, fmt.Errorf("sqlite: AuditList: %w", err)
		}
		e.At = fromNanos(sql.NullInt64{Int64: at, Valid: true})
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: AuditList: %w", err)
	}
	return out, nil
}

// TokenCreate stores a token.
func (s *Store) TokenCreate(ctx context.Context, t store.Token) error {
	return s.tx(ctx, "TokenCreate", func(tx *wtx, _ func() error) error {
		_, err := tx.ExecContext(ctx, `INSERT INTO tokens (id, hash, namespace, role, created_at) VALUES (?, ?, ?, ?, ?)`,
			t.ID, t.Hash, t.Namespace, t.Role, nanos(t.CreatedAt))
		if err != nil && strings.Contains(err.Error(), "UNIQUE constraint failed") {
			return fmt.Errorf("token %q: %w", t.ID, store.ErrConflict)
		}
		return err
	})
}

// TokenGetByHash finds a live token.
func (s *Store) TokenGetByHash(ctx context.Context, hash []byte) (store.Token, error) {
	var (
		t       store.Token
		created int64
	)
	err := s.r.QueryRowContext(ctx, `SELECT id, hash, namespace, role, created_at FROM tokens WHERE hash = ? AND revoked_at IS NULL`, hash).
		Scan(&t.ID, &t.Hash, &t.Namespace, &t.Role, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return t, fmt.Errorf("token: %w", store.ErrNotFound)
	}
	if err != nil {
		return t, fmt.Errorf("sqlite: TokenGetByHash: %w", err)
	}
	t.CreatedAt = fromNanos(sql.NullInt64{Int64: created, Valid: true})
	return t, nil
}

// TokenRevoke revokes a live token.
func (s *Store) TokenRevoke(ctx context.Context, id string, now time.Time) (store.Token, error) {
	var t store.Token
	err := s.tx(ctx, "TokenRevoke", func(tx *wtx, _ func() error) error {
		var created int64
		err := tx.QueryRowContext(ctx, `UPDATE tokens SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL
			RETURNING id, hash, namespace, role, created_at`, nanos(now), id).Scan(&t.ID, &t.Hash, &t.Namespace, &t.Role, &created)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("token %q: %w", id, store.ErrNotFound)
		}
		t.CreatedAt = fromNanos(sql.NullInt64{Int64: created, Valid: true})
		return err
	})
	return t, err
}

const configCols = `namespace, kind, name, value, seq, revision, updated_at`

func scanConfig(sc scanner) (store.ConfigItem, error) {
	var (
		it      store.ConfigItem
		updated int64
	)
	err := sc.Scan(&it.Namespace, &it.Kind, &it.Name, &it.Value, &it.Seq, &it.Revision, &updated)
	it.UpdatedAt = fromNanos(sql.NullInt64{Int64: updated, Valid: true})
	return it, err
}

// ConfigGet returns one configuration item.
func (s *Store) ConfigGet(ctx context.Context, namespace, kind, name string) (store.ConfigItem, error) {
	it, err := scanConfig(s.r.QueryRowContext(ctx, `SELECT `+configCols+` FROM config WHERE namespace = ? AND kind = ? AND name = ?`,
		namespace, kind, name))
	if errors.Is(err, sql.ErrNoRows) {
		return it, fmt.Errorf("%s %q: %w", kind, name, store.ErrNotFound)
	}
	if err != nil {
		return it, fmt.Errorf("sqlite: ConfigGet: %w", err)
	}
	return it, nil
}

// ConfigPut creates or replaces an item.
func (s *Store) ConfigPut(ctx context.Context, p store.ConfigPutParams) (store.ConfigItem, error) {
	var out store.ConfigItem
	err := s.tx(ctx, "ConfigPut", func(tx *wtx, step func() error) error {
		it := p.Item
		cur, err := scanConfig(tx.QueryRowContext(ctx, `SELECT `+configCols+` FROM config WHERE namespace = ? AND kind = ? AND name = ?`,
			it.Namespace, it.Kind, it.Name))
		exists := err == nil
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		if exists && p.Create {
			return fmt.Errorf("%s %q exists: %w", it.Kind, it.Name, store.ErrConflict)
		}
		if p.IfRevision != nil && *p.IfRevision != cur.Revision {
			return fmt.Errorf("%s %q at revision %d, not %d: %w", it.Kind, it.Name, cur.Revision, *p.IfRevision, store.ErrConflict)
		}
		if err := step(); err != nil {
			return err
		}
		if exists {
			out, err = scanConfig(tx.QueryRowContext(ctx, `UPDATE config SET value = ?, revision = revision + 1, updated_at = ?
				WHERE seq = ? RETURNING `+configCols, it.Value, nanos(p.Now), cur.Seq))
			return err
		}
		out, err = scanConfig(tx.QueryRowContext(ctx, `INSERT INTO config (namespace, kind, name, value, revision, updated_at)
			VALUES (?, ?, ?, ?, 1, ?) RETURNING `+configCols, it.Namespace, it.Kind, it.Name, it.Value, nanos(p.Now)))
		return err
	})
	if err != nil {
		return store.ConfigItem{}, err
	}
	return out, nil
}

// ConfigDelete removes an item.
func (s *Store) ConfigDelete(ctx context.Context, namespace, kind, name string) error {
	return s.tx(ctx, "ConfigDelete", func(tx *wtx, _ func() error) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM config WHERE namespace = ? AND kind = ? AND name = ?`, namespace, kind, name)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return fmt.Errorf("%s %q: %w", kind, name, store.ErrNotFound)
		}
		return nil
	})
}

// ConfigList lists items of kind in creation order.
func (s *Store) ConfigList(ctx context.Context, namespace, kind string) ([]store.ConfigItem, error) {
	var (
		rows *sql.Rows
		err  error
	)
	if namespace == "" {
		rows, err = s.r.QueryContext(ctx, `SELECT `+configCols+` FROM config WHERE kind = ? ORDER BY seq`, kind)
	} else {
		rows, err = s.r.QueryContext(ctx, `SELECT `+configCols+` FROM config WHERE namespace = ? AND kind = ? ORDER BY seq`, namespace, kind)
	}
	if err != nil {
		return nil, fmt.Errorf("sqlite: ConfigList: %w", err)
	}
	defer rows.Close()
	var out []store.ConfigItem
	for rows.Next() {
		it, err := scanConfig(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: ConfigList: %w", err)
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: ConfigList: %w", err)
	}
	return out, nil
}
