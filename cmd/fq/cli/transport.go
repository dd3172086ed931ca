package cli

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/client"
)

// maxReply bounds a reply body read from the admin door.
const maxReply = 64 << 20

// admin sends one request to the admin door. body is encoded as JSON
// (unless it is already []byte); a 2xx reply is decoded into out when out
// is not nil and returned raw. A refusal is the server's *api.Error; a
// failure to reach the node is an unreachableError.
func (a *app) admin(method, path string, body, out any) ([]byte, error) {
	return a.adminCtx(a.ctx, method, path, body, out)
}

// adminCtx is admin within ctx.
func (a *app) adminCtx(ctx context.Context, method, path string, body, out any) ([]byte, error) {
	base, err := a.serverURL()
	if err != nil {
		return nil, err
	}
	token, err := a.resolveToken()
	if err != nil {
		return nil, err
	}
	var rd io.Reader
	if body != nil {
		data, ok := body.([]byte)
		if !ok {
			if data, err = api.Marshal(body); err != nil {
				return nil, fmt.Errorf("encode request: %w", err)
			}
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return nil, usageError{msg: fmt.Sprintf("%s: %v", a.source(&a.server), err)}
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if err := a.trustCA(); err != nil {
		return nil, err
	}
	resp, err := a.httpc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, unreachableError{msg: fmt.Sprintf("fq: cannot reach the node at %s: %v", base, err)}
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxReply))
	if err != nil {
		return nil, unreachableError{msg: fmt.Sprintf("fq: lost the connection to %s: %v", base, err)}
	}
	if resp.StatusCode/100 != 2 {
		return nil, replyError(resp, data, base)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return nil, fmt.Errorf("unexpected reply to %s %s: %v", method, path, err)
		}
	}
	return data, nil
}

// replyError turns a failed reply into the server's error. A reply without
// FlexiQ's error body comes from something else (a proxy, another server).
func replyError(resp *http.Response, data []byte, base string) error {
	var body api.ErrorBody
	if json.Unmarshal(data, &body) == nil && body.Error != nil && body.Error.Message != "" {
		return body.Error
	}
	snippet := strings.TrimSpace(string(data))
	if len(snippet) > 200 {
		snippet = snippet[:200] + "…"
	}
	switch resp.StatusCode {
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return unreachableError{msg: fmt.Sprintf("fq: cannot reach the node at %s: %s %s", base, resp.Status, snippet)}
	}
	return fmt.Errorf("%s answered %s: %s", base, resp.Status, snippet)
}

// connect opens the NATS client. Extra options are for fq work.
func (a *app) connect(opts ...nats.Option) (*client.Client, error) {
	u, err := a.natsURL()
	if err != nil {
		return nil, err
	}
	token, err := a.resolveToken()
	if err != nil {
		return nil, err
	}
	roots, err := a.tlsRoots()
	if err != nil {
		return nil, err
	}
	opts = append([]nats.Option{nats.Name("fq"), nats.Timeout(5 * time.Second)}, opts...)
	if roots != nil {
		// The roots serve a server that asks for TLS (or a tls:// URL);
		// nats.Secure would also demand TLS of a server that offers none.
		opts = append(opts, func(o *nats.Options) error {
			o.TLSConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
			return nil
		})
	}
	c, err := client.Connect(u, token, opts...)
	if ae, ok := api.AsError(err); ok {
		return nil, ae // refused (a revoked token): exit 1, its message as is
	}
	if err != nil {
		return nil, unreachableError{msg: fmt.Sprintf("fq: cannot reach the node: %v", err)}
	}
	return c, nil
}

// globals are the settings every command takes.
func (a *app) globals() []*setting { return []*setting{&a.server, &a.nats, &a.token, &a.ca} }

// maxCAFile bounds the file --ca names: a bundle of a few hundred
// certificates fits many times over.
const maxCAFile = 4 << 20

// tlsRoots is the pool of the certificates in the file --ca (FQ_CA) names,
// read once; nil when none is named (the system's store is used).
func (a *app) tlsRoots() (*x509.CertPool, error) {
	if a.rootsDone || a.ca.value == "" {
		return a.roots, nil
	}
	f, err := os.Open(a.ca.value)
	if err != nil {
		return nil, usageError{msg: fmt.Sprintf("%s: %v", a.source(&a.ca), err)}
	}
	defer f.Close()
	pem, err := io.ReadAll(io.LimitReader(f, maxCAFile+1))
	if err != nil {
		return nil, usageError{msg: fmt.Sprintf("%s: %v", a.source(&a.ca), err)}
	}
	if len(pem) > maxCAFile {
		return nil, usageError{msg: fmt.Sprintf("%s: %s is larger than %d bytes", a.source(&a.ca), a.ca.value, maxCAFile)}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, usageError{msg: fmt.Sprintf("%s: no PEM certificate in %s", a.source(&a.ca), a.ca.value)}
	}
	a.roots, a.rootsDone = pool, true
	return pool, nil
}

// trustCA makes the admin door's client trust --ca's certificates, once.
func (a *app) trustCA() error {
	roots, err := a.tlsRoots()
	if err != nil || roots == nil || a.httpc.Transport != nil {
		return err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	a.httpc.Transport = tr
	return nil
}

// printRaw prints a reply body as the server sent it, ending in a newline.
func (a *app) printRaw(data []byte) {
	data = bytes.TrimRight(data, "\n")
	a.stdout.Write(data)
	io.WriteString(a.stdout, "\n")
}

// pathEscape escapes one path segment.
func pathEscape(s string) string { return url.PathEscape(s) }
