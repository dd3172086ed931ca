package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/cmd/fq/cli"
	"github.com/flexiq/flexiq/quota"
	"github.com/flexiq/flexiq/store"
)

// cliRun is one fq run.
type cliRun struct {
	code           int
	stdout, stderr string
}

// fq runs the CLI in-process against e's node, with the node's addresses
// and token in the environment, as a user's shell would give them.
func (e *env) fq(token string, args ...string) cliRun {
	e.t.Helper()
	return e.fqEnv(context.Background(), map[string]string{"FQ_TOKEN": token}, args...)
}

// fqEnv runs the CLI under ctx with extra environment variables (an empty
// value removes one).
func (e *env) fqEnv(ctx context.Context, extra map[string]string, args ...string) cliRun {
	e.t.Helper()
	vars := map[string]string{
		"FQ_SERVER":   e.node.AdminURL(),
		"FQ_NATS_URL": e.node.NATSURL(),
	}
	for k, v := range extra {
		vars[k] = v
	}
	var out, errb bytes.Buffer
	code := cli.RunContext(ctx, args, func(k string) string { return vars[k] }, &out, &errb)
	return cliRun{code: code, stdout: out.String(), stderr: errb.String()}
}

// want fails the test unless the run exited with code.
func (r cliRun) want(t testing.TB, code int) cliRun {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, code, r.stdout, r.stderr)
	}
	return r
}

// resultLines parses "id outcome" lines.
func resultLines(t testing.TB, stdout string) []api.EnqueueResult {
	t.Helper()
	var out []api.EnqueueResult
	for _, line := range strings.Split(strings.TrimSpace(stdout), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			t.Fatalf("result line %q, want \"<id> <outcome>\"", line)
		}
		out = append(out, api.EnqueueResult{ID: f[0], Outcome: api.Outcome(f[1])})
	}
	return out
}

func jsonEqual(t testing.TB, got []byte, want string) {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("decode %s: %v", got, err)
	}
	if err := json.Unmarshal([]byte(want), &w); err != nil {
		t.Fatalf("decode %s: %v", want, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	if !bytes.Equal(gb, wb) {
		t.Fatalf("got %s, want %s", gb, wb)
	}
}

func TestCLIQuotaSetGetUnsetClearRoundTrip(t *testing.T) {
	e := start(t)
	tn := e.tenant("acme")

	e.fq(tn.admin, "quota", "set", "--max-pending", "10", "--on-excess", "drop", "--enqueue-rate", "500/s",
		"--max-running", "5", "--max-archived-rows", "100", "--max-dead-rows", "50").want(t, 0)
	u := e.usage(tn.admin)
	jsonEqual(t, u.Quota, `{"max_pending":10,"on_excess":"drop","enqueue_rate":"500/s","max_running":5,"max_archived_rows":100,"max_dead_rows":50}`)
	if u.Revision != 1 {
		t.Fatalf("revision %d, want 1", u.Revision)
	}

	// set merges: only the given field changes. Globals after the command,
	// as flags, win over the environment.
	r := e.fqEnv(context.Background(), map[string]string{"FQ_TOKEN": "wrong", "FQ_SERVER": "http://127.0.0.1:1"},
		"quota", "set", "--max-pending", "20", "--server", e.node.AdminURL(), "--token", tn.admin).want(t, 0)
	if !regexp.MustCompile(`(?m)^max_pending\s+20$`).MatchString(r.stdout) || !strings.Contains(r.stdout, "revision:  2") {
		t.Fatalf("quota set printed\n%s\nwant the resulting document at revision 2", r.stdout)
	}
	u = e.usage(tn.admin)
	jsonEqual(t, u.Quota, `{"max_pending":20,"on_excess":"drop","enqueue_rate":"500/s","max_running":5,"max_archived_rows":100,"max_dead_rows":50}`)

	// get: usage beside each limit.
	enqueue(t, tn.p, job("q", "t"))
	r = e.fq(tn.admin, "quota", "get").want(t, 0)
	for _, re := range []string{
		`(?m)^namespace:\s+acme$`, `(?m)^revision:\s+2$`,
		`(?m)^max_pending\s+20\s+1$`, `(?m)^on_excess\s+drop\s+-$`, `(?m)^enqueue_rate\s+500/s\s+-$`,
		`(?m)^max_running\s+5\s+0$`, `(?m)^max_archived_rows\s+100\s+0$`, `(?m)^max_dead_rows\s+50\s+0$`,
	} {
		if !regexp.MustCompile(re).MatchString(r.stdout) {
			t.Fatalf("quota get output does not match %s:\n%s", re, r.stdout)
		}
	}
	// get --json: GET /v1/usage's object as is.
	r = e.fq(tn.admin, "quota", "get", "--json").want(t, 0)
	_, body := e.do("GET", "/v1/usage", tn.admin, nil)
	if strings.TrimSpace(r.stdout) != strings.TrimSpace(string(body)) {
		t.Fatalf("quota get --json = %s, want %s", r.stdout, body)
	}

	// unset takes either spelling.
	e.fq(tn.admin, "quota", "unset", "max-pending", "enqueue_rate").want(t, 0)
	u = e.usage(tn.admin)
	jsonEqual(t, u.Quota, `{"on_excess":"drop","max_running":5,"max_archived_rows":100,"max_dead_rows":50}`)
	if u.Revision != 3 {
		t.Fatalf("revision %d, want 3", u.Revision)
	}

	r = e.fq(tn.admin, "quota", "clear").want(t, 0)
	u = e.usage(tn.admin)
	jsonEqual(t, u.Quota, `{}`)
	if u.Revision != 4 {
		t.Fatalf("revision %d, want 4", u.Revision)
	}
	if !regexp.MustCompile(`(?m)^max_pending\s+unlimited$`).MatchString(r.stdout) ||
		!regexp.MustCompile(`(?m)^on_excess\s+reject \(default\)$`).MatchString(r.stdout) {
		t.Fatalf("quota clear printed\n%s", r.stdout)
	}
}

func TestCLIEnqueueOverTheCapPrintsTheServerMessage(t *testing.T) {
	e := start(t)
	tn := e.tenant("acme")
	e.fq(tn.admin, "quota", "set", "--max-pending", "2").want(t, 0)

	r := e.fq(tn.producer, "enqueue", "--queue", "emails", "--task", "send", "--payload", `{"to":"a@example.com"}`, "--count", "2").want(t, 0)
	res := resultLines(t, r.stdout)
	if len(res) != 2 || res[0].Outcome != api.OutcomeEnqueued || res[1].Outcome != api.OutcomeEnqueued || res[0].ID == res[1].ID {
		t.Fatalf("enqueue --count 2 printed %q, want two enqueued jobs", r.stdout)
	}
	if j := e.job(tn.admin, res[0].ID); string(j.Payload) != `{"to":"a@example.com"}` || j.Queue != "emails" || j.Task != "send" {
		t.Fatalf("enqueued job %+v", j)
	}

	r = e.fq(tn.producer, "enqueue", "--queue", "emails", "--task", "send").want(t, 1)
	if r.stderr != "queue 'emails' is full: 2 pending >= max_pending 2\n" || r.stdout != "" {
		t.Fatalf("over the cap: stdout %q stderr %q", r.stdout, r.stderr)
	}
	// A batch is refused whole.
	e.fq(tn.admin, "quota", "set", "--max-pending", "3").want(t, 0)
	r = e.fq(tn.producer, "enqueue", "--queue", "emails", "--task", "send", "--count", "2").want(t, 1)
	if r.stderr != "queue 'emails' is full: 2 pending >= max_pending 3\n" {
		t.Fatalf("batch over the cap: stderr %q", r.stderr)
	}
	if u := e.usage(tn.admin); u.Usage.Pending != 2 {
		t.Fatalf("pending %d, want 2", u.Usage.Pending)
	}
}

func TestCLIDropModeShedJobsInTheDeadLetters(t *testing.T) {
	e := start(t)
	tn := e.tenant("acme")
	e.fq(tn.admin, "quota", "set", "--max-pending", "0", "--on-excess", "drop").want(t, 0)

	r := e.fq(tn.producer, "enqueue", "--queue", "emails", "--task", "send").want(t, 0)
	res := resultLines(t, r.stdout)
	if len(res) != 1 || res[0].Outcome != api.OutcomeShed {
		t.Fatalf("enqueue in drop mode printed %q, want one shed job", r.stdout)
	}
	id := res[0].ID

	r = e.fq(tn.admin, "dead", "list", "--shed", "--json").want(t, 0)
	var list struct{ Jobs []api.Job }
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil {
		t.Fatalf("dead list --json: %v\n%s", err, r.stdout)
	}
	if len(list.Jobs) != 1 || list.Jobs[0].ID != id || list.Jobs[0].Status != api.StatusDead {
		t.Fatalf("dead list --shed --json = %s, want the shed job %s", r.stdout, id)
	}
	jsonEqual(t, list.Jobs[0].DeadMeta, `{"shed":"quota"}`)
	if want := "quota: queue 'emails' is full: 0 pending >= max_pending 0"; list.Jobs[0].Error != want {
		t.Fatalf("shed job error %q, want %q", list.Jobs[0].Error, want)
	}

	// The human forms show it too.
	if r = e.fq(tn.admin, "dead", "list").want(t, 0); !strings.Contains(r.stdout, id) {
		t.Fatalf("dead list does not show %s:\n%s", id, r.stdout)
	}
	if r = e.fq(tn.admin, "dead", "show", id).want(t, 0); !regexp.MustCompile(`(?m)^status\s+dead$`).MatchString(r.stdout) ||
		!strings.Contains(r.stdout, `{"shed":"quota"}`) {
		t.Fatalf("dead show:\n%s", r.stdout)
	}
	r = e.fq(tn.admin, "job", "show", id, "--json").want(t, 0)
	_, body := e.do("GET", "/v1/jobs/"+id, tn.admin, nil)
	if strings.TrimSpace(r.stdout) != strings.TrimSpace(string(body)) {
		t.Fatalf("job show --json = %s, want %s", r.stdout, body)
	}

	// Replay, with room again: the same id is pending.
	e.fq(tn.admin, "quota", "clear").want(t, 0)
	r = e.fq(tn.admin, "dead", "replay", id).want(t, 0)
	if got := resultLines(t, r.stdout); len(got) != 1 || got[0].ID != id || got[0].Outcome != api.OutcomeEnqueued {
		t.Fatalf("dead replay printed %q", r.stdout)
	}
	if j := e.job(tn.admin, id); j.Status != api.StatusPending {
		t.Fatalf("replayed job status %s, want pending", j.Status)
	}
	// An unknown job is the server's NOT_FOUND.
	if r = e.fq(tn.admin, "job", "show", "nope").want(t, 1); r.stderr != "job 'nope' not found\n" {
		t.Fatalf("job show nope: stderr %q", r.stderr)
	}
}

func TestCLIUsageErrorsExit2AndNameTheFlag(t *testing.T) {
	e := start(t)
	tn := e.tenant("acme")
	cases := []struct {
		env  map[string]string
		args []string
		want string // the start of stderr's first line
	}{
		{nil, []string{"quota", "set", "--on-excess", "maybe"}, `--on-excess: must be reject or drop, got "maybe"`},
		{nil, []string{"quota", "set", "--enqueue-rate", "5/d"}, `--enqueue-rate: `},
		{nil, []string{"quota", "set", "--enqueue-rate", "0/s"}, `--enqueue-rate: `},
		{nil, []string{"quota", "set", "--max-pending", "lots"}, `--max-pending: must be an integer, got "lots"`},
		{nil, []string{"quota", "set", "--max-pending", "1.5"}, `--max-pending: `},
		{nil, []string{"quota", "set", "-max-running=x"}, `-max-running: `},
		{nil, []string{"quota", "set", "--max-pending"}, `--max-pending: needs a value`},
		{nil, []string{"quota", "set"}, `fq quota set: give at least one limit`},
		{nil, []string{"quota", "set", "--bogus", "1"}, `--bogus: unknown flag`},
		{nil, []string{"quota", "unset", "max_bananas"}, `fq quota unset: unknown field "max_bananas"`},
		{nil, []string{"quota", "unset"}, `fq quota unset: `},
		{nil, []string{"quota", "frobnicate"}, `fq quota: unknown subcommand "frobnicate"`},
		{nil, []string{"quota"}, `fq quota: missing subcommand`},
		{nil, []string{"frobnicate"}, `fq: unknown command "frobnicate"`},
		{nil, []string{}, `fq: missing command`},
		{nil, []string{"--bogus", "quota", "get"}, `--bogus: unknown flag`},
		{nil, []string{"enqueue", "--queue", "q", "--task", "t", "--payload", "{nope"}, `--payload: not valid JSON`},
		{nil, []string{"enqueue", "--queue", "q", "--task", "t", "--delay", "soon"}, `--delay: `},
		{nil, []string{"enqueue", "--queue", "q", "--task", "t", "--count", "0"}, `--count: `},
		{nil, []string{"enqueue", "--task", "t"}, `fq enqueue: --queue and --task are required`},
		{nil, []string{"queue", "set", "q", "--dead-retry-after", "later"}, `--dead-retry-after: `},
		{nil, []string{"token", "create", "--namespace", "x", "--role", "boss"}, `--role: must be admin, producer or worker, got "boss"`},
		{nil, []string{"bench", "sideways"}, `fq bench: unknown mode "sideways"`},
		{map[string]string{"FQ_SERVER": "garbage"}, []string{"quota", "get"}, `FQ_SERVER: `},
		{nil, []string{"--server", "garbage", "quota", "get"}, `--server: `},
		{map[string]string{"FQ_NATS_URL": "http://x:1"}, []string{"enqueue", "--queue", "q", "--task", "t"}, `FQ_NATS_URL: `},
		{map[string]string{"FQ_TOKEN": "", "FQ_TOKEN_FILE": filepath.Join(t.TempDir(), "missing")}, []string{"quota", "get"}, `FQ_TOKEN_FILE: `},
	}
	for _, c := range cases {
		env := map[string]string{"FQ_TOKEN": tn.admin}
		for k, v := range c.env {
			env[k] = v
		}
		r := e.fqEnv(context.Background(), env, c.args...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, c.want) {
			t.Errorf("fq %s: exit %d, stderr %q; want exit 2 and stderr starting %q", strings.Join(c.args, " "), r.code, r.stderr, c.want)
		}
		if r.stdout != "" {
			t.Errorf("fq %s: stdout %q on a usage error", strings.Join(c.args, " "), r.stdout)
		}
	}
	// Nothing was written.
	if u := e.usage(tn.admin); u.Revision != 0 || u.Usage.Pending != 0 {
		t.Fatalf("after usage errors: revision %d pending %d, want 0 and 0", u.Revision, u.Usage.Pending)
	}
	// Help is not an error.
	if r := e.fq(tn.admin, "quota", "set", "--help").want(t, 0); !strings.Contains(r.stdout, "--max-pending") {
		t.Fatalf("quota set --help:\n%s", r.stdout)
	}
}

func TestCLINegativeLimitIsTheServersRefusal(t *testing.T) {
	e := start(t)
	tn := e.tenant("acme")
	r := e.fq(tn.admin, "quota", "set", "--max-pending", "-1").want(t, 1)
	// The CLI prints exactly what the admin door says for the same write.
	status, body := e.do("PATCH", "/v1/quota", tn.admin, `{"max_pending":-1}`)
	var eb api.ErrorBody
	if err := json.Unmarshal(body, &eb); err != nil || status != http.StatusBadRequest || eb.Error == nil {
		t.Fatalf("PATCH max_pending -1: %d %s", status, body)
	}
	if r.stderr != eb.Error.Message+"\n" || !strings.Contains(r.stderr, "max_pending") {
		t.Fatalf("stderr %q, want the server's message %q", r.stderr, eb.Error.Message)
	}
	if u := e.usage(tn.admin); u.Revision != 0 {
		t.Fatalf("revision %d after a refused write, want 0", u.Revision)
	}
	r = e.fq(tn.admin, "queue", "set", "emails", "--max-concurrent", "-1").want(t, 1)
	if !strings.Contains(r.stderr, "max_concurrent") {
		t.Fatalf("queue set --max-concurrent -1: stderr %q", r.stderr)
	}
	// A negative delay parses: like a negative limit it is the server's
	// refusal (docs/cli.md), printed as is, exit 1.
	if r = e.fq(tn.producer, "enqueue", "--queue", "q", "--task", "t", "--delay", "-5s").want(t, 1); !strings.Contains(r.stderr, "delay_ms") {
		t.Fatalf("enqueue --delay -5s: stderr %q", r.stderr)
	}
	// A role that may not: the server's PERMISSION_DENIED, exit 1.
	if r = e.fq(tn.producer, "quota", "get").want(t, 1); !strings.Contains(r.stderr, "may not") {
		t.Fatalf("producer quota get: stderr %q", r.stderr)
	}
}

func TestCLIUnreachableNodeExits3(t *testing.T) {
	e := start(t)
	r := e.fq(e.root, "--server", "http://127.0.0.1:1", "quota", "get").want(t, 3)
	if !strings.Contains(r.stderr, "cannot reach") {
		t.Fatalf("stderr %q", r.stderr)
	}
	r = e.fqEnv(context.Background(), map[string]string{"FQ_TOKEN": e.root, "FQ_NATS_URL": "nats://127.0.0.1:1"},
		"enqueue", "--queue", "q", "--task", "t").want(t, 3)
	if !strings.Contains(r.stderr, "cannot reach") {
		t.Fatalf("stderr %q", r.stderr)
	}
	e.fqEnv(context.Background(), map[string]string{"FQ_TOKEN": e.root, "FQ_NATS_URL": "nats://127.0.0.1:1"},
		"work", "--queue", "q").want(t, 3)
	// A node that stops: the same commands exit 3 too.
	admin, nats := e.node.AdminURL(), e.node.NATSURL()
	e.stop()
	env := map[string]string{"FQ_TOKEN": e.root, "FQ_SERVER": admin, "FQ_NATS_URL": nats}
	var out, errb bytes.Buffer
	getenv := func(k string) string { return env[k] }
	if code := cli.Run([]string{"quota", "get"}, getenv, &out, &errb); code != 3 {
		t.Fatalf("quota get on a stopped node: exit %d, stderr %s", code, errb.String())
	}
	if code := cli.Run([]string{"enqueue", "--queue", "q", "--task", "t"}, getenv, &out, &errb); code != 3 {
		t.Fatalf("enqueue on a stopped node: exit %d, stderr %s", code, errb.String())
	}
}

func TestCLITokenCreateAndRevoke(t *testing.T) {
	e := start(t)
	r := e.fq(e.root, "token", "create", "--namespace", "acme", "--role", "producer").want(t, 0)
	id := regexp.MustCompile(`(?m)^id: (\S+)$`).FindStringSubmatch(r.stdout)
	secret := regexp.MustCompile(`(?m)^token: (\S+)$`).FindStringSubmatch(r.stdout)
	if id == nil || secret == nil {
		t.Fatalf("token create printed\n%s\nwant id: and token: lines", r.stdout)
	}
	// The token works, in its namespace and role.
	r = e.fq(secret[1], "enqueue", "--queue", "q", "--task", "t").want(t, 0)
	res := resultLines(t, r.stdout)
	tn := e.tenant("acme")
	if j := e.job(tn.admin, res[0].ID); j.Status != api.StatusPending {
		t.Fatalf("job enqueued with the new token: %+v", j)
	}
	if r = e.fq(secret[1], "quota", "get").want(t, 1); !strings.Contains(r.stderr, "may not") {
		t.Fatalf("producer token reading the quota: %q", r.stderr)
	}
	// Only root creates tokens.
	if r = e.fq(tn.admin, "token", "create", "--namespace", "acme", "--role", "admin").want(t, 1); !strings.Contains(r.stderr, "root token") {
		t.Fatalf("admin creating a token: %q", r.stderr)
	}

	r = e.fq(e.root, "token", "revoke", id[1]).want(t, 0)
	if !strings.Contains(r.stdout, id[1]) {
		t.Fatalf("token revoke printed %q", r.stdout)
	}
	r = e.fq(secret[1], "enqueue", "--queue", "q", "--task", "t").want(t, 1)
	if !strings.Contains(r.stderr, "missing or invalid token") {
		t.Fatalf("revoked token: stderr %q", r.stderr)
	}
	e.fq(e.root, "token", "revoke", "tok_nope").want(t, 1)

	// The token can come from a file.
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte(tn.admin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = e.fqEnv(context.Background(), map[string]string{"FQ_TOKEN_FILE": file}, "quota", "get").want(t, 0)
	if !strings.Contains(r.stdout, "namespace: acme") {
		t.Fatalf("quota get with FQ_TOKEN_FILE:\n%s", r.stdout)
	}
}

func TestCLITriggersAndEvents(t *testing.T) {
	e := start(t)
	tn := e.tenant("acme")
	r := e.fq(tn.admin, "trigger", "add", "--event", "order.created", "--queue", "orders", "--task", "handle").want(t, 0)
	id := strings.TrimSpace(r.stdout)
	if id == "" || strings.ContainsAny(id, " \n") {
		t.Fatalf("trigger add printed %q, want the id", r.stdout)
	}
	r = e.fq(tn.admin, "trigger", "list").want(t, 0)
	if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(id) + `\s+order\.created\s+orders\s+handle$`).MatchString(r.stdout) {
		t.Fatalf("trigger list:\n%s", r.stdout)
	}
	r = e.fq(tn.admin, "trigger", "list", "--json").want(t, 0)
	jsonEqual(t, []byte(r.stdout), `{"triggers":[{"id":"`+id+`","event":"order.created","queue":"orders","task":"handle"}]}`)

	r = e.fq(tn.producer, "event", "publish", "order.created", "--payload", `{"order":7}`).want(t, 0)
	res := resultLines(t, r.stdout)
	if len(res) != 1 || res[0].Outcome != api.OutcomeEnqueued {
		t.Fatalf("event publish printed %q", r.stdout)
	}
	if j := e.job(tn.admin, res[0].ID); j.Queue != "orders" || j.Task != "handle" || string(j.Payload) != `{"order":7}` {
		t.Fatalf("job from the trigger: %+v", j)
	}

	e.fq(tn.admin, "trigger", "rm", id).want(t, 0)
	if r = e.fq(tn.admin, "trigger", "list", "--json").want(t, 0); strings.Contains(r.stdout, id) {
		t.Fatalf("trigger still listed after rm: %s", r.stdout)
	}
	if r = e.fq(tn.admin, "trigger", "rm", id).want(t, 1); !strings.Contains(r.stderr, "not found") {
		t.Fatalf("second rm: %q", r.stderr)
	}
	if r = e.fq(tn.producer, "event", "publish", "order.created").want(t, 0); r.stdout != "" {
		t.Fatalf("event with no trigger printed %q", r.stdout)
	}
}

func TestCLIPeriodicJobs(t *testing.T) {
	e := start(t)
	tn := e.tenant("acme")
	e.fq(tn.admin, "periodic", "add", "--name", "nightly", "--cron", "0 3 * * *", "--queue", "reports", "--task", "build", "--payload", `{"k":1}`).want(t, 0)
	r := e.fq(tn.admin, "periodic", "list", "--json").want(t, 0)
	jsonEqual(t, []byte(r.stdout), `{"periodic":[{"name":"nightly","cron":"0 3 * * *","queue":"reports","task":"build","payload":{"k":1}}]}`)
	if r = e.fq(tn.admin, "periodic", "add", "--name", "bad", "--cron", "whenever", "--queue", "q", "--task", "t").want(t, 1); !strings.Contains(r.stderr, "cron") {
		t.Fatalf("bad cron: %q", r.stderr)
	}
	e.fq(tn.admin, "periodic", "rm", "nightly").want(t, 0)
	if r = e.fq(tn.admin, "periodic", "list").want(t, 0); strings.Contains(r.stdout, "nightly") {
		t.Fatalf("periodic list after rm:\n%s", r.stdout)
	}
}

func TestCLIQueueAndTaskSettings(t *testing.T) {
	e := start(t)
	tn := e.tenant("acme")
	getDoc := func(path string) []byte {
		t.Helper()
		status, body := e.do("GET", path, tn.admin, nil)
		if status != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, status, body)
		}
		return body
	}
	e.fq(tn.admin, "queue", "set", "emails", "--max-concurrent", "2", "--max-attempts", "3").want(t, 0)
	jsonEqual(t, getDoc("/v1/queues/emails"), `{"max_concurrent":2,"max_attempts":3}`)
	// set merges into what is there.
	r := e.fq(tn.admin, "queue", "set", "emails", "--dead-retry-after", "90s", "--dead-retry-max", "4").want(t, 0)
	jsonEqual(t, getDoc("/v1/queues/emails"), `{"max_concurrent":2,"max_attempts":3,"dead_retry_after":"1m30s","dead_retry_max":4}`)
	if !regexp.MustCompile(`(?m)^dead_retry_after\s+1m30s$`).MatchString(r.stdout) {
		t.Fatalf("queue set printed\n%s", r.stdout)
	}
	r = e.fq(tn.admin, "queue", "get", "emails", "--json").want(t, 0)
	jsonEqual(t, []byte(r.stdout), `{"max_concurrent":2,"max_attempts":3,"dead_retry_after":"1m30s","dead_retry_max":4}`)
	r = e.fq(tn.admin, "queue", "get", "emails").want(t, 0)
	if !regexp.MustCompile(`(?m)^max_concurrent\s+2$`).MatchString(r.stdout) {
		t.Fatalf("queue get:\n%s", r.stdout)
	}
	e.fq(tn.admin, "queue", "unset", "emails", "max-concurrent").want(t, 0)
	jsonEqual(t, getDoc("/v1/queues/emails"), `{"max_attempts":3,"dead_retry_after":"1m30s","dead_retry_max":4}`)
	if r = e.fq(tn.admin, "queue", "list").want(t, 0); !strings.Contains(r.stdout, "emails") {
		t.Fatalf("queue list:\n%s", r.stdout)
	}

	e.fq(tn.admin, "task", "set", "send", "--max-concurrent", "1").want(t, 0)
	jsonEqual(t, getDoc("/v1/tasks/send"), `{"max_concurrent":1}`)
	r = e.fq(tn.admin, "task", "get", "send", "--json").want(t, 0)
	jsonEqual(t, []byte(r.stdout), `{"max_concurrent":1}`)
	r = e.fq(tn.admin, "task", "list", "--json").want(t, 0)
	jsonEqual(t, []byte(r.stdout), `{"tasks":{"send":{"max_concurrent":1}}}`)
}

func TestCLIWorkRunsTheCommandPerJob(t *testing.T) {
	e := start(t)
	tn := e.tenant("acme")
	var ids []string
	for i := 0; i < 3; i++ {
		j := job("jobs", "send")
		j.Payload = json.RawMessage(`{"n":` + strconv.Itoa(i) + `}`)
		ids = append(ids, enqueue(t, tn.p, j)[0].ID)
	}
	r := e.fq(tn.worker, "work", "--queue", "jobs", "--concurrency", "2", "--max-jobs", "3", "--", "sh", "-c", "cat >/dev/null").want(t, 0)
	for _, id := range ids {
		if j := e.job(tn.admin, id); j.Status != api.StatusCompleted || j.Attempt != 1 {
			t.Fatalf("job %s: status %s attempt %d, want completed after one attempt", id, j.Status, j.Attempt)
		}
		if !strings.Contains(r.stdout, id+" done") {
			t.Fatalf("work output does not report %s:\n%s", id, r.stdout)
		}
	}

	// stdout is the result (JSON as is); the payload comes on stdin and the
	// job in the environment.
	j := job("jobs", "send")
	j.Payload = json.RawMessage(`{"n":7}`)
	id := enqueue(t, tn.p, j)[0].ID
	script := `printf '{"id":"%s","queue":"%s","task":"%s","attempt":%s,"in":' "$FQ_JOB_ID" "$FQ_JOB_QUEUE" "$FQ_JOB_TASK" "$FQ_JOB_ATTEMPT"; cat; printf '}'`
	e.fq(tn.worker, "work", "--queue", "jobs", "--max-jobs", "1", "--", "sh", "-c", script).want(t, 0)
	got := e.job(tn.admin, id)
	if got.Status != api.StatusCompleted {
		t.Fatalf("job status %s, want completed", got.Status)
	}
	jsonEqual(t, got.Result, `{"id":"`+id+`","queue":"jobs","task":"send","attempt":1,"in":{"n":7}}`)

	// Text that is not JSON is a JSON string.
	id = enqueue(t, tn.p, job("jobs", "send"))[0].ID
	e.fq(tn.worker, "work", "--queue", "jobs", "--max-jobs", "1", "--", "echo", "all good").want(t, 0)
	jsonEqual(t, e.job(tn.admin, id).Result, `"all good"`)

	// A failing command nacks with its stderr.
	j = job("jobs", "send")
	one := int64(1)
	j.MaxAttempts = &one
	id = enqueue(t, tn.p, j)[0].ID
	e.fq(tn.worker, "work", "--queue", "jobs", "--max-jobs", "1", "--", "sh", "-c", "echo starting; echo boom >&2; exit 3").want(t, 0)
	if got := e.job(tn.admin, id); got.Status != api.StatusDead || got.Error != "boom" {
		t.Fatalf("failed job: status %s error %q, want dead \"boom\"", got.Status, got.Error)
	}
}

func TestCLIWorkWithoutCommandPrintsJobsAndStopsOnCancel(t *testing.T) {
	e := start(t)
	tn := e.tenant("acme")
	j := job("jobs", "send")
	j.Payload = json.RawMessage(`{"hello":"world"}`)
	id := enqueue(t, tn.p, j)[0].ID

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan cliRun, 1)
	go func() {
		done <- e.fqEnv(ctx, map[string]string{"FQ_TOKEN": tn.worker}, "work", "--queue", "jobs")
	}()
	deadline := time.Now().Add(20 * time.Second)
	for e.job(tn.admin, id).Status != api.StatusCompleted {
		if time.Now().After(deadline) {
			t.Fatal("fq work did not complete the job within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	var r cliRun
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("fq work did not stop within 10s of its context ending")
	}
	r.want(t, 0)
	var printed api.Job
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.stdout)), &printed); err != nil {
		t.Fatalf("work printed %q, want one JSON line: %v", r.stdout, err)
	}
	if printed.ID != id || string(printed.Payload) != `{"hello":"world"}` {
		t.Fatalf("printed job %+v", printed)
	}

	// A token that may not work jobs fails at once instead of looping.
	if r = e.fq(tn.producer, "work", "--queue", "jobs").want(t, 1); !strings.Contains(r.stderr, "may not") {
		t.Fatalf("producer token working: %q", r.stderr)
	}
}

func TestCLIBenchEnqueuePrintsJobsPerSecond(t *testing.T) {
	e := start(t)
	r := e.fq(e.root, "bench", "enqueue", "--jobs", "2000").want(t, 0)
	if !strings.Contains(r.stdout, "jobs/s") {
		t.Fatalf("bench output has no jobs/s column:\n%s", r.stdout)
	}
	m := regexp.MustCompile(`(?m)^enqueue\s+2000\s+([0-9.]+)\s+([0-9]+)\s+(\S+)\s+(\S+)\s+(\S+)\s+2000$`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("bench output has no enqueue row of 2000 jobs in 2000 requests:\n%s", r.stdout)
	}
	if rate, _ := strconv.Atoi(m[2]); rate <= 0 {
		t.Fatalf("jobs/s %s", m[2])
	}
	// With the root token, which may read /metrics, each phase's row is
	// followed by how busy the namespace's actor was.
	actor := regexp.MustCompile(`(?m)^enqueue\s.*\n  \(namespace default's actor: busy [0-9]+ % of the phase, [0-9.]+ messages a step\)$`)
	if !actor.MatchString(r.stdout) {
		t.Fatalf("bench output has no line on the actor after the enqueue row:\n%s", r.stdout)
	}
	// The jobs were enqueued, then drained: none left pending.
	if u := e.usage(e.root); u.Usage.Pending != 0 || u.Usage.Archived != 2000 {
		t.Fatalf("after bench: pending %d archived %d, want 0 and 2000", u.Usage.Pending, u.Usage.Archived)
	}

	r = e.fq(e.root, "bench", "all", "--jobs", "300", "--producers", "4", "--workers", "4").want(t, 0)
	for _, phase := range []string{"enqueue", "enqueue-batch", "work"} {
		n := "300"
		if phase == "work" {
			n = "600"
		}
		if !regexp.MustCompile(`(?m)^` + phase + `\s+` + n + `\s+[0-9.]+\s+[0-9]+\s`).MatchString(r.stdout) {
			t.Fatalf("bench all has no %s row of %s jobs:\n%s", phase, n, r.stdout)
		}
	}
	if u := e.usage(e.root); u.Usage.Pending != 0 || u.Usage.Archived != 2600 {
		t.Fatalf("after bench all: pending %d archived %d, want 0 and 2600", u.Usage.Pending, u.Usage.Archived)
	}

	// The SDK worker's work phase: every job acked by the time it ends.
	r = e.fq(e.root, "bench", "work", "--sdk-worker", "--jobs", "500", "--workers", "8").want(t, 0)
	if !regexp.MustCompile(`(?m)^work-sdk\s+500\s+[0-9.]+\s+[0-9]+\s+-\s+-\s+-\s+-$`).MatchString(r.stdout) {
		t.Fatalf("bench work --sdk-worker has no work-sdk row of 500 jobs:\n%s", r.stdout)
	}
	if u := e.usage(e.root); u.Usage.Pending != 0 || u.Usage.Running != 0 || u.Usage.Archived != 3100 {
		t.Fatalf("after bench work --sdk-worker: pending %d running %d archived %d, want 0, 0 and 3100",
			u.Usage.Pending, u.Usage.Running, u.Usage.Archived)
	}

	// A namespace's admin may not read /metrics: the rows alone.
	tn := e.tenant("acme")
	r = e.fq(tn.admin, "bench", "enqueue", "--jobs", "200").want(t, 0)
	if !regexp.MustCompile(`(?m)^enqueue\s+200\s`).MatchString(r.stdout) || strings.Contains(r.stdout, "actor") {
		t.Fatalf("bench with an admin token of acme: want an enqueue row and no line on the actor:\n%s", r.stdout)
	}
}

// fq quota get on a namespace whose document cannot be read says it is
// stopped, and shows no limit it cannot read as unlimited.
func TestCLIQuotaGetOfAnUnreadableDocument(t *testing.T) {
	e := start(t)
	tn := e.tenant("acme")
	for _, stored := range []string{`{not json`, `{"max_pending":"lots"}`} {
		if _, err := e.node.Store.SettingPut(context.Background(), store.SettingPutParams{
			Key: quota.Key("acme"), Value: []byte(stored), Now: time.Now(),
		}); err != nil {
			t.Fatal(err)
		}
		r := e.fq(tn.admin, "quota", "get").want(t, 0)
		if !strings.Contains(r.stdout, "state:     stopped: enqueues and claims are refused") {
			t.Fatalf("%s: quota get printed\n%s\nwant the namespace shown stopped", stored, r.stdout)
		}
		wantMaxPending := `max_pending\s+lots\s`
		if stored == `{not json` {
			wantMaxPending = `max_pending\s+unreadable\s`
			if regexp.MustCompile(`(?m)unlimited`).MatchString(r.stdout) {
				t.Fatalf("%s: quota get printed\n%s\nwant no limit shown as unlimited", stored, r.stdout)
			}
		}
		if !regexp.MustCompile(`(?m)^` + wantMaxPending).MatchString(r.stdout) {
			t.Fatalf("%s: quota get printed\n%s\nwant %s", stored, r.stdout, wantMaxPending)
		}
	}
}
