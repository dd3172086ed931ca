// Package auth turns a bearer token into a principal: the namespace every
// request is confined to and the role that says what it may do (docs/security.md, "Tokens").
//
// Tokens are random (256 bits), shown once, stored only as a SHA-256 hash
// (they are high-entropy, so a slow hash adds nothing). The root token is
// compared in constant time; stored tokens are found by hash. Verified
// tokens are cached briefly; a revocation broadcast evicts at once.
package auth

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
)

// Role is what a token may do in its namespace.
type Role string

// The roles.
const (
	RoleAdmin    Role = "admin"
	RoleProducer Role = "producer"
	RoleWorker   Role = "worker"
)

// ParseRole validates a role name.
func ParseRole(s string) (Role, error) {
	switch Role(s) {
	case RoleAdmin, RoleProducer, RoleWorker:
		return Role(s), nil
	}
	return "", api.InvalidArgument("role: must be admin, producer or worker, got %q", s)
}

// Permission is a class of calls.
type Permission int

// The permissions.
const (
	// Produce: enqueue and publish events.
	Produce Permission = iota + 1
	// Work: claim, heartbeat, ack, nack.
	Work
	// Admin: everything else in the namespace (quota, jobs, dead letters,
	// triggers, periodic jobs, queue and task settings, audit).
	Admin
	// Root: tokens of any namespace and the generic settings API.
	Root
)

// Principal is who a request acts as.
type Principal struct {
	TokenID   string
	Namespace string
	Role      Role
	IsRoot    bool
}

// Can reports whether p may make calls of kind perm.
func (p Principal) Can(perm Permission) bool {
	switch perm {
	case Root:
		return p.IsRoot
	case Admin:
		return p.Role == RoleAdmin
	case Produce:
		return p.Role == RoleAdmin || p.Role == RoleProducer
	case Work:
		return p.Role == RoleAdmin || p.Role == RoleWorker
	}
	return false
}

// Check returns PERMISSION_DENIED unless p.Can(perm).
func (p Principal) Check(perm Permission, what string) *api.Error {
	if p.Can(perm) {
		return nil
	}
	if perm == Root {
		return api.Errorf(api.CodePermissionDenied, "", "%s needs the root token", what)
	}
	return api.Errorf(api.CodePermissionDenied, "", "a %s token may not %s", p.Role, what)
}

// Hash is a token's stored form.
func Hash(token string) []byte {
	h := sha256.Sum256([]byte(token))
	return h[:]
}

// NewToken returns a fresh token id and secret.
func NewToken() (id, secret string, err error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", err
	}
	var idb [8]byte
	if _, err := rand.Read(idb[:]); err != nil {
		return "", "", err
	}
	return "tok_" + hex.EncodeToString(idb[:]), "fq_" + base64.RawURLEncoding.EncodeToString(b[:]), nil
}

// RootTokenID names the root token in audit entries.
const RootTokenID = "root"

// Store is where tokens live.
type Store interface {
	TokenGetByHash(ctx context.Context, hash []byte) (store.Token, error)
}

// Authenticator verifies bearer tokens.
type Authenticator struct {
	store    Store
	rootHash []byte
	ttl      time.Duration
	now      func() time.Time

	mu    sync.Mutex
	cache map[string]cached // by hash
}

type cached struct {
	p  Principal
	at time.Time
}

// New returns an authenticator accepting root (the root token's secret)
// and the tokens in st. now is the clock.
func New(st Store, root string, now func() time.Time) *Authenticator {
	return &Authenticator{store: st, rootHash: Hash(root), ttl: 10 * time.Second, now: now, cache: map[string]cached{}}
}

var errUnauthenticated = api.Unauthenticated()

// Authenticate resolves an Authorization header value.
func (a *Authenticator) Authenticate(ctx context.Context, header string) (Principal, *api.Error) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(header), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return Principal{}, errUnauthenticated
	}
	return a.AuthenticateToken(ctx, strings.TrimSpace(token))
}

// AuthenticateToken resolves a bare token (a NATS connection's token).
func (a *Authenticator) AuthenticateToken(ctx context.Context, token string) (Principal, *api.Error) {
	if token == "" {
		return Principal{}, errUnauthenticated
	}
	h := Hash(token)
	if subtle.ConstantTimeCompare(h, a.rootHash) == 1 {
		return Principal{TokenID: RootTokenID, Namespace: quota.DefaultNamespace, Role: RoleAdmin, IsRoot: true}, nil
	}
	key := string(h)
	now := a.now()
	a.mu.Lock()
	if c, ok := a.cache[key]; ok && now.Sub(c.at) < a.ttl {
		a.mu.Unlock()
		return c.p, nil
	}
	a.mu.Unlock()
	t, err := a.store.TokenGetByHash(ctx, h)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return Principal{}, errUnauthenticated
	case err != nil:
		return Principal{}, api.Errorf(api.CodeUnavailable, "", "store unavailable, try again")
	}
	p := Principal{TokenID: t.ID, Namespace: t.Namespace, Role: Role(t.Role)}
	a.mu.Lock()
	if len(a.cache) > 100000 {
		clear(a.cache) // a flood of distinct tokens must not grow memory
	}
	a.cache[key] = cached{p: p, at: now}
	a.mu.Unlock()
	return p, nil
}

// Forget evicts a revoked token at once.
func (a *Authenticator) Forget(tokenID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, c := range a.cache {
		if c.p.TokenID == tokenID {
			delete(a.cache, k)
		}
	}
}

// Live reports whether the token whose hash is h is still live, reading
// the store and not the cache: the bus's sweep of open connections uses it
// to close those of a revoked token even when the revocation broadcast was
// lost. A store error is returned as is (the caller keeps the connection).
func (a *Authenticator) Live(ctx context.Context, h []byte) (bool, error) {
	if subtle.ConstantTimeCompare(h, a.rootHash) == 1 {
		return true, nil
	}
	_, err := a.store.TokenGetByHash(ctx, h)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return true, nil
}

// TTL is how long a verified token is trusted without asking the store.
func (a *Authenticator) TTL() time.Duration { return a.ttl }
