package node

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"
)

// certFiles serves the certificate of the admin door and the gRPC surface
// (Config.TLSCert, TLSKey) from its files, and reads them again when either
// changes: a renewed certificate (cert-manager, certbot) is used from the
// next handshake on, without a restart. A pair that does not load (the
// renewal wrote the certificate and not yet its key) leaves the last good
// one in use and is tried again at the next handshake.
type certFiles struct {
	cert, key string
	log       *slog.Logger

	mu      sync.Mutex
	stamps  [2]fileStamp
	current *tls.Certificate
	// warned is the last failure logged, so a renewal half done is
	// logged once, not at every handshake until it is done.
	warned string
}

// fileStamp is what tells a file changed.
type fileStamp struct {
	mod  time.Time
	size int64
}

func stampOf(path string) (fileStamp, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: fi.ModTime(), size: fi.Size()}, nil
}

// loadCertFiles reads the pair once: a node does not start with a
// certificate it cannot serve.
func loadCertFiles(cert, key string, log *slog.Logger) (*certFiles, error) {
	c := &certFiles{cert: cert, key: key, log: log}
	if _, err := c.reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// reload reads the pair again if either file changed since it was last
// read; it says whether it did.
func (c *certFiles) reload() (bool, error) {
	var stamps [2]fileStamp
	for i, path := range []string{c.cert, c.key} {
		st, err := stampOf(path)
		if err != nil {
			return false, fmt.Errorf("TLS of the admin door and gRPC (--tls-cert, --tls-key): %w", err)
		}
		stamps[i] = st
	}
	if c.current != nil && stamps == c.stamps {
		return false, nil
	}
	pair, err := tls.LoadX509KeyPair(c.cert, c.key)
	if err != nil {
		return false, fmt.Errorf("TLS of the admin door and gRPC (--tls-cert, --tls-key): certificate %s / key %s: %w", c.cert, c.key, err)
	}
	c.current, c.stamps = &pair, stamps
	return true, nil
}

// get is tls.Config.GetCertificate: two stat calls a handshake.
func (c *certFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	changed, err := c.reload()
	switch {
	case err != nil:
		if err.Error() != c.warned {
			c.warned = err.Error()
			c.log.Warn("TLS certificate files changed and do not load; serving the last good certificate", "err", err)
		}
	case changed:
		c.warned = ""
		c.log.Info("TLS certificate read again", "cert", c.cert)
	}
	return c.current, nil
}

// config is the servers' TLS configuration: TLS 1.2 at least.
func (c *certFiles) config() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.get}
}

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
