package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flexiq/flexiq/store"
)

// SettingGet returns one setting (a tombstone has a nil Value).
func (s *Store) SettingGet(ctx context.Context, key string) (store.Setting, error) {
	st := store.Setting{Key: key}
	var updated int64
	err := s.pool.QueryRow(ctx, `SELECT value, revision, updated_at FROM settings WHERE key = $1`, key).
		Scan(&st.Value, &st.Revision, &updated)
	if errors.Is(err, pgx.ErrNoRows) {
		return st, fmt.Errorf("setting %q: %w", key, store.ErrNotFound)
	}
	if err != nil {
		return st, fmt.Errorf("postgres: SettingGet: %w", err)
	}
	st.UpdatedAt = fromNanos(updated)
	return st, nil
}

// SettingPut writes or deletes a setting with its audit entry.
func (s *Store) SettingPut(ctx context.Context, p store.SettingPutParams) (store.Setting, error) {
	out := store.Setting{Key: p.Key, Value: p.Value, UpdatedAt: p.Now.UTC()}
	err := s.writeRetrying(ctx, "SettingPut", true, func(t *txn) error {
		var (
			before []byte
			rev    int64
		)
		t.query(`SELECT value, revision FROM settings WHERE key = $1 FOR UPDATE`, []any{p.Key}, func(rows pgx.Rows) error {
			if rows.Next() {
				if err := rows.Scan(&before, &rev); err != nil {
					return err
				}
			}
			return rows.Err()
		})
		if err := t.flush(); err != nil {
			return err
		}
		if p.IfRevision != nil && *p.IfRevision != rev {
			return fmt.Errorf("setting %q at revision %d, not %d: %w", p.Key, rev, *p.IfRevision, store.ErrConflict)
		}
		out.Revision = rev + 1
		if rev == 0 {
			// A concurrent first write of the key makes this a unique
			// violation, and the write runs again.
			t.exec(`INSERT INTO settings (key, value, revision, updated_at) VALUES ($1, $2, $3, $4)`,
				[]any{p.Key, p.Value, out.Revision, nanos(p.Now)}, nil)
		} else {
			t.exec(`UPDATE settings SET value = $2, revision = $3, updated_at = $4 WHERE key = $1`,
				[]any{p.Key, p.Value, out.Revision, nanos(p.Now)}, nil)
		}
		if a := p.Audit; a != nil {
			t.exec(`INSERT INTO audit (at, actor, action, target_kind, target, namespace, before, after)
				VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
				[]any{nanos(p.Now), a.Actor, a.Action, a.TargetKind, a.Target, a.Namespace, before, p.Value}, nil)
		}
		return nil
	})
	if err != nil {
		return store.Setting{}, err
	}
	return out, nil
}

// SettingList lists live settings under prefix, by key (bytewise: the
// column's collation is "C").
func (s *Store) SettingList(ctx context.Context, prefix string) ([]store.Setting, error) {
	rows, err := s.pool.Query(ctx, `SELECT key, value, revision, updated_at FROM settings
		WHERE key >= $1 AND starts_with(key, $1) AND value IS NOT NULL ORDER BY key`, prefix)
	if err != nil {
		return nil, fmt.Errorf("postgres: SettingList: %w", err)
	}
	defer rows.Close()
	var out []store.Setting
	for rows.Next() {
		var (
			st      store.Setting
			updated int64
		)
		if err := rows.Scan(&st.Key, &st.Value, &st.Revision, &updated); err != nil {
			return nil, fmt.Errorf("postgres: SettingList: %w", err)
		}
		st.UpdatedAt = fromNanos(updated)
		out = append(out, st)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: SettingList: %w", err)
	}
	return out, nil
}

// AuditList lists a namespace's audit entries, newest first.
func (s *Store) AuditList(ctx context.Context, p store.AuditListParams) ([]store.AuditEntry, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	rows, err := s.pool.Query(ctx, `SELECT id, at, actor, action, target_kind, target, namespace, before, after
		FROM audit WHERE namespace = $1 ORDER BY id DESC LIMIT $2`, p.Namespace, limit)
	if err != nil {
		return nil, fmt.Errorf("postgres: AuditList: %w", err)
	}
	defer rows.Close()
	var out []store.AuditEntry
	for rows.Next() {
		var (
			e  store.AuditEntry
			at int64
		)
		if err := rows.Scan(&e.ID, &at, &e.Actor, &e.Action, &e.TargetKind, &e.Target, &e.Namespace, &e.Before, &e.After); err != nil {
			return nil, fmt.Errorf("postgres: AuditList: %w", err)
		}
		e.At = fromNanos(at)
		out = append(out, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: AuditList: %w", err)
	}
	return out, nil
}

// TokenCreate stores a token; a repeated id or hash is ErrConflict.
func (s *Store) TokenCreate(ctx context.Context, tok store.Token) error {
	err := s.write(ctx, "TokenCreate", func(t *txn) error {
		t.exec(`INSERT INTO tokens (id, hash, namespace, role, created_at) VALUES ($1, $2, $3, $4, $5)`,
			[]any{tok.ID, tok.Hash, tok.Namespace, tok.Role, nanos(tok.CreatedAt)}, nil)
		return nil
	})
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" { // unique_violation
		return fmt.Errorf("token %q: %s: %w", tok.ID, pgErr.ConstraintName, store.ErrConflict)
	}
	return err
}

// TokenGetByHash finds a live token.
func (s *Store) TokenGetByHash(ctx context.Context, hash []byte) (store.Token, error) {
	var (
		t       store.Token
		created int64
	)
	err := s.pool.QueryRow(ctx, `SELECT id, hash, namespace, role, created_at FROM tokens WHERE hash = $1 AND revoked_at IS NULL`, hash).
		Scan(&t.ID, &t.Hash, &t.Namespace, &t.Role, &created)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("token: %w", store.ErrNotFound)
	}
	if err != nil {
		return t, fmt.Errorf("postgres: TokenGetByHash: %w", err)
	}
	t.CreatedAt = fromNanos(created)
	return t, nil
}

// TokenRevoke revokes a live token.
func (s *Store) TokenRevoke(ctx context.Context, id string, now time.Time) (store.Token, error) {
	var tok store.Token
	err := s.write(ctx, "TokenRevoke", func(t *txn) error {
		t.query(`UPDATE tokens SET revoked_at = $1 WHERE id = $2 AND revoked_at IS NULL
			RETURNING id, hash, namespace, role, created_at`, []any{nanos(now), id}, func(rows pgx.Rows) error {
			if !rows.Next() {
				if err := rows.Err(); err != nil {
					return err
				}
				return fmt.Errorf("token %q: %w", id, store.ErrNotFound)
			}
			var created int64
			if err := rows.Scan(&tok.ID, &tok.Hash, &tok.Namespace, &tok.Role, &created); err != nil {
				return err
			}
			tok.CreatedAt = fromNanos(created)
			return nil
		})
		return nil
	})
	return tok, err
}

const configCols = `namespace, kind, name, value, seq, revision, updated_at`

func scanConfig(row pgx.Row) (store.ConfigItem, error) {
	var (
		it      store.ConfigItem
		updated int64
	)
	err := row.Scan(&it.Namespace, &it.Kind, &it.Name, &it.Value, &it.Seq, &it.Revision, &updated)
	it.UpdatedAt = fromNanos(updated)
	return it, err
}

// ConfigGet returns one configuration item.
func (s *Store) ConfigGet(ctx context.Context, namespace, kind, name string) (store.ConfigItem, error) {
	it, err := scanConfig(s.pool.QueryRow(ctx, `SELECT `+configCols+` FROM config WHERE namespace = $1 AND kind = $2 AND name = $3`,
		namespace, kind, name))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.ConfigItem{}, fmt.Errorf("%s %q: %w", kind, name, store.ErrNotFound)
	}
	if err != nil {
		return store.ConfigItem{}, fmt.Errorf("postgres: ConfigGet: %w", err)
	}
	return it, nil
}

// ConfigPut creates or replaces an item.
func (s *Store) ConfigPut(ctx context.Context, p store.ConfigPutParams) (store.ConfigItem, error) {
	var out store.ConfigItem
	err := s.writeRetrying(ctx, "ConfigPut", true, func(t *txn) error {
		it := p.Item
		var (
			cur    store.ConfigItem
			exists bool
		)
		t.query(`SELECT `+configCols+` FROM config WHERE namespace = $1 AND kind = $2 AND name = $3 FOR UPDATE`,
			[]any{it.Namespace, it.Kind, it.Name}, func(rows pgx.Rows) error {
				if rows.Next() {
					var err error
					if cur, err = scanConfig(rows); err != nil {
						return err
					}
					exists = true
				}
				return rows.Err()
			})
		if err := t.flush(); err != nil {
			return err
		}
		if exists && p.Create {
			return fmt.Errorf("%s %q exists: %w", it.Kind, it.Name, store.ErrConflict)
		}
		if p.IfRevision != nil && *p.IfRevision != cur.Revision {
			return fmt.Errorf("%s %q at revision %d, not %d: %w", it.Kind, it.Name, cur.Revision, *p.IfRevision, store.ErrConflict)
		}
		read := func(rows pgx.Rows) error {
			if !rows.Next() {
				if err := rows.Err(); err != nil {
					return err
				}
				return fmt.Errorf("%s %q: not written", it.Kind, it.Name) // the row is ours: cannot happen
			}
			var err error
			out, err = scanConfig(rows)
			return err
		}
		if exists {
			t.query(`UPDATE config SET value = $1, revision = revision + 1, updated_at = $2
				WHERE seq = $3 RETURNING `+configCols, []any{it.Value, nanos(p.Now), cur.Seq}, read)
			return nil
		}
		// A concurrent creation of the item makes this a unique violation,
		// and the write runs again.
		t.query(`INSERT INTO config (namespace, kind, name, value, revision, updated_at) VALUES ($1, $2, $3, $4, 1, $5)
			RETURNING `+configCols, []any{it.Namespace, it.Kind, it.Name, it.Value, nanos(p.Now)}, read)
		return nil
	})
	if err != nil {
		return store.ConfigItem{}, err
	}
	return out, nil
}

// ConfigDelete removes an item.
func (s *Store) ConfigDelete(ctx context.Context, namespace, kind, name string) error {
	return s.write(ctx, "ConfigDelete", func(t *txn) error {
		t.exec(`DELETE FROM config WHERE namespace = $1 AND kind = $2 AND name = $3`, []any{namespace, kind, name},
			func(ct pgconn.CommandTag) error {
				if ct.RowsAffected() == 0 {
					return fmt.Errorf("%s %q: %w", kind, name, store.ErrNotFound)
				}
				return nil
			})
		return nil
	})
}

// ConfigList lists items of kind in creation order.
func (s *Store) ConfigList(ctx context.Context, namespace, kind string) ([]store.ConfigItem, error) {
	var (
		rows pgx.Rows
		err  error
	)
	if namespace == "" {
		rows, err = s.pool.Query(ctx, `SELECT `+configCols+` FROM config WHERE kind = $1 ORDER BY seq`, kind)
	} else {
		rows, err = s.pool.Query(ctx, `SELECT `+configCols+` FROM config WHERE namespace = $1 AND kind = $2 ORDER BY seq`, namespace, kind)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: ConfigList: %w", err)
	}
	defer rows.Close()
	var out []store.ConfigItem
	for rows.Next() {
		it, err := scanConfig(rows)
		if err != nil {
			return nil, fmt.Errorf("postgres: ConfigList: %w", err)
		}
		out = append(out, it)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: ConfigList: %w", err)
	}
	return out, nil
}
