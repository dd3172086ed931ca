package node

import (
	"log/slog"
	"net"
)

// warnIfExposed logs when a listener that takes bearer tokens listens
// beyond loopback without TLS: the tokens then cross the network in clear.
func warnIfExposed(log *slog.Logger, what string, addr net.Addr, tlsOn bool) {
	if tlsOn {
		return
	}
	if ta, ok := addr.(*net.TCPAddr); ok && !ta.IP.IsLoopback() {
		log.Warn(what+" listens beyond loopback without TLS: bearer tokens cross the network in clear (give --tls-cert and --tls-key)", "addr", addr.String())
	}
}
