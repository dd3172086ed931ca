// Package bus is FlexiQ's NATS side: the embedded server (or a connection
// to an external one), the flexiq micro service that serves the v1
// subjects, authentication from the Authorization header, the rendering of
// api.Error into the Nats-Service-Error headers and the JSON body, and the
// invalidation broadcasts. It holds no business rules: a request is
// authenticated, decoded, checked for shape and handed to its namespace's
// actor, which answers later.
package bus

import (
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// EmbeddedOptions configure the embedded NATS server.
type EmbeddedOptions struct {
	// Listen is host:port (default 127.0.0.1:4222).
	Listen string
	// StoreDir holds JetStream's data.
	StoreDir string
	// ServerName names the server (the node id).
	ServerName string
}

// MaxPayload is the embedded server's message limit: a job's payload may be
// 1 MiB, and a batch holds many jobs.
const MaxPayload = 16 << 20

// StartEmbedded starts a NATS server with JetStream on and waits until it
// accepts connections.
func StartEmbedded(o EmbeddedOptions) (*server.Server, error) {
	listen := o.Listen
	if listen == "" {
		listen = "127.0.0.1:4222"
	}
	host, portText, err := net.SplitHostPort(listen)
	if err != nil {
		return nil, fmt.Errorf("nats listen address %q: %w", listen, err)
	}
	port, err := strconv.Atoi(portText)
	if err != nil {
		return nil, fmt.Errorf("nats listen address %q: bad port: %w", listen, err)
	}
	opts := &server.Options{
		ServerName:             o.ServerName,
		Host:                   host,
		Port:                   port,
		JetStream:              true,
		StoreDir:               o.StoreDir,
		MaxPayload:             MaxPayload,
		NoSigs:                 true,
		NoLog:                  true,
		DisableJetStreamBanner: true,
	}
	s, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		s.Shutdown()
		return nil, fmt.Errorf("embedded nats: not ready to accept connections on %s", listen)
	}
	return s, nil
}

// Connect dials url (or the embedded server s when url is empty).
func Connect(url string, s *server.Server, name string) (*nats.Conn, error) {
	opts := []nats.Option{
		nats.Name(name),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// Replies to requests go out from actor goroutines; a large
		// buffer rides out a short reconnect.
		nats.ReconnectBufSize(64 << 20),
	}
	if url == "" {
		if s == nil {
			return nil, fmt.Errorf("no NATS url and no embedded server")
		}
		url = s.ClientURL()
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	return nc, nil
}
