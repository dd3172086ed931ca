// Package open opens a store.Store from its URL: sqlite://<path>,
// postgres://… or redis://….
package open

import (
	"context"
	"fmt"
	"net/url"
	"strings"

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
	switch t.kind {
	case "sqlite":
		return orNil(sqlite.Open(ctx, t.addr, t.sqlite))
	case "postgres":
		return orNil(postgres.Open(ctx, t.addr, postgres.Options{}))
	default:
		return orNil(redis.Open(ctx, t.addr, redis.Options{Prefix: t.prefix}))
	}
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

func parse(rawURL string) (target, error) {
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return target{}, fmt.Errorf("store URL %q: want sqlite://<path>, postgres://… or redis://…", rawURL)
	}
	switch scheme {
	case "sqlite", "sqlite3":
		path, query, _ := strings.Cut(rest, "?")
		if path == "" {
			return target{}, fmt.Errorf("store URL %q: sqlite needs a path, e.g. sqlite://./flexiq-data/flexiq.db", rawURL)
		}
		q, err := url.ParseQuery(query)
		if err != nil {
			return target{}, fmt.Errorf("store URL %q: %w", rawURL, err)
		}
		for k := range q {
			if k != "synchronous" {
				return target{}, fmt.Errorf("store URL %q: unknown option %q (sqlite takes synchronous=NORMAL|FULL)", rawURL, k)
			}
		}
		if err := sqlite.CheckSynchronous(q.Get("synchronous")); err != nil {
			return target{}, fmt.Errorf("store URL %q: %w", rawURL, err)
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
		return target{}, fmt.Errorf("store URL %q: unknown scheme %q (want sqlite, postgres or redis)", rawURL, scheme)
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
		return "", "", fmt.Errorf("store URL: %w", err)
	}
	q := u.Query()
	prefix := q.Get("prefix")
	if q.Has("prefix") && prefix == "" {
		return "", "", fmt.Errorf("store URL %s: prefix must not be empty", u.Redacted())
	}
	q.Del("prefix")
	u.RawQuery = q.Encode()
	return u.String(), prefix, nil
}
