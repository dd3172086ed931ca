package bus

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/auth"
)

// NodeUser is the NATS user name of a node's own connection (and of the
// routes between embedded servers).
const NodeUser = "flexiq-node"

// clientUserPrefix starts the NATS user name of a client connection; the
// token's id follows, so a revocation finds the token's connections.
const clientUserPrefix = "fq:"

// TokenVerifier resolves a FlexiQ token (auth.Authenticator).
type TokenVerifier interface {
	AuthenticateToken(ctx context.Context, token string) (auth.Principal, *api.Error)
	Live(ctx context.Context, hash []byte) (bool, error)
}

// ClientAuth is the embedded server's authentication hook
// (server.Options.CustomClientAuthentication). A connection is admitted
// only with a token: the cluster secret makes it a node, which may serve,
// broadcast and use fq.internal.>; a live FlexiQ token makes it a client,
// which may only publish the request subjects and subscribe below its
// private inbox prefix (api.InboxPrefix). The server itself enforces the
// permissions, so a refused publish or subscription never delivers.
type ClientAuth struct {
	secretHash [32]byte
	tokens     TokenVerifier
	log        *slog.Logger
	timeout    time.Duration

	mu sync.Mutex
	// hashes remembers the token hash of each client user name seen, so
	// the sweep can ask the store whether the token is still live.
	hashes map[string][]byte
	srv    *server.Server
}

// NewClientAuth returns the hook for a server whose nodes connect with
// clusterSecret.
func NewClientAuth(clusterSecret string, tokens TokenVerifier, log *slog.Logger) *ClientAuth {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &ClientAuth{
		secretHash: sha256.Sum256([]byte(clusterSecret)),
		tokens:     tokens, log: log, timeout: 5 * time.Second,
		hashes: map[string][]byte{},
	}
}

// Check admits or refuses a client connection (server.Authentication).
func (a *ClientAuth) Check(c server.ClientAuthentication) bool {
	if c.Kind() != server.CLIENT {
		return false
	}
	opts := c.GetOpts()
	token := opts.Token
	if opts.Username == NodeUser {
		// A node dialling as an external server's user (--nats-url
		// without credentials) presents the secret as its password.
		token = opts.Password
	}
	if token == "" {
		return false
	}
	h := sha256.Sum256([]byte(token))
	if subtle.ConstantTimeCompare(h[:], a.secretHash[:]) == 1 {
		c.RegisterUser(&server.User{Username: NodeUser, Permissions: NodePermissions()})
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), a.timeout)
	defer cancel()
	p, aerr := a.tokens.AuthenticateToken(ctx, token)
	if aerr != nil || opts.Username == NodeUser {
		return false
	}
	user := clientUserPrefix + p.TokenID
	a.mu.Lock()
	a.hashes[user] = h[:]
	a.mu.Unlock()
	c.RegisterUser(&server.User{Username: user, Permissions: ClientPermissions(token)})
	return true
}

// ClientPermissions are a client connection's: publish the request
// subjects (plain and per owner) and the discovery verbs, subscribe
// below its private inbox.
func ClientPermissions(token string) *server.Permissions {
	pub := slices.Concat(api.RequestSubjects, api.OwnerSubjects, api.DiscoverySubjects)
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: pub},
		Subscribe: &server.SubjectPermission{Allow: []string{api.InboxPrefix(token) + ".>"}},
	}
}

// NodePermissions are a node connection's: everything FlexiQ uses, and
// nothing of JetStream or the system account.
func NodePermissions() *server.Permissions {
	deny := []string{"$JS.>", "$SYS.>", "$KV.>", "$O.>"}
	return &server.Permissions{
		Publish:   &server.SubjectPermission{Allow: []string{">"}, Deny: deny},
		Subscribe: &server.SubjectPermission{Allow: []string{">"}, Deny: deny},
	}
}

// attach gives the hook its server, for closing connections.
func (a *ClientAuth) attach(s *server.Server) {
	a.mu.Lock()
	a.srv = s
	a.mu.Unlock()
}

// Revoked closes every connection made with the token tokenID at once.
func (a *ClientAuth) Revoked(tokenID string) {
	a.mu.Lock()
	srv := a.srv
	a.mu.Unlock()
	if srv == nil || tokenID == "" {
		return
	}
	user := clientUserPrefix + tokenID
	for _, cid := range a.conns(srv)[user] {
		_ = srv.DisconnectClientByID(cid)
	}
	a.mu.Lock()
	delete(a.hashes, user)
	a.mu.Unlock()
}

// conns lists the open client connections by user name.
func (a *ClientAuth) conns(srv *server.Server) map[string][]uint64 {
	out := map[string][]uint64{}
	for offset := 0; ; {
		cz, err := srv.Connz(&server.ConnzOptions{Username: true, Offset: offset, Limit: 4096})
		if err != nil {
			a.log.Warn("cannot list NATS connections", "err", err)
			return out
		}
		for _, ci := range cz.Conns {
			if strings.HasPrefix(ci.AuthorizedUser, clientUserPrefix) {
				out[ci.AuthorizedUser] = append(out[ci.AuthorizedUser], ci.Cid)
			}
		}
		offset += len(cz.Conns)
		if len(cz.Conns) == 0 || offset >= cz.Total {
			return out
		}
	}
}

// Sweep closes the connections of tokens revoked since they connected,
// asking the store (not the cache). The node runs it periodically, so a
// revocation whose broadcast was lost still closes its connections within
// the period. It also forgets the users with no connection left.
func (a *ClientAuth) Sweep(ctx context.Context) {
	a.mu.Lock()
	srv := a.srv
	a.mu.Unlock()
	if srv == nil {
		return
	}
	open := a.conns(srv)
	a.mu.Lock()
	check := map[string][]byte{}
	for user, h := range a.hashes {
		if _, ok := open[user]; ok {
			check[user] = h
		} else {
			delete(a.hashes, user)
		}
	}
	a.mu.Unlock()
	for user, h := range check {
		live, err := a.tokens.Live(ctx, h)
		if err != nil || live {
			continue // a store error keeps the connection: fail open here, closed at the next request
		}
		a.log.Info("closing the NATS connections of a revoked token", "token_id", strings.TrimPrefix(user, clientUserPrefix), "connections", len(open[user]))
		for _, cid := range open[user] {
			_ = srv.DisconnectClientByID(cid)
		}
		a.mu.Lock()
		delete(a.hashes, user)
		a.mu.Unlock()
	}
}
