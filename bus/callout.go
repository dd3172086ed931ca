package bus

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	neturl "net/url"
	"strings"
	"sync"
	"text/template"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/internal/redact"
)

// With an external NATS server (--nats-url), the server cannot know
// FlexiQ's tokens, so it asks the nodes: NATS's auth callout. The server's
// configuration (ExternalServerConfig) admits the nodes with the cluster
// secret and hands every other connection to the callout, which a node
// serves on $SYS.REQ.USER.AUTH: it verifies the connection's token like
// the embedded server's hook does and answers with a user JWT carrying
// the same client permissions, signed by an account key derived from the
// cluster secret (so the operator configures its public half only).
// A revoked token's connections are kicked through the system account
// ($SYS.REQ.SERVER.<id>.KICK), which the configuration grants the nodes.

// The accounts and users of the external server's configuration.
const (
	// ExternalAccount holds the nodes and every client.
	ExternalAccount = "FLEXIQ"
	// ExternalSysUser is the nodes' user in the system account, for kicks.
	ExternalSysUser = "flexiq-sys"
	calloutSubject  = "$SYS.REQ.USER.AUTH"
)

// CalloutIssuer is the account key the nodes sign callout answers with,
// derived from the cluster secret: every node derives the same, and the
// server's configuration names its public key.
func CalloutIssuer(secret string) (nkeys.KeyPair, error) {
	seed := sha256.Sum256([]byte("flexiq auth callout issuer\x00" + secret))
	kp, err := nkeys.FromRawSeed(nkeys.PrefixByteAccount, seed[:])
	if err != nil {
		return nil, fmt.Errorf("auth callout issuer: %w", err)
	}
	return kp, nil
}

var serverConfig = template.Must(template.New("nats.conf").Parse(`# NATS server configuration for FlexiQ nodes on an external server.
# The nodes connect as {{.NodeUser}} with the cluster secret as password;
# every other connection is a FlexiQ client whose token the nodes verify
# (auth callout) and which may only publish the request subjects and
# subscribe below its private inbox.
# Give the server the secret in the environment:
#   FLEXIQ_CLUSTER_SECRET=… nats-server -c nats.conf
listen: {{.Listen}}
max_payload: {{.MaxPayload}}
accounts {
  {{.Account}} {
    users: [
      {
        user: {{.NodeUser}}
        password: $FLEXIQ_CLUSTER_SECRET
        permissions: {
          publish: { allow: [">"], deny: ["$JS.>", "$KV.>", "$O.>"] }
          subscribe: { allow: [">"], deny: ["$JS.>", "$KV.>", "$O.>"] }
        }
      }
    ]
  }
  SYS {
    users: [
      {
        user: {{.SysUser}}
        password: $FLEXIQ_CLUSTER_SECRET
        permissions: {
          publish: { allow: ["$SYS.REQ.SERVER.*.KICK"] }
          subscribe: { allow: ["_INBOX.>"] }
        }
      }
    ]
  }
}
system_account: SYS
authorization {
  auth_callout {
    # The public key of the account key the nodes derive from the secret
    # (fq-node nats-config prints it).
    issuer: {{.Issuer}}
    account: {{.Account}}
    auth_users: [ {{.NodeUser}}, {{.SysUser}} ]
  }
}
`))

// ExternalServerConfig is a nats-server configuration for FlexiQ with the
// cluster secret secret, listening on listen. It holds only the issuer's
// public key: the secret comes from the server's environment.
func ExternalServerConfig(secret, listen string) (string, error) {
	kp, err := CalloutIssuer(secret)
	if err != nil {
		return "", err
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return "", err
	}
	var b strings.Builder
	err = serverConfig.Execute(&b, map[string]any{
		"Listen": listen, "MaxPayload": MaxPayload, "Account": ExternalAccount,
		"NodeUser": NodeUser, "SysUser": ExternalSysUser, "Issuer": pub,
	})
	return b.String(), err
}

// Callout serves the external server's auth callout.
type Callout struct {
	kp     nkeys.KeyPair
	tokens TokenVerifier
	log    *slog.Logger
	nc     *nats.Conn
	sys    *nats.Conn
	sub    *nats.Subscription

	mu sync.Mutex
	// conns are the connections each token's callout admitted on this
	// node, for kicking them on revocation.
	conns map[string][]kickTarget
}

type kickTarget struct {
	server string
	cid    uint64
	hash   []byte
}

// maxKickTargets bounds what is remembered per token: a client that
// reconnects all day must not grow the map; the oldest are forgotten (a
// connection that is gone needs no kick).
const maxKickTargets = 256

// ServeCallout answers the auth callout on nc. sys, when not nil, is a
// connection to the system account used to kick revoked tokens'
// connections.
func ServeCallout(nc, sys *nats.Conn, secret string, tokens TokenVerifier, log *slog.Logger) (*Callout, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	kp, err := CalloutIssuer(secret)
	if err != nil {
		return nil, err
	}
	c := &Callout{kp: kp, tokens: tokens, log: log, nc: nc, sys: sys, conns: map[string][]kickTarget{}}
	c.sub, err = nc.QueueSubscribe(calloutSubject, api.QueueGroup, c.handle)
	if err != nil {
		return nil, fmt.Errorf("serve the auth callout: %w", err)
	}
	return c, nil
}

func (c *Callout) handle(m *nats.Msg) {
	req, err := jwt.DecodeAuthorizationRequestClaims(string(m.Data))
	if err != nil {
		c.log.Warn("undecodable auth callout request", "len", len(m.Data))
		return
	}
	answer := func(userJWT, refusal string) {
		rc := jwt.NewAuthorizationResponseClaims(req.UserNkey)
		rc.Audience = req.Server.ID
		rc.Jwt, rc.Error = userJWT, refusal
		tok, err := rc.Encode(c.kp)
		if err != nil {
			c.log.Error("cannot sign the auth callout answer", "err", err)
			return
		}
		_ = m.Respond([]byte(tok))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	token := req.ConnectOptions.Token
	p, aerr := c.tokens.AuthenticateToken(ctx, token)
	if token == "" || aerr != nil {
		answer("", "authorization violation")
		return
	}
	uc := jwt.NewUserClaims(req.UserNkey)
	uc.Name = clientUserPrefix + p.TokenID
	uc.Audience = ExternalAccount
	perms := ClientPermissions(token)
	uc.Pub.Allow.Add(perms.Publish.Allow...)
	uc.Sub.Allow.Add(perms.Subscribe.Allow...)
	ujwt, err := uc.Encode(c.kp)
	if err != nil {
		c.log.Error("cannot sign the user of an auth callout", "err", err)
		answer("", "internal error")
		return
	}
	h := sha256.Sum256([]byte(token))
	c.mu.Lock()
	list := append(c.conns[p.TokenID], kickTarget{server: req.Server.ID, cid: req.ClientInformation.ID, hash: h[:]})
	if len(list) > maxKickTargets {
		list = list[len(list)-maxKickTargets:]
	}
	c.conns[p.TokenID] = list
	c.mu.Unlock()
	answer(ujwt, "")
}

// Revoked kicks the connections this node admitted with tokenID.
func (c *Callout) Revoked(tokenID string) {
	c.mu.Lock()
	targets := c.conns[tokenID]
	delete(c.conns, tokenID)
	c.mu.Unlock()
	if c.sys == nil {
		return
	}
	for _, k := range targets {
		body := fmt.Appendf(nil, `{"cid":%d}`, k.cid)
		if _, err := c.sys.Request("$SYS.REQ.SERVER."+k.server+".KICK", body, 2*time.Second); err != nil {
			c.log.Debug("kick", "err", err)
		}
	}
}

// Sweep kicks the connections of tokens the store no longer holds: the
// revocation broadcast may have been lost.
func (c *Callout) Sweep(ctx context.Context) {
	c.mu.Lock()
	check := map[string][]byte{}
	for id, list := range c.conns {
		check[id] = list[0].hash
	}
	c.mu.Unlock()
	for id, h := range check {
		if live, err := c.tokens.Live(ctx, h); err == nil && !live {
			c.Revoked(id)
		}
	}
}

// Stop stops answering.
func (c *Callout) Stop() {
	if c.sub != nil {
		_ = c.sub.Unsubscribe()
	}
}

// ConnectSys dials the system-account user of ExternalServerConfig, or
// returns nil when url carries its own credentials (the operator's
// configuration is then its own).
func ConnectSys(url, secret, name string) (*nats.Conn, error) {
	if u, err := neturl.Parse(url); err != nil || u.User != nil {
		return nil, nil
	}
	nc, err := nats.Connect(url, nats.Name(name), nats.UserInfo(ExternalSysUser, secret), nats.MaxReconnects(-1))
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s as %s: %w", redact.URL(url), ExternalSysUser, redact.Error(err, url))
	}
	return nc, nil
}
