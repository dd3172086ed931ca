package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/client"
)

// The dashboard (docs/dashboard.md) tested as an operator uses it: a real
// fq-node process, a real headless Chromium driven through chromedp, and
// every assertion a condition on the page waited for (never a fixed
// sleep).
//
// Chromium is Debian's `chromium` (scripts/test.sh installs it). Without
// it these tests skip, unless CI is set or FLEXIQ_REQUIRE_ALL_BACKENDS=1
// (what scripts/test.sh exports), where they fail instead.
//
// go test ./e2e -run TestUI -ui.screenshots ../docs/img  rewrites the
// screenshots that README.md and docs/dashboard.md show.

var uiShots = flag.String("ui.screenshots", "", "write the dashboard's screenshots (PNG) into this directory")

// uiWait bounds each wait for the page; the conditions come true within a
// second or two (the pages poll every 2 s, the node samples every 1 s).
const uiWait = 20 * time.Second

// uiNode is one fq-node process serving the dashboard.
type uiNode struct {
	t          *testing.T
	base, nats string
	root       string
	dir        string
	cmd        *exec.Cmd
	exited     chan struct{}
}

func startUINode(t *testing.T) *uiNode {
	t.Helper()
	bin, err := fqNode()
	if err != nil {
		t.Fatal(err)
	}
	n := &uiNode{t: t, dir: t.TempDir(), root: "fq_root_ui_test", exited: make(chan struct{})}
	admin, nats := freeAddr(t), freeAddr(t)
	n.base, n.nats = "http://"+admin, "nats://"+nats
	n.cmd = exec.Command(bin, "--data-dir", n.dir, "--nats-listen", nats, "--admin-addr", admin, "--grpc-addr", "",
		"--root-token", n.root, "--node-id", "ui-node", "--sample-interval", "1s")
	n.cmd.Env = append(os.Environ(), "FLEXIQ_MAINTENANCE=off")
	logf, err := os.OpenFile(filepath.Join(n.dir, "node.log"), os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	n.cmd.Stdout, n.cmd.Stderr = logf, logf
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { _ = n.cmd.Wait(); logf.Close(); close(n.exited) }()
	t.Cleanup(func() {
		_ = n.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-n.exited:
		case <-time.After(10 * time.Second):
			_ = n.cmd.Process.Kill()
			<-n.exited
		}
		if t.Failed() {
			log, _ := os.ReadFile(filepath.Join(n.dir, "node.log"))
			t.Logf("node log:\n%s", log)
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(n.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return n
			}
		}
		select {
		case <-n.exited:
			t.Fatal("fq-node exited at start")
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("fq-node did not become healthy: %v", err)
		}
		waitFor(20 * time.Millisecond)
	}
}

// do calls the admin door; body is JSON text or a value to encode.
func (n *uiNode) do(method, path, token string, body any) (int, []byte) {
	n.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, _ := json.Marshal(b)
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequest(method, n.base+path, rd)
	if err != nil {
		n.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		n.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func (n *uiNode) mustDo(want int, method, path, token string, body, out any) {
	n.t.Helper()
	status, data := n.do(method, path, token, body)
	if status != want {
		n.t.Fatalf("%s %s: status %d, want %d: %s", method, path, status, want, data)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			n.t.Fatalf("%s %s: %v in %s", method, path, err, data)
		}
	}
}

func (n *uiNode) token(ns, role string) string {
	n.t.Helper()
	var out struct{ Token string }
	n.mustDo(http.StatusCreated, "POST", "/v1/tokens", n.root, map[string]string{"namespace": ns, "role": role}, &out)
	return out.Token
}

func (n *uiNode) client(token string) *client.Client {
	n.t.Helper()
	c, err := client.Connect(n.nats, token)
	if err != nil {
		n.t.Fatal(err)
	}
	n.t.Cleanup(c.Close)
	return c
}

// chromium finds Debian's chromium (or another Chrome) on PATH.
func chromium() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// browser starts a headless Chromium for t and returns its first tab.
func browser(t *testing.T) context.Context {
	t.Helper()
	path := chromium()
	if path == "" {
		if os.Getenv("CI") != "" || os.Getenv("FLEXIQ_REQUIRE_ALL_BACKENDS") == "1" {
			t.Fatal("chromium not found on PATH (CI or FLEXIQ_REQUIRE_ALL_BACKENDS=1, so this fails rather than skips): apt-get install chromium")
		}
		t.Skip("chromium not found on PATH: the dashboard's browser tests are skipped (apt-get install chromium; CI=1 fails instead)")
	}
	// Chromium's shared-memory files go to TMPDIR (with
	// disable-dev-shm-usage) and leave a directory each run: keep them in
	// one of the test's own, removed after the browser stops (the cleanup
	// registered first runs last). Short, not t.TempDir(): Chromium's
	// singleton socket goes there too, and a Unix socket's path is at
	// most 107 bytes.
	tmp, err := os.MkdirTemp("", "fq-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // CI runs as root, where Chromium's sandbox refuses to start
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1200, 820),
		chromedp.Env("TMPDIR="+tmp),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	bctx, cancelBrowser := chromedp.NewContext(actx)
	// The first run starts the browser (with no timeout: it lives as
	// long as bctx).
	if err := chromedp.Do(bctx); err != nil {
		cancelBrowser()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	t.Cleanup(func() {
		cancelBrowser()
		cancelAlloc()
	})
	return bctx
}

// newTab opens another tab of the same browser (its own sessionStorage).
func newTab(t *testing.T, bctx context.Context) context.Context {
	t.Helper()
	tab, cancel := chromedp.NewContext(bctx)
	t.Cleanup(cancel)
	if err := chromedp.Do(tab); err != nil {
		t.Fatal(err)
	}
	return tab
}

// run runs actions on a tab, bounded.
func run(t *testing.T, tab context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, uiWait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v\npage text:\n%s", what, err, pageText(tab))
	}
}

// pageText is what the page shows, for a failure's message.
func pageText(tab context.Context) string {
	ctx, cancel := context.WithTimeout(tab, 5*time.Second)
	defer cancel()
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.getElementById('banners').innerText + '\n' + document.querySelector('main').innerText`))
	return text
}

// until waits for a JavaScript condition on the page to be true.
func until(t *testing.T, tab context.Context, what, cond string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, uiWait+5*time.Second)
	defer cancel()
	_, err := chromedp.Run(ctx, chromedp.Poll[chromedp.Void](cond, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(uiWait)))
	if err != nil {
		t.Fatalf("wait for %s: %v\npage text:\n%s", what, err, pageText(tab))
	}
}

// js evaluates expr on the page.
func js[T any](t *testing.T, tab context.Context, expr string) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(tab, uiWait)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("evaluate %s: %v", expr, err)
	}
	return v
}

// signIn opens the dashboard and signs in with token.
func signIn(t *testing.T, tab context.Context, n *uiNode, token string) {
	t.Helper()
	run(t, tab, "sign in",
		chromedp.Navigate(n.base+"/ui/"),
		chromedp.WaitVisible(chromedp.ID("token")),
		chromedp.SendKeys(chromedp.ID("token"), token),
		chromedp.Click(chromedp.ID("signin-btn")),
		chromedp.WaitVisible(chromedp.ID("view-namespace")),
	)
}

// show switches the signed-in tab to a view.
func show(t *testing.T, tab context.Context, view string) {
	t.Helper()
	run(t, tab, "show "+view, chromedp.Evaluate[chromedp.Void](`void (location.hash = '#`+view+`')`), chromedp.WaitVisible(chromedp.ID("view-"+view)))
}

// shot saves a screenshot of the tab when -ui.screenshots is given.
func shot(t *testing.T, tab context.Context, name string) {
	t.Helper()
	if *uiShots == "" {
		return
	}
	ctx, cancel := context.WithTimeout(tab, uiWait)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(*uiShots, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// clearInput empties a text field (chromedp.SetValue refuses "").
func clearInput(sel string) chromedp.Action[chromedp.Void] {
	return chromedp.Evaluate[chromedp.Void](`void (document.querySelector(` + jsString(sel) + `).value = '')`)
}

func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// The sign-in page and its assets are served without a token; nothing
// else is. A bad token, or one that may not read usage, gets the API's own
// message; a good one is kept in the tab's sessionStorage only, survives a
// reload, and is forgotten on sign-out.
func TestUISignIn(t *testing.T) {
	n := startUINode(t)
	for _, p := range []string{"/ui/", "/ui/app.js", "/ui/style.css"} {
		status, body := n.do("GET", p, "", nil)
		if status != 200 || len(body) == 0 {
			t.Fatalf("GET %s without a token: %d", p, status)
		}
	}
	if status, _ := n.do("GET", "/ui/../v1/usage", "", nil); status == 200 {
		t.Fatal("a path climbing out of /ui/ was served without a token")
	}
	if status, _ := n.do("GET", "/v1/usage/history", "", nil); status != 401 {
		t.Fatalf("GET /v1/usage/history without a token: %d, want 401", status)
	}
	admin := n.token("acme", "admin")
	producer := n.token("acme", "producer")

	tab := browser(t)
	run(t, tab, "open the sign-in page", chromedp.Navigate(n.base+"/ui/"), chromedp.WaitVisible(chromedp.ID("token")))
	shot(t, tab, "signin")
	try := func(token, want string) {
		t.Helper()
		run(t, tab, "sign in with a refused token",
			clearInput("#token"),
			chromedp.SendKeys(chromedp.ID("token"), token),
			chromedp.Click(chromedp.ID("signin-btn")))
		until(t, tab, "the refusal", `document.getElementById('signin-msg').textContent === `+jsString(want))
	}
	try("fq_not_a_token", api.Unauthenticated().Message)
	try(producer, "a producer token may not read usage")

	signIn(t, tab, n, admin)
	until(t, tab, "who", `document.getElementById('who').textContent.includes('namespace acme')`)
	type storage struct {
		Session string `json:"session"`
		Local   int    `json:"local"`
		Root    bool   `json:"root"`
	}
	stored := js[storage](t, tab, `({session: sessionStorage.getItem('flexiq.token'), local: localStorage.length, root: !document.getElementById('nav-root').hidden})`)
	if stored.Session != admin || stored.Local != 0 || stored.Root {
		t.Fatalf("after sign-in: sessionStorage %q, localStorage %d items, root tab shown %v", stored.Session, stored.Local, stored.Root)
	}
	// A reload keeps the tab signed in.
	run(t, tab, "reload", chromedp.Reload(), chromedp.WaitVisible(chromedp.ID("view-namespace")))
	run(t, tab, "sign out", chromedp.Click(chromedp.ID("signout")), chromedp.WaitVisible(chromedp.ID("token")))
	stored = js[storage](t, tab, `({session: sessionStorage.getItem('flexiq.token') || '', local: localStorage.length, root: false})`)
	if stored.Session != "" {
		t.Fatal("the token stayed in sessionStorage after sign-out")
	}

	// The root token also gets the root view.
	signIn(t, tab, n, n.root)
	until(t, tab, "the root tab", `!document.getElementById('nav-root').hidden`)
}

// While a producer enqueues, the namespace view's pending count, its bar
// and its charts move, live.
func TestUIUsageMovesWhileAProducerEnqueues(t *testing.T) {
	n := startUINode(t)
	admin, producer := n.token("acme", "admin"), n.token("acme", "producer")
	n.mustDo(200, "PUT", "/v1/quota", admin, `{"max_pending":400,"enqueue_rate":"1000/s"}`, nil)
	p := n.client(producer)

	tab := browser(t)
	signIn(t, tab, n, admin)
	until(t, tab, "pending at 0", `document.querySelector('#limits tr[data-field="max_pending"]')?.dataset.usage === '0'`)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		// Bounded: at most 300 jobs, one every 20 ms, until cancelled.
		for i := 0; i < 300 && ctx.Err() == nil; i++ {
			if _, err := p.Enqueue(ctx, api.Job{Queue: "emails", Task: "send", Payload: json.RawMessage(`{"n":1}`)}); err != nil && ctx.Err() == nil {
				done <- err
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(20 * time.Millisecond):
			}
		}
		done <- nil
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("producer: %v", err)
		}
	}()
	until(t, tab, "pending to pass 20", `+document.querySelector('#limits tr[data-field="max_pending"]').dataset.usage >= 20`)
	first := js[float64](t, tab, `+document.querySelector('#limits tr[data-field="max_pending"]').dataset.usage`)
	until(t, tab, "pending to keep rising", fmt.Sprintf(`+document.querySelector('#limits tr[data-field="max_pending"]').dataset.usage >= %v`, first+20))
	until(t, tab, "the enqueued chart", `+document.querySelector('figure[data-series="enqueued"]').dataset.sum > 0`)
	// A worker acks two jobs: the completed chart shows them.
	w := n.client(n.token("acme", "worker"))
	for _, j := range claim(t, w, 2, "emails") {
		if err := w.Ack(context.Background(), j.ID, j.Attempt, nil); err != nil {
			t.Fatal(err)
		}
	}
	until(t, tab, "the completed chart", `+document.querySelector('figure[data-series="completed"]').dataset.sum === 2`)
	until(t, tab, "the pending chart", `+document.querySelector('figure[data-series="pending"]').dataset.last > 0`)
	until(t, tab, "the actor's busy chart, in percent", `(() => { const f = document.querySelector('figure[data-series="busy"]'); return +f.dataset.points > 0 && +f.dataset.max <= 100 && f.querySelector('.now').textContent.includes('%'); })()`)
	until(t, tab, "the enqueue rate", `+document.querySelector('#limits tr[data-field="enqueue_rate"]').dataset.usage > 0`)
	until(t, tab, "a bar as wide as the usage", `(() => {
		const r = document.querySelector('#limits tr[data-field="max_pending"]');
		const w = parseFloat(r.querySelector('.bar .fill').style.width);
		return Math.abs(w - (+r.dataset.percent)) < 0.01 && w > 0;
	})()`)
	shot(t, tab, "namespace")
}

// A limit changed in the quota editor shows the API's own messages, shows
// up live on another open tab, and its refusals show on the namespace
// view.
func TestUIQuotaEditorChangeIsLiveAndRefuses(t *testing.T) {
	n := startUINode(t)
	admin, producer := n.token("acme", "admin"), n.token("acme", "producer")
	p := n.client(producer)
	for i := 0; i < 3; i++ {
		if _, err := p.Enqueue(ctx(t), api.Job{Queue: "q", Task: "t"}); err != nil {
			t.Fatal(err)
		}
	}

	a := browser(t)
	b := newTab(t, a)
	signIn(t, a, n, admin)
	signIn(t, b, n, admin)
	show(t, a, "quota")
	show(t, b, "quota")
	until(t, b, "the form", `document.querySelector('#quota-form tr[data-field="max_pending"] .current')?.textContent === 'unlimited'`)

	set := func(field, value string) {
		t.Helper()
		row := `#quota-form tr[data-field="` + field + `"]`
		run(t, a, "set "+field,
			clearInput(row+" input.value"),
			chromedp.SendKeys(chromedp.CSS(row+" input.value"), value),
			chromedp.Click(chromedp.CSS(row+" button.set")))
	}
	msg := func(want string) {
		t.Helper()
		until(t, a, "message "+want, `document.getElementById('quota-msg').textContent === `+jsString(want))
	}
	set("max_pending", "-1")
	msg("invalid quota: max_pending: must be an integer >= 0, got -1")
	set("enqueue_rate", "5/sec")
	msg(`invalid quota: enqueue_rate: must be <count>/<unit> with count >= 1 and unit s, m or h (e.g. 500/s), got "5/sec"`)
	set("max_pending", "3")
	until(t, a, "the write", `document.getElementById('quota-msg').textContent.startsWith('max_pending set: revision ')`)

	// The other tab sees it within its 2 s poll, and says it came from
	// elsewhere.
	until(t, b, "the new limit on the other tab", `document.querySelector('#quota-form tr[data-field="max_pending"] .current').dataset.value === '3'`)
	until(t, b, "the note", `!document.getElementById('quota-elsewhere').hidden`)
	shot(t, b, "quota")

	_, err := p.Enqueue(ctx(t), api.Job{Queue: "q", Task: "t"})
	wantAPIError(t, err, api.CodeResourceExhausted, api.ReasonQueueFull, "queue 'q' is full: 3 pending >= max_pending 3")

	show(t, a, "namespace")
	until(t, a, "a full bar", `(() => { const r = document.querySelector('#limits tr[data-field="max_pending"]'); return r && r.dataset.percent === '100' && r.querySelector('.bar.full') !== null; })()`)
	until(t, a, "the refusal in the chart", `+document.querySelector('figure[data-series="refused"]').dataset.sum >= 1`)

	// Unset: unlimited again, on both tabs.
	show(t, a, "quota")
	run(t, a, "unset", chromedp.Click(chromedp.CSS(`#quota-form tr[data-field="max_pending"] button.unset`)))
	until(t, b, "unlimited on the other tab", `document.querySelector('#quota-form tr[data-field="max_pending"] .current').textContent === 'unlimited'`)
	if _, err := p.Enqueue(ctx(t), api.Job{Queue: "q", Task: "t"}); err != nil {
		t.Fatalf("after unset: %v", err)
	}
}

// Dead letters are found, shown (payload as text, never as markup),
// selected and replayed; a replay over quota is shown refused, one that
// fits admitted.
func TestUIReplayDeadLetters(t *testing.T) {
	n := startUINode(t)
	admin, producer := n.token("acme", "admin"), n.token("acme", "producer")
	p := n.client(producer)
	// Drop mode with no room: both jobs are shed straight to the dead letters.
	n.mustDo(200, "PUT", "/v1/quota", admin, `{"max_pending":0,"on_excess":"drop"}`, nil)
	const payload = `{"html":"<img src=x id=injected>"}`
	for _, id := range []string{"dl-1", "dl-2"} {
		res, err := p.Enqueue(ctx(t), api.Job{ID: id, Queue: "mail", Task: "send", Payload: json.RawMessage(payload)})
		if err != nil || res.Outcome != api.OutcomeShed {
			t.Fatalf("enqueue %s: %+v %v", id, res, err)
		}
	}
	n.mustDo(200, "PUT", "/v1/quota", admin, `{"max_pending":1}`, nil)

	tab := browser(t)
	signIn(t, tab, n, admin)
	show(t, tab, "jobs")
	run(t, tab, "search dead letters", chromedp.Click(chromedp.ID("q-go")))
	until(t, tab, "both dead letters", `document.querySelectorAll('#jobs tbody tr[data-status="dead"]').length === 2`)

	// The detail: the payload is text.
	run(t, tab, "open dl-2", chromedp.Click(chromedp.CSS(`#jobs tr[data-id="dl-2"] td.mono`)))
	until(t, tab, "the payload", `document.getElementById('job-payload')?.textContent.includes('<img src=x id=injected>')`)
	if js[bool](t, tab, `document.getElementById('injected') !== null`) {
		t.Fatal("a payload's markup became part of the page")
	}

	// Both at once do not fit max_pending 1: refused whole.
	run(t, tab, "select both", chromedp.Click(chromedp.ID("select-all")), chromedp.Click(chromedp.ID("replay")))
	until(t, tab, "the refusal", `document.querySelectorAll('#replay-results li[data-outcome="refused"]').length === 2`)
	text := js[string](t, tab, `document.querySelector('#replay-results li').textContent`)
	if !strings.Contains(text, "queue 'mail' is full: 0 pending >= max_pending 1") {
		t.Fatalf("refusal shown as %q", text)
	}
	// One fits.
	until(t, tab, "the list again", `document.querySelectorAll('#jobs tbody tr[data-status="dead"]').length === 2`)
	run(t, tab, "select dl-1", chromedp.Click(chromedp.CSS(`#jobs tr[data-id="dl-1"] input[type=checkbox]`)), chromedp.Click(chromedp.ID("replay")))
	until(t, tab, "admitted", `document.querySelector('#replay-results li[data-id="dl-1"]')?.dataset.outcome === 'enqueued'`)
	until(t, tab, "dl-1 gone from the dead letters", `document.querySelector('#jobs tr[data-id="dl-1"]') === null && document.querySelector('#jobs tr[data-id="dl-2"]') !== null`)
	shot(t, tab, "jobs")
	var j api.Job
	n.mustDo(200, "GET", "/v1/jobs/dl-1", admin, nil, &j)
	if j.Status != api.StatusPending || j.Attempt != 0 {
		t.Fatalf("dl-1 after replay: %s attempt %d", j.Status, j.Attempt)
	}
}

// The root view ranks the namespaces by how close they are to a limit,
// shows the cluster, and creates (shown once) and revokes tokens.
func TestUIRootView(t *testing.T) {
	n := startUINode(t)
	for _, ns := range []struct {
		name, quota string
		jobs        int
	}{{"near", `{"max_pending":10}`, 9}, {"far", `{"max_pending":100,"max_running":50}`, 10}} {
		n.mustDo(200, "PUT", "/v1/quota", n.token(ns.name, "admin"), ns.quota, nil)
		c := n.client(n.token(ns.name, "producer"))
		for i := 0; i < ns.jobs; i++ {
			if _, err := c.Enqueue(ctx(t), api.Job{Queue: "q", Task: "t"}); err != nil {
				t.Fatal(err)
			}
		}
	}

	tab := browser(t)
	signIn(t, tab, n, n.root)
	show(t, tab, "root")
	until(t, tab, "the ranking", `[...document.querySelectorAll('#ranking tbody tr')].map(r => r.dataset.namespace).join(',') === 'near,far'`)
	until(t, tab, "near's alarm", `document.querySelector('#ranking tr[data-namespace="near"] td:nth-child(5)').textContent === 'max_pending'`)
	until(t, tab, "the cluster", `document.getElementById('cluster-summary').textContent.includes('this node ui-node') && document.querySelector('#members tr[data-node="ui-node"]') !== null`)

	run(t, tab, "create a token",
		chromedp.SendKeys(chromedp.ID("t-ns"), "newco"),
		chromedp.SetValue(chromedp.ID("t-role"), "producer"),
		chromedp.Click(chromedp.ID("t-create")))
	until(t, tab, "the token, once", `document.getElementById('new-token-value').textContent.startsWith('fq_')`)
	secret := js[string](t, tab, `document.getElementById('new-token-value').textContent`)
	until(t, tab, "the listed token", `[...document.querySelectorAll('#tokens tbody tr')].some(r => r.children[1]?.textContent === 'newco')`)
	shot(t, tab, "root")
	if _, body := n.do("GET", "/v1/tokens", n.root, nil); bytes.Contains(body, []byte(secret)) {
		t.Fatal("GET /v1/tokens shows a token's secret")
	}
	if _, err := n.client(secret).Enqueue(ctx(t), api.Job{Queue: "q", Task: "t"}); err != nil {
		t.Fatalf("the new token: %v", err)
	}
	run(t, tab, "dismiss", chromedp.Click(chromedp.ID("new-token-dismiss")))
	until(t, tab, "the secret gone from the page", `document.getElementById('new-token').hidden && !document.body.innerText.includes(`+jsString(secret)+`)`)

	id := js[string](t, tab, `[...document.querySelectorAll('#tokens tbody tr')].find(r => r.children[1].textContent === 'newco').dataset.id`)
	btn := `#tokens tr[data-id="` + id + `"] button.revoke`
	run(t, tab, "arm revoke", chromedp.Click(chromedp.CSS(btn)))
	until(t, tab, "confirm", `document.querySelector(`+jsString(btn)+`).textContent === 'Confirm revoke'`)
	run(t, tab, "revoke", chromedp.Click(chromedp.CSS(btn)))
	until(t, tab, "the token gone", `document.querySelector(`+jsString(`#tokens tr[data-id="`+id+`"]`)+`) === null`)
	if status, _ := n.do("GET", "/v1/usage", secret, nil); status != 401 {
		t.Fatalf("the revoked token: status %d, want 401", status)
	}
}

// At 80 % of a limit the alarm is raised: a banner for the namespace's
// admin (and root), GET /v1/alarms, the gauge; below 70 % it clears.
func TestUIAlarmBanner(t *testing.T) {
	n := startUINode(t)
	admin, other := n.token("acme", "admin"), n.token("other", "admin")
	n.mustDo(200, "PUT", "/v1/quota", admin, `{"max_pending":10}`, nil)
	p := n.client(n.token("acme", "producer"))
	w := n.client(n.token("acme", "worker"))
	for i := 0; i < 8; i++ {
		if _, err := p.Enqueue(ctx(t), api.Job{Queue: "q", Task: "t"}); err != nil {
			t.Fatal(err)
		}
	}

	tab := browser(t)
	signIn(t, tab, n, admin)
	banner := `document.querySelector('.banner.alarm[data-namespace="acme"][data-limit="max_pending"]')`
	until(t, tab, "the banner", banner+` !== null && `+banner+`.textContent.includes('80 % of max_pending (8 of 10)')`)

	alarms := func(token string) []struct{ Namespace, Limit, State string } {
		var out struct {
			Alarms []struct{ Namespace, Limit, State string }
		}
		n.mustDo(200, "GET", "/v1/alarms", token, nil, &out)
		return out.Alarms
	}
	if a := alarms(admin); len(a) != 1 || a[0].Namespace != "acme" || a[0].Limit != "max_pending" || a[0].State != "raised" {
		t.Fatalf("acme's alarms: %+v", a)
	}
	if a := alarms(other); len(a) != 0 {
		t.Fatalf("another namespace's admin sees %+v", a)
	}
	if a := alarms(n.root); len(a) != 1 {
		t.Fatalf("root sees %+v", a)
	}
	gauge := func() string {
		_, body := n.do("GET", "/metrics", n.root, nil)
		for _, l := range strings.Split(string(body), "\n") {
			if strings.HasPrefix(l, `flexiq_quota_alarm{limit="max_pending",namespace="acme"}`) {
				return strings.Fields(l)[1]
			}
		}
		return ""
	}
	waitUntil(t, "flexiq_quota_alarm 1", func() bool { return gauge() == "1" })

	// 8 → 6 pending: 60 %, below 70 %: cleared.
	jobs, err := w.Claim(ctx(t), api.ClaimRequest{Queues: []string{"q"}, Max: 2})
	if err != nil || len(jobs) != 2 {
		t.Fatalf("claim: %v %v", jobs, err)
	}
	for _, j := range jobs {
		if err := w.Ack(ctx(t), j.ID, j.Attempt, nil); err != nil {
			t.Fatal(err)
		}
	}
	until(t, tab, "the banner gone", banner+` === null`)
	if a := alarms(admin); len(a) != 1 || a[0].State != "cleared" {
		t.Fatalf("after clearing: %+v", a)
	}
	waitUntil(t, "flexiq_quota_alarm 0", func() bool { return gauge() == "0" })
}
