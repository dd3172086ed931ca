// Package bus is FlexiQ's NATS side: the embedded server (or a connection
// to an external one), the flexiq micro service that serves the v1
// subjects, authentication from the Authorization header, the rendering of
// api.Error into the Nats-Service-Error headers and the JSON body, and the
// invalidation broadcasts. It holds no business rules: a request is
// authenticated, decoded, checked for shape and handed to its namespace's
// actor, which answers later.
package bus

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	neturl "net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/internal/redact"
	"github.com/flexiq/flexiq/internal/tlsfiles"
)

// EmbeddedOptions configure the embedded NATS server.
type EmbeddedOptions struct {
	// Listen is host:port (default 127.0.0.1:4222).
	Listen string
	// ServerName names the server (the node id).
	ServerName string
	// Auth admits connections (required: the server refuses anonymous
	// connections).
	Auth *ClientAuth
	// ClusterSecret authenticates the routes between embedded servers.
	ClusterSecret string
	// ClusterListen is the route listener (host:port); empty = no cluster.
	ClusterListen string
	// Routes are other nodes' route URLs (nats://host:port).
	Routes []string
	// ClusterName names the cluster (default "flexiq").
	ClusterName string
	// TLS, when set, puts TLS on the client and route listeners, from
	// files read again when they change; a route dialled to another node
	// is verified against the certificates of the same files.
	TLS *tlsfiles.Pair
	// Log receives the server's own reports (routes formed and closed,
	// connection errors) at debug level, attribute component=nats; nil
	// drops them.
	Log *slog.Logger
	// Hide are secrets hidden from those reports besides the cluster
	// secret and FlexiQ-shaped tokens: the root token, which an operator
	// may have chosen in any shape.
	Hide []string
}

// MaxPayload is the embedded server's message limit: a job's payload may be
// 1 MiB, and a batch holds many jobs.
const MaxPayload = 16 << 20

// routeUser is the user name routes authenticate with; the password is the
// cluster secret.
const routeUser = "flexiq-route"

// StartEmbedded starts an authenticated NATS server (no JetStream: FlexiQ
// does not use it) and waits until it accepts connections.
func StartEmbedded(o EmbeddedOptions) (*server.Server, error) {
	if o.Auth == nil {
		return nil, errors.New("embedded nats: no authentication configured")
	}
	listen := o.Listen
	if listen == "" {
		listen = "127.0.0.1:4222"
	}
	host, port, err := splitHostPort(listen, "nats listen address")
	if err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName:                 o.ServerName,
		Host:                       host,
		Port:                       port,
		MaxPayload:                 MaxPayload,
		NoSigs:                     true,
		NoLog:                      true,
		CustomClientAuthentication: o.Auth,
		// A client that has not authenticated within this is cut.
		AuthTimeout: 2,
	}
	if o.TLS != nil {
		opts.TLSConfig = o.TLS.ServerConfig()
		opts.TLS, opts.TLSVerify = true, false
		opts.TLSTimeout = 2
	}
	if o.ClusterListen != "" || len(o.Routes) > 0 {
		if o.ClusterSecret == "" {
			return nil, errors.New("embedded nats: a cluster needs the cluster secret")
		}
		opts.Cluster.Name = cmp.Or(o.ClusterName, "flexiq")
		opts.Cluster.Username, opts.Cluster.Password = routeUser, o.ClusterSecret
		if o.ClusterListen != "" {
			opts.Cluster.Host, opts.Cluster.Port, err = splitHostPort(o.ClusterListen, "cluster listen address")
			if err != nil {
				return nil, err
			}
		} else {
			// Routes out only: listen on a free loopback port so the
			// server still forms a cluster.
			opts.Cluster.Host, opts.Cluster.Port = "127.0.0.1", -1
		}
		for _, r := range o.Routes {
			u, err := neturl.Parse(strings.TrimSpace(r))
			if err != nil || u.Host == "" {
				return nil, fmt.Errorf("route %q: not a URL such as nats://127.0.0.1:6222", r)
			}
			u.User = neturl.UserPassword(routeUser, o.ClusterSecret)
			opts.Routes = append(opts.Routes, u)
		}
		if o.TLS != nil {
			opts.Cluster.TLSConfig = o.TLS.PeerConfig()
			opts.Cluster.TLSTimeout = 2
		}
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	o.Auth.attach(s)
	fatal := &serverLog{failed: make(chan struct{}), log: o.Log, secrets: append([]string{o.ClusterSecret}, o.Hide...)}
	// The server formats its debug reports only when asked to; its traces
	// (every protocol line) are never turned on.
	debug := o.Log != nil && o.Log.Enabled(context.Background(), slog.LevelDebug)
	s.SetLoggerV2(fatal, debug, false, false)
	go s.Start()
	// Ready, or failed for a reason the server reports (it cannot listen:
	// the address is taken), or neither within 10 s.
	for deadline := time.Now().Add(10 * time.Second); ; {
		if s.ReadyForConnections(25 * time.Millisecond) {
			return s, nil
		}
		select {
		case <-fatal.failed:
			s.Shutdown()
			return nil, fmt.Errorf("embedded nats: not ready to accept connections on %s: %s", listen, fatal.reason())
		default:
		}
		if time.Now().After(deadline) {
			s.Shutdown()
			return nil, fmt.Errorf("embedded nats: not ready to accept connections on %s", listen)
		}
	}
}

// serverLog is the embedded server's logger. It keeps the first fatal
// report (a listener that cannot bind), which the server makes instead of
// failing Start, and passes every report to log at debug level: the
// node's own logs say what an operator must know (a member without a
// route, a listener exposed), and a stranger's failed connections are
// not worth a warning each.
type serverLog struct {
	once   sync.Once
	msg    string
	failed chan struct{}
	log    *slog.Logger
	// secrets are hidden from every report: the cluster secret and
	// EmbeddedOptions.Hide.
	secrets []string
}

func (l *serverLog) Fatalf(format string, v ...any) {
	l.report("fatal", format, v)
	l.once.Do(func() {
		l.msg = fmt.Sprintf(format, v...)
		close(l.failed)
	})
}

// reason is the first fatal report; read it after failed is closed.
func (l *serverLog) reason() string { return l.msg }

func (l *serverLog) report(level, format string, v []any) {
	if l.log == nil || !l.log.Enabled(context.Background(), slog.LevelDebug) {
		return
	}
	// The server quotes what a client sent as its user name when it
	// refuses it, and a client may have put its token there by mistake.
	msg := redact.Text(strings.TrimSpace(fmt.Sprintf(format, v...)), l.secrets...)
	l.log.Debug(msg, "component", "nats", "nats_level", level)
}

func (l *serverLog) Noticef(format string, v ...any) { l.report("notice", format, v) }
func (l *serverLog) Warnf(format string, v ...any)   { l.report("warn", format, v) }
func (l *serverLog) Errorf(format string, v ...any)  { l.report("error", format, v) }
func (l *serverLog) Debugf(format string, v ...any)  { l.report("debug", format, v) }
func (l *serverLog) Tracef(string, ...any)           {}

func splitHostPort(addr, what string) (string, int, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return "", 0, fmt.Errorf("%s %q: %w", what, addr, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return "", 0, fmt.Errorf("%s %q: bad port: %w", what, addr, err)
	}
	return host, port, nil
}

// ConnectOptions say how a node reaches NATS.
type ConnectOptions struct {
	// URL is an external server; empty = the embedded server.
	URL string
	// Server is the embedded server.
	Server *server.Server
	// Name is the connection's name.
	Name string
	// Secret is the cluster secret, the node's token on the embedded
	// server.
	Secret string
	// Creds is a NATS credentials file for an external server.
	Creds string
	// TLS is the embedded server's certificate pair when it serves TLS:
	// the connection trusts the certificates of its file.
	TLS *tlsfiles.Pair
	// Log gets the connection's asynchronous errors (a permission the
	// server refused, a slow consumer) instead of nats.go's stderr.
	Log *slog.Logger
}

// Connect dials the node's connection.
func Connect(o ConnectOptions) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(o.Name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// Replies to requests go out from actor goroutines; a large
		// buffer rides out a short reconnect.
		nats.ReconnectBufSize(64 << 20),
	}
	if o.Log != nil {
		opts = append(opts, nats.ErrorHandler(func(_ *nats.Conn, sub *nats.Subscription, err error) {
			subject := ""
			if sub != nil {
				subject = sub.Subject
			}
			o.Log.Warn("nats", "subject", subject, "err", err)
		}))
	}
	url := o.URL
	if url == "" {
		if o.Server == nil {
			return nil, fmt.Errorf("no NATS url and no embedded server")
		}
		url = o.Server.ClientURL()
		opts = append(opts, nats.Token(o.Secret))
		if o.TLS != nil {
			opts = append(opts, nats.Secure(o.TLS.ClientConfig()))
		}
	} else if o.Creds != "" {
		opts = append(opts, nats.UserCredentials(o.Creds))
	} else if u, err := neturl.Parse(url); err == nil && u.User == nil {
		// No credentials given: the node's user and the cluster secret,
		// as the README's server configuration expects.
		opts = append(opts, nats.UserInfo(NodeUser, o.Secret))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", redact.URL(url), redact.Error(err, url))
	}
	return nc, nil
}

// OtherNode asks the bus whether a flexiq service other than this node's
// already serves on it ($SRV.PING.flexiq) and returns its node id, or "".
// No responder answers at once; a bus where a node answers slowly is
// given half a second.
func OtherNode(nc *nats.Conn, self string) (string, error) {
	msg, err := nc.Request("$SRV.PING."+api.ServiceName, nil, 500*time.Millisecond)
	switch {
	case errors.Is(err, nats.ErrNoResponders), errors.Is(err, nats.ErrTimeout):
		return "", nil
	case err != nil:
		return "", fmt.Errorf("ask the bus for other nodes: %w", err)
	}
	var ping struct {
		ID       string            `json:"id"`
		Metadata map[string]string `json:"metadata"`
	}
	if err := json.Unmarshal(msg.Data, &ping); err != nil {
		return "", fmt.Errorf("ask the bus for other nodes: undecodable answer: %w", err)
	}
	other := cmp.Or(ping.Metadata["node"], ping.ID)
	if other == self {
		return "", nil
	}
	return other, nil
}
