// Package open opens a store.Store from its URL: sqlite://<path>,
// postgres://… or redis://….
package open

import (
	"context"
	"fmt"
	"net/url"
	"strings"

	"github.com/flexiq/flexiq/internal/redact"
	"github.com/flexiq/flexiq/store"
	"github.com/flexiq/flexiq/store/postgres"
	"github.com/flexiq/flexiq/store/redis"
	"github.com/flexiq/flexiq/store/sqlite"
)

// Open opens the store named by rawURL.
//
// sqlite://<path> takes a relative or absolute path (sqlite:///var/lib/x.db
// is absolute) and the option ?synchronous=FULL (default NORMAL).
// postgres:// URLs go to pgx as they are. redis:// URLs go to go-redis
// without the option ?prefix=P, which starts every key FlexiQ writes
// (default "fq:"; on Redis Cluster give one with a hash tag, e.g.
// prefix={fq}:, so every script's keys share a slot).
func Open(ctx context.Context, rawURL string) (store.Store, error) {
	t, err := parse(rawURL)
	if err != nil {
		return nil, err
	}
	var s store.Store
	switch t.kind {
	case "sqlite":
		s, err = orNil(sqlite.Open(ctx, t.addr, t.sqlite))
	case "postgres":
		s, err = orNil(postgres.Open(ctx, t.addr, postgres.Options{}))
	default:
		s, err = orNil(redis.Open(ctx, t.addr, redis.Options{Prefix: t.prefix}))
	}
	// A driver's error may quote the URL it was given, password included
	// (net/url's parse errors do): the caller prints it.
	return s, redact.Error(err, rawURL)
}

// Check tells whether rawURL names a store Open knows how to open, without
// opening it: a malformed URL is the operator's typo, found before
// anything starts.
func Check(rawURL string) error {
	_, err := parse(rawURL)
	return err
}

// target is a parsed store URL.
type target struct {
	kind   string // sqlite, postgres or redis
	addr   string // the path or URL the backend opens
	sqlite sqlite.Options
	prefix string
}

// parse's errors show the URL redacted: the operator sees them.
func parse(rawURL string) (target, error) {
	shown := redact.URL(rawURL)
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return target{}, fmt.Errorf("store URL %q: want sqlite://<path>, postgres://… or redis://…", shown)
	}
	switch scheme {
	case "sqlite", "sqlite3":
		path, query, _ := strings.Cut(rest, "?")
		if path == "" {
			return target{}, fmt.Errorf("store URL %q: sqlite needs a path, e.g. sqlite://./flexiq-data/flexiq.db", shown)
		}
		q, err := url.ParseQuery(query)
		if err != nil {
			return target{}, fmt.Errorf("store URL %q: %w", shown, redact.Error(err, rawURL))
		}
		for k := range q {
			if k != "synchronous" {
				return target{}, fmt.Errorf("store URL %q: unknown option %q (sqlite takes synchronous=NORMAL|FULL)", shown, k)
			}
		}
		if err := sqlite.CheckSynchronous(q.Get("synchronous")); err != nil {
			return target{}, fmt.Errorf("store URL %q: %w", shown, err)
		}
		return target{kind: "sqlite", addr: path, sqlite: sqlite.Options{Synchronous: q.Get("synchronous")}}, nil
	case "postgres", "postgresql":
		return target{kind: "postgres", addr: rawURL}, nil
	case "redis", "rediss":
		u, prefix, err := redisURL(rawURL)
		if err != nil {
			return target{}, err
		}
		return target{kind: "redis", addr: u, prefix: prefix}, nil
	default:
		return target{}, fmt.Errorf("store URL %q: unknown scheme %q (want sqlite, postgres or redis)", shown, scheme)
	}
}

// orNil returns a nil interface on error: a typed nil pointer in a
// store.Store would not compare equal to nil.
func orNil[S store.Store](s S, err error) (store.Store, error) {
	if err != nil {
		return nil, err
	}
	return s, nil
}

// redisURL takes FlexiQ's own option, prefix, out of a Redis URL: go-redis
// refuses options it does not know.
func redisURL(rawURL string) (string, string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// net/url's error quotes the URL whole.
		return "", "", fmt.Errorf("store URL: %w", redact.Error(err, rawURL))
	}
	q := u.Query()
	prefix := q.Get("prefix")
	if q.Has("prefix") && prefix == "" {
		return "", "", fmt.Errorf("store URL %s: prefix must not be empty", redact.URL(rawURL))
	}
	q.Del("prefix")
	u.RawQuery = q.Encode()
	return u.String(), prefix, nil
}

// IsSQLite reports whether rawURL names a SQLite store, which a single
// node owns: it cannot be shared by a cluster.
func IsSQLite(rawURL string) bool {
	t, err := parse(rawURL)
	return err == nil && t.kind == "sqlite"
}

// IsPostgres reports whether rawURL names a PostgreSQL store.
func IsPostgres(rawURL string) bool {
	t, err := parse(rawURL)
	return err == nil && t.kind == "postgres"
}
