// Package tlsfiles serves a TLS certificate and key from their files and
// reads them again when either changes, so a renewed certificate
// (cert-manager, certbot, a CA's rotation job) is used from the next
// handshake on without a restart. It serves the node's listeners: the
// admin door and gRPC (--tls-cert, --tls-key), and the embedded NATS
// server's client and route listeners (--nats-tls-cert, --nats-tls-key).
//
// A pair that does not load (the renewal has written the certificate and
// not yet its key) leaves the last good one in use, logged once, and is
// tried again at the next handshake. A node does not start with a pair it
// cannot load.
//
// The certificates in the certificate file (the leaf and the chain after
// it) are also what a Pair trusts when it dials a peer that serves the same
// kind of file (the embedded servers' routes, a node's connection to its
// own server): nodes sharing one CA verify each other when the CA follows
// the leaf in each file. That trust is read again with the pair, so a
// rotation under a new CA needs no restart either.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// Pair is a certificate and key served from files. Its methods are safe
// for concurrent use.
type Pair struct {
	cert, key string
	// what names the pair in errors and logs by its flags, so an operator
	// knows which files to mend.
	what string
	log  *slog.Logger

	mu      sync.Mutex
	stamps  [2]stamp
	current *tls.Certificate
	roots   *x509.CertPool
	// warned is the last failure logged, so a renewal half done is
	// logged once, not at every handshake until it is done.
	warned string
}

// stamp is what tells a file changed.
type stamp struct {
	mod  time.Time
	size int64
}

// Load reads the pair once. what names it by its flags in errors and logs,
// such as "NATS TLS (--nats-tls-cert, --nats-tls-key)".
func Load(certFile, keyFile, what string, log *slog.Logger) (*Pair, error) {
	if certFile == "" || keyFile == "" {
		return nil, fmt.Errorf("%s: a certificate and its key go together", what)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	p := &Pair{cert: certFile, key: keyFile, what: what, log: log}
	if _, err := p.reload(); err != nil {
		return nil, err
	}
	return p, nil
}

// reload reads the pair again if either file changed since it was last
// read; it says whether it did. Callers hold mu (or own p alone).
func (p *Pair) reload() (bool, error) {
	var stamps [2]stamp
	for i, path := range []string{p.cert, p.key} {
		fi, err := os.Stat(path)
		if err != nil {
			return false, fmt.Errorf("%s: %w", p.what, err)
		}
		stamps[i] = stamp{mod: fi.ModTime(), size: fi.Size()}
	}
	if p.current != nil && stamps == p.stamps {
		return false, nil
	}
	pair, err := tls.LoadX509KeyPair(p.cert, p.key)
	if err != nil {
		return false, fmt.Errorf("%s: certificate %s / key %s: %w", p.what, p.cert, p.key, err)
	}
	roots := x509.NewCertPool()
	for i, der := range pair.Certificate {
		c, err := x509.ParseCertificate(der)
		if err != nil {
			return false, fmt.Errorf("%s: certificate %s: %w", p.what, p.cert, err)
		}
		if i == 0 && pair.Leaf == nil {
			pair.Leaf = c // GODEBUG x509keypairleaf=0 leaves it out
		}
		roots.AddCert(c)
	}
	p.current, p.roots, p.stamps = &pair, roots, stamps
	return true, nil
}

// fresh reads the files again if they changed, logs the outcome, and
// returns what is in use: two stat calls when nothing changed.
func (p *Pair) fresh() (*tls.Certificate, *x509.CertPool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	changed, err := p.reload()
	switch {
	case err != nil:
		if err.Error() != p.warned {
			p.warned = err.Error()
			p.log.Warn("TLS certificate files changed and do not load; serving the last good certificate", "err", err)
		}
	case changed:
		p.warned = ""
		p.log.Info("TLS certificate read again", "for", p.what, "cert", p.cert)
	}
	return p.current, p.roots
}

// GetCertificate is tls.Config.GetCertificate.
func (p *Pair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	c, _ := p.fresh()
	return c, nil
}

// NotAfter is when the certificate in use now expires.
func (p *Pair) NotAfter() time.Time {
	c, _ := p.fresh()
	return c.Leaf.NotAfter
}

// Roots is the certificates of the certificate file as last read.
func (p *Pair) Roots() *x509.CertPool {
	_, r := p.fresh()
	return r
}

// ServerConfig is a listener's configuration: TLS 1.2 at least, the
// pair's certificate as it is now.
func (p *Pair) ServerConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: p.GetCertificate}
}

// PeerConfig serves both ends of a connection between nodes (the embedded
// servers' routes): it presents the pair as a server and, as a client,
// verifies the server against the certificates of the file as it is now
// (and the host name it dialled), not as it was at start.
func (p *Pair) PeerConfig() *tls.Config {
	c := p.ServerConfig()
	// The standard check reads RootCAs once, at the config's making;
	// VerifyConnection does the same check against the roots of now. It
	// is the dialling end's alone: the accepting end answers with the
	// plain server configuration (routes ask no certificate of the
	// dialler: the cluster secret admits them).
	c.InsecureSkipVerify = true
	c.VerifyConnection = p.verifyServer
	c.GetConfigForClient = func(*tls.ClientHelloInfo) (*tls.Config, error) { return p.ServerConfig(), nil }
	return c
}

// ClientConfig is for a client of a server that serves this pair (a node's
// connection to its embedded server): it verifies the server as PeerConfig
// does and presents no certificate.
func (p *Pair) ClientConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, InsecureSkipVerify: true, VerifyConnection: p.verifyServer}
}

// verifyServer is the certificate check InsecureSkipVerify turned off,
// against the roots of now, at the dialling end.
func (p *Pair) verifyServer(cs tls.ConnectionState) error {
	if len(cs.PeerCertificates) == 0 {
		return errors.New("tls: the server presented no certificate")
	}
	inter := x509.NewCertPool()
	for _, c := range cs.PeerCertificates[1:] {
		inter.AddCert(c)
	}
	// The error is returned as x509 gives it: nats-server looks for an
	// x509.HostnameError to retry a route dialled by address with the
	// name it learnt.
	_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{
		DNSName:       cs.ServerName,
		Roots:         p.Roots(),
		Intermediates: inter,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	return err
}
