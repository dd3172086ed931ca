package ui

import (
	"io/fs"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
)

func get(t *testing.T, path string) *httptest.ResponseRecorder {
	t.Helper()
	w := httptest.NewRecorder()
	Handler().ServeHTTP(w, httptest.NewRequest("GET", path, nil))
	return w
}

// The page, its script and its style are served with their types and the
// headers that keep the page to itself; nothing else is.
func TestHandler(t *testing.T) {
	for path, typ := range map[string]string{
		"/ui/": "text/html; charset=utf-8", "/ui/index.html": "text/html; charset=utf-8",
		"/ui/app.js": "text/javascript; charset=utf-8", "/ui/style.css": "text/css; charset=utf-8",
	} {
		w := get(t, path)
		if w.Code != http.StatusOK || w.Header().Get("Content-Type") != typ || w.Body.Len() == 0 {
			t.Errorf("GET %s: %d %q (%d bytes)", path, w.Code, w.Header().Get("Content-Type"), w.Body.Len())
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'self'") {
			t.Errorf("GET %s: CSP %q", path, csp)
		}
		if w.Header().Get("X-Content-Type-Options") != "nosniff" || w.Header().Get("X-Frame-Options") != "DENY" {
			t.Errorf("GET %s: headers %v", path, w.Header())
		}
	}
	for _, path := range []string{"/ui/nope.js", "/ui/../admin.go", "/ui/assets/app.js", "/ui/%2e%2e/ui.go"} {
		if w := get(t, path); w.Code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", path, w.Code)
		}
	}
}

// Every file the page names is embedded, and the page runs no inline
// script or style (the policy would block it).
func TestAssetsComplete(t *testing.T) {
	html, err := fs.ReadFile(files, "index.html")
	if err != nil {
		t.Fatal(err)
	}
	refs := regexp.MustCompile(`(?:src|href)="([^"#:]+)"`).FindAllStringSubmatch(string(html), -1)
	if len(refs) < 2 {
		t.Fatalf("index.html names %d files", len(refs))
	}
	for _, r := range refs {
		if _, err := fs.Stat(files, r[1]); err != nil {
			t.Errorf("index.html names %s: %v", r[1], err)
		}
	}
	if regexp.MustCompile(`<script>|<style|\son[a-z]+=|style="`).Match(html) {
		t.Error("index.html has an inline script, style or handler")
	}
	js, _ := fs.ReadFile(files, "app.js")
	if strings.Contains(string(js), "innerHTML") || strings.Contains(string(js), "localStorage.setItem") {
		t.Error("app.js writes markup or keeps the token beyond the tab")
	}
}
