package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/flexiq/flexiq/store"
)

// Several nodes share the database: membership rows and leases with epochs
// (tables members and leases, migration 3), and fenced job writes.

var _ store.ClusterStore = (*Store)(nil)

// ---------------------------------------------------------------------------
// Fencing

// fenceSQL is the first statement of a fenced job write. It locks the
// lease row FOR KEY SHARE until the write commits and, unless the lease
// is held by the fence's holder at its epoch, calls flexiq_fence_refused
// (migration 6), which raises fencedCode: the error skips the rest of the
// pipelined batch, the commit included, so nothing of the write lands.
// The outer join keeps one row when the lease was never taken, so that
// case is refused too.
//
// Nodes of the versions before call flexiq_fence (migrations 3 and 4,
// kept), which takes the same lock on the same row from inside PL/pgSQL;
// the one statement does it in about 40 % of the time (14 against 32 µs
// a step in pg_stat_statements), on every step of every namespace
// (docs/performance.md, "PostgreSQL: the fence is one statement").
//
// The expiry is not checked: the epoch is what fences. A lease changes
// hands only through LeaseAcquire's take of its row, which bumps the
// epoch, part of the row's key (a unique index), and so conflicts with
// the FOR KEY SHARE lock: a take waits for the fenced writes in flight to
// commit, and a write checked after the take sees the new epoch. A
// renewal keeps the key and passes the lock, so writes that overlap
// without a gap cannot keep the holder from renewing. An expired lease
// that nobody took is still the holder's, and its writes are as safe as
// before.
const fenceSQL = `SELECT CASE WHEN $2::text <> '' AND l.holder = $2 AND l.epoch = $3::bigint THEN true
		ELSE flexiq_fence_refused($1::text, l.holder, l.epoch, $2, $3) END
	FROM (VALUES (1)) one LEFT JOIN LATERAL (SELECT holder, epoch FROM leases WHERE name = $1 FOR KEY SHARE) l ON true`

// fencedCode is the SQLSTATE flexiq_fence_refused (and the flexiq_fence
// of older nodes) raises.
const fencedCode = "FQ001"

// queueFence queues the fence check, when the write has one; it must come
// before the write's other statements, so the lease row is locked before
// any job row.
func queueFence(t *txn, f *store.Fence) {
	if f != nil {
		t.exec(fenceSQL, []any{f.Lease, f.Holder, f.Epoch}, nil)
	}
}

// fencedError is the fence's error as one wrapping store.ErrFenced, or
// nil when err is another.
func fencedError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != fencedCode {
		return nil
	}
	return fmt.Errorf("%w (%s)", store.ErrFenced, strings.TrimPrefix(pgErr.Message, "flexiq: fenced: "))
}

// ---------------------------------------------------------------------------
// Membership

const (
	memberUpsertSQL = `INSERT INTO members (node, info, expires_at) VALUES ($1::text, $2::jsonb, $3::timestamptz)
		ON CONFLICT (node) DO UPDATE SET info = excluded.info, expires_at = excluded.expires_at`
	// Rows of members gone for good are dropped by the heartbeats of the
	// others; a row another heartbeat holds is skipped, so two nodes
	// dropping each other's rows never wait for each other. It runs only
	// when the read below found such a row: run on every heartbeat, three
	// nodes' sweeps against each other's upserts took PostgreSQL about
	// 100 ms of CPU each (0.2 ms alone), half the store's CPU under load.
	memberSweepSQL = `DELETE FROM members WHERE node IN (
		SELECT node FROM members WHERE expires_at <= $1::timestamptz AND node <> $2::text
		FOR UPDATE SKIP LOCKED)`
	memberAllSQL = `SELECT node, info, expires_at FROM members ORDER BY node`
)

// MemberHeartbeat records p.Node as live until p.Now+p.TTL and returns the
// live members by node, in one transaction.
func (s *Store) MemberHeartbeat(ctx context.Context, p store.MemberHeartbeatParams) ([]store.Member, error) {
	if p.Node == "" || p.TTL <= 0 {
		return nil, fmt.Errorf("postgres: MemberHeartbeat: node %q with TTL %v: want a node and a positive TTL", p.Node, p.TTL)
	}
	info, err := json.Marshal(p.Info)
	if err != nil {
		return nil, fmt.Errorf("postgres: MemberHeartbeat: %w", err)
	}
	var out []store.Member
	err = s.write(ctx, "MemberHeartbeat", func(t *txn) error {
		out = nil
		gone := false
		t.exec(memberUpsertSQL, []any{p.Node, string(info), p.Now.Add(p.TTL)}, nil)
		t.query(memberAllSQL, nil, func(rows pgx.Rows) error {
			for rows.Next() {
				var (
					m   store.Member
					raw []byte
				)
				if err := rows.Scan(&m.Node, &raw, &m.Expires); err != nil {
					return err
				}
				if !m.Expires.After(p.Now) {
					gone = gone || m.Node != p.Node
					continue
				}
				if err := json.Unmarshal(raw, &m.Info); err != nil {
					return fmt.Errorf("member %q: info: %w", m.Node, err)
				}
				m.Expires = m.Expires.UTC()
				out = append(out, m)
			}
			return rows.Err()
		})
		if err := t.flush(); err != nil {
			return err
		}
		if gone {
			t.exec(memberSweepSQL, []any{p.Now, p.Node}, nil)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// MemberLeave removes node's row.
func (s *Store) MemberLeave(ctx context.Context, node string) error {
	return s.write(ctx, "MemberLeave", func(t *txn) error {
		t.exec(`DELETE FROM members WHERE node = $1::text`, []any{node}, nil)
		return nil
	})
}

// ---------------------------------------------------------------------------
// Leases

// leaseAcquireSQL takes or renews every named lease in one statement.
// The holder's own leases are renewed by a plain UPDATE of expires_at,
// which keeps the row's key (epoch, migration 4): it does not wait for
// the fenced writes in flight, whose FOR KEY SHARE locks it passes. The
// other names are inserted at epoch 1 if new, or taken when released or
// expired (next epoch: a key update, which waits for those writes); names
// another holder keeps live are not touched, so asking for them waits for
// nothing. The ON CONFLICT clause checks again under the row's lock, as a
// lease may have changed since the statement's snapshot. RETURNING
// yields exactly the rows written: the leases the holder holds
// afterwards. Names come sorted, so two acquisitions lock common rows in
// one order.
const leaseAcquireSQL = `WITH renewed AS (
		UPDATE leases SET expires_at = $3::timestamptz WHERE name = ANY ($2::text[]) AND holder = $1::text
		RETURNING name, holder, epoch, expires_at
	), taken AS (
		INSERT INTO leases AS l (name, holder, epoch, expires_at)
		SELECT n.name, $1::text, 1, $3::timestamptz FROM unnest($2::text[]) AS n(name)
		WHERE NOT EXISTS (SELECT FROM leases o WHERE o.name = n.name
			AND (o.holder = $1::text OR (o.holder <> '' AND o.expires_at > $4::timestamptz)))
		ORDER BY n.name
		ON CONFLICT (name) DO UPDATE SET
			holder = excluded.holder,
			epoch = CASE WHEN l.holder = excluded.holder THEN l.epoch ELSE l.epoch + 1 END,
			expires_at = excluded.expires_at
		WHERE l.holder = '' OR l.expires_at <= $4::timestamptz
		RETURNING l.name, l.holder, l.epoch, l.expires_at
	)
	SELECT name, holder, epoch, expires_at FROM renewed
	UNION ALL SELECT name, holder, epoch, expires_at FROM taken
	ORDER BY name`

// LeaseAcquire takes or renews p.Holder's leases among p.Names in one
// transaction and returns those it holds afterwards, by name.
func (s *Store) LeaseAcquire(ctx context.Context, p store.LeaseAcquireParams) ([]store.Lease, error) {
	if p.Holder == "" || p.TTL <= 0 {
		return nil, fmt.Errorf("postgres: LeaseAcquire: holder %q with TTL %v: want a holder and a positive TTL", p.Holder, p.TTL)
	}
	names := sortedNames(p.Names)
	if len(names) == 0 {
		return nil, nil
	}
	var out []store.Lease
	err := s.write(ctx, "LeaseAcquire", func(t *txn) error {
		out = nil
		t.query(leaseAcquireSQL, []any{p.Holder, names, p.Now.Add(p.TTL), p.Now}, func(rows pgx.Rows) error {
			var err error
			out, err = scanLeases(rows)
			return err
		})
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// LeaseRelease gives p.Holder's leases among p.Names up: holder empty and no
// expiry, the epoch kept, so whoever takes one next bumps it.
func (s *Store) LeaseRelease(ctx context.Context, p store.LeaseReleaseParams) error {
	names := sortedNames(p.Names)
	if p.Holder == "" || len(names) == 0 {
		return nil
	}
	return s.write(ctx, "LeaseRelease", func(t *txn) error {
		t.exec(`UPDATE leases SET holder = '', expires_at = NULL WHERE name = ANY ($2::text[]) AND holder = $1::text`,
			[]any{p.Holder, names}, nil)
		return nil
	})
}

// LeaseList returns every lease, by name.
func (s *Store) LeaseList(ctx context.Context) ([]store.Lease, error) {
	rows, err := s.pool.Query(ctx, `SELECT name, holder, epoch, expires_at FROM leases ORDER BY name`)
	if err != nil {
		return nil, fmt.Errorf("postgres: LeaseList: %w", err)
	}
	defer rows.Close()
	out, err := scanLeases(rows)
	if err != nil {
		return nil, fmt.Errorf("postgres: LeaseList: %w", err)
	}
	return out, nil
}

func scanLeases(rows pgx.Rows) ([]store.Lease, error) {
	var out []store.Lease
	for rows.Next() {
		var (
			l   store.Lease
			exp *time.Time
		)
		if err := rows.Scan(&l.Name, &l.Holder, &l.Epoch, &exp); err != nil {
			return nil, err
		}
		if exp != nil {
			l.Expires = exp.UTC()
		}
		out = append(out, l)
	}
	if err := rows.Err(); err != nil {
		return nil, err
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
