// Package ui is the web dashboard the admin door serves under /ui/
// (docs/dashboard.md): plain HTML, CSS and JavaScript embedded in the
// binary with Go's embed, so nothing is built to run or test it.
//
// The assets hold no data and are served without a token. The page asks
// for a token, keeps it in the tab's sessionStorage only, and sends it as
// Authorization: Bearer on every call to the admin door's API; whatever it
// shows comes from that API, with that token's rights.
package ui

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

//go:embed assets
var assets embed.FS

// files are the assets by name (flat: no directories).
var files = func() fs.FS {
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embed directive guarantees it
	}
	return sub
}()

// contentSecurityPolicy lets the page load only its own script and style
// and talk only to its own origin: even a job payload that carried markup
// could not run (the script also writes every value as text, never as
// HTML).
const contentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves the dashboard for paths under /ui/.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		clean := path.Clean(r.URL.Path)
		name, ok := strings.CutPrefix(clean, "/ui/")
		if clean == "/ui" {
			name, ok = "index.html", true
		}
		data, err := fs.ReadFile(files, name)
		if !ok || err != nil || strings.Contains(name, "/") {
			http.Error(w, "no such file: "+r.URL.Path, http.StatusNotFound)
			return
		}
		h := w.Header()
		h.Set("Content-Type", contentType(name))
		h.Set("Content-Security-Policy", contentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		// Revalidated each time: after an upgrade the page and its script
		// match the node that serves them.
		h.Set("Cache-Control", "no-cache")
		w.WriteHeader(http.StatusOK)
		if r.Method != http.MethodHead {
			_, _ = w.Write(data)
		}
	})
}

func contentType(name string) string {
	switch path.Ext(name) {
	case ".html":
		return "text/html; charset=utf-8"
	case ".js":
		return "text/javascript; charset=utf-8"
	case ".css":
		return "text/css; charset=utf-8"
	case ".svg":
		return "image/svg+xml"
	}
	return "application/octet-stream"
}
