package node

import (
	"log/slog"
	"net"
)

// The flags that put TLS on the node's listeners, as errors and warnings
// name them.
const (
	adminTLSFlags = "--tls-cert, --tls-key"
	natsTLSFlags  = "--nats-tls-cert, --nats-tls-key"
)

// warnIfExposed logs when a listener that takes bearer tokens (or, for
// routes, the cluster secret) listens beyond loopback without TLS: they
// then cross the network in clear. flags name the TLS flags to give.
func warnIfExposed(log *slog.Logger, what string, addr net.Addr, tlsOn bool, flags string) {
	if tlsOn {
		return
	}
	if ta, ok := addr.(*net.TCPAddr); ok && !ta.IP.IsLoopback() {
		log.Warn(what+" listens beyond loopback without TLS: tokens and secrets cross the network in clear (give "+flags+")", "addr", addr.String())
	}
}
