// Package cli is fq, FlexiQ's command-line client (docs/cli.md): quotas and
// usage, enqueue, a worker that runs a command per job, jobs and dead
// letters, triggers, periodic jobs, queue and task settings, tokens, and a
// load generator.
//
// Administrative commands talk to the node's HTTP admin door (--server);
// enqueue, event publish, work and bench use the Go client over NATS
// (--nats). Every command carries a bearer token (--token).
//
// Exit codes: 0 success; 1 the server refused (its message printed as is on
// stderr); 2 a usage error (the bad flag or variable named as the user wrote
// it); 3 the node cannot be reached.
//
// Run is the whole program with its environment injected, so tests run fq
// in-process; cmd/fq only calls it.
package cli

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/client"
	"github.com/flexiq/flexiq/internal/buildinfo"
)

// Exit codes of docs/cli.md.
const (
	ExitOK          = 0
	ExitRefused     = 1
	ExitUsage       = 2
	ExitUnreachable = 3
)

// Defaults of the global settings.
const (
	DefaultServer    = "http://127.0.0.1:7070"
	DefaultNATS      = "nats://127.0.0.1:4222"
	DefaultTokenFile = "flexiq-data/root.token"
)

// Run runs fq with args (without the program name), reading the
// environment through getenv, and returns the exit code.
func Run(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	return RunContext(context.Background(), args, getenv, stdout, stderr)
}

// RunContext is Run under ctx: cancelling it stops a long-running command
// (fq work stops gracefully, as on SIGINT).
func RunContext(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	a := &app{
		ctx:    ctx,
		stdout: stdout,
		stderr: stderr,
		getenv: getenv,
		args:   args,
		server: setting{flag: "server", env: "FQ_SERVER", value: DefaultServer},
		nats:   setting{flag: "nats", env: "FQ_NATS_URL", value: DefaultNATS},
		token:  setting{flag: "token", env: "FQ_TOKEN"},
		ca:     setting{flag: "ca", env: "FQ_CA"},
		httpc:  &http.Client{Timeout: 30 * time.Second},
	}
	for _, s := range a.globals() {
		if v := getenv(s.env); v != "" {
			s.value, s.fromEnv = v, true
		}
	}
	return a.report(a.main(args))
}

// app is one run of fq.
type app struct {
	ctx    context.Context
	stdout io.Writer
	stderr io.Writer
	getenv func(string) string
	args   []string

	server, nats, token setting
	// ca names a PEM file of the certificates trusted for TLS (the admin
	// door over https, NATS over TLS) instead of the system's store.
	ca    setting
	httpc *http.Client
	// roots is ca read, once (rootsDone).
	roots     *x509.CertPool
	rootsDone bool

	tokenDone bool
	tokenVal  string
	// noToken: no token was found anywhere; a refusal says how to give one.
	noToken bool
}

// setting is a global with a flag and an environment twin.
type setting struct {
	flag, env string
	value     string
	fromFlag  bool
	fromEnv   bool
}

// source names where the value came from, as the user wrote it.
func (a *app) source(s *setting) string {
	if s.fromFlag {
		return written(a.args, s.flag)
	}
	if s.fromEnv {
		return s.env
	}
	return "default " + s.flag
}

// command is one fq command.
type command struct {
	name     string // "quota set"
	synopsis string
	run      func(a *app, cmd *command, args []string) error
}

var commands []*command

func init() {
	commands = []*command{
		{"quota set", "[--max-pending N] [--on-excess reject|drop] [--enqueue-rate N/s|m|h] [--max-running N] [--max-archived-rows N] [--max-dead-rows N] [--json]", (*app).quotaSet},
		{"quota unset", "FIELD... [--json]     (FIELD as max_pending or max-pending)", (*app).quotaUnset},
		{"quota clear", "[--json]", (*app).quotaClear},
		{"quota get", "[--json]", (*app).quotaGet},
		{"enqueue", "--queue Q --task T [--payload JSON] [--delay D] [--unique-key K] [--count N] [--id ID] [--priority N] [--max-attempts N]", (*app).enqueue},
		{"work", "--queue Q[,Q...] [--concurrency N] [--lease D] [--max-jobs N] [-- CMD ARGS...]", (*app).work},
		{"job show", "ID [--json]", (*app).jobShow},
		{"dead list", "[--queue Q] [--shed] [--limit N] [--json]", (*app).deadList},
		{"dead show", "ID [--json]", (*app).jobShow},
		{"dead replay", "ID...", (*app).deadReplay},
		{"trigger add", "--event E --queue Q --task T", (*app).triggerAdd},
		{"trigger list", "[--json]", (*app).triggerList},
		{"trigger rm", "ID", (*app).triggerRm},
		{"event publish", "E [--payload JSON]", (*app).eventPublish},
		{"periodic add", "--name N --cron SPEC --queue Q --task T [--payload JSON]", (*app).periodicAdd},
		{"periodic list", "[--json]", (*app).periodicList},
		{"periodic rm", "N", (*app).periodicRm},
		{"queue set", "Q [--max-concurrent N] [--max-attempts N] [--dead-retry-after D] [--dead-retry-max N] [--json]", (*app).queueSet},
		{"queue unset", "Q FIELD... [--json]", (*app).queueUnset},
		{"queue get", "Q [--json]", (*app).queueGet},
		{"queue list", "[--json]", (*app).queueList},
		{"task set", "T [--max-concurrent N] [--json]", (*app).taskSet},
		{"task unset", "T FIELD... [--json]", (*app).taskUnset},
		{"task get", "T [--json]", (*app).taskGet},
		{"task list", "[--json]", (*app).taskList},
		{"token create", "--namespace NS --role admin|producer|worker [--json]", (*app).tokenCreate},
		{"token revoke", "ID", (*app).tokenRevoke},
		{"cluster status", "[--json]", (*app).clusterStatus},
		{"bench", "[enqueue|enqueue-batch|work|all|flood] [--jobs N | --duration D] [--producers N] [--batch N] [--workers N] [--queue Q] [--payload JSON] [--no-drain] [--sdk-worker [--prefetch N]]\n" +
			"  load generator: jobs/s and latency percentiles per phase, in a fresh queue of the token's namespace\n" +
			"  (with the root token, also how busy the namespace's actor was: near 100 %, its one writer bounds the phase)\n" +
			"  (completed jobs stay archived there: bench with a scratch namespace's token to keep others clean)", (*app).bench},
	}
}

func (a *app) main(args []string) error {
	top := a.newFlags(nil)
	rest, err := top.parse(args, false)
	if err != nil {
		return err
	}
	if len(rest) == 0 {
		return usageError{msg: "fq: missing command (run 'fq help' for the list)"}
	}
	name := rest[0]
	if name == "version" && len(rest) == 1 {
		fmt.Fprintln(a.stdout, "fq "+buildinfo.String())
		return nil
	}
	if name == "help" {
		if len(rest) > 1 {
			if c := findCommand(rest[1:]); c != nil {
				fmt.Fprintf(a.stdout, "usage: fq %s %s\n", c.name, c.synopsis)
				return nil
			}
		}
		a.topUsage(a.stdout)
		return nil
	}
	if c := findCommand(rest); c != nil {
		n := len(strings.Fields(c.name))
		return c.run(a, c, rest[n:])
	}
	// A group without (or with an unknown) subcommand.
	var subs []string
	for _, c := range commands {
		if g, sub, ok := strings.Cut(c.name, " "); ok && g == name {
			subs = append(subs, sub)
		}
	}
	if len(subs) > 0 {
		if len(rest) == 1 {
			return usageError{msg: fmt.Sprintf("fq %s: missing subcommand (%s)", name, strings.Join(subs, ", "))}
		}
		return usageError{msg: fmt.Sprintf("fq %s: unknown subcommand %q (%s)", name, rest[1], strings.Join(subs, ", "))}
	}
	return usageError{msg: fmt.Sprintf("fq: unknown command %q (run 'fq help' for the list)", name)}
}

func findCommand(args []string) *command {
	for _, c := range commands {
		words := strings.Fields(c.name)
		if len(args) < len(words) {
			continue
		}
		if strings.Join(args[:len(words)], " ") == c.name {
			return c
		}
	}
	return nil
}

func (a *app) topUsage(w io.Writer) {
	fmt.Fprintln(w, "usage: fq [--server URL] [--nats URL] [--token T] [--ca FILE] COMMAND [flags] [args]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "global flags (accepted before or after the command):")
	fmt.Fprintf(w, "  --server URL   admin door (env FQ_SERVER, default %s)\n", DefaultServer)
	fmt.Fprintf(w, "  --nats URL     NATS (env FQ_NATS_URL, default %s)\n", DefaultNATS)
	fmt.Fprintf(w, "  --token T      bearer token (env FQ_TOKEN, else the file FQ_TOKEN_FILE, else ./%s)\n", DefaultTokenFile)
	fmt.Fprintln(w, "  --ca FILE      PEM certificates to trust for https:// and NATS TLS instead of the system's (env FQ_CA)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  fq %s %s\n", c.name, c.synopsis)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "  fq version     (this build: version, commit, Go)")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "exit codes: 0 ok, 1 the server refused, 2 usage error, 3 cannot reach the node")
}

// ---------------------------------------------------------------------------
// Errors and exit codes

// usageError is exit 2: a bad flag, argument or environment value.
type usageError struct {
	msg string
	cmd *command // its synopsis is printed after the message
}

func (e usageError) Error() string { return e.msg }

// unreachableError is exit 3: the node could not be reached.
type unreachableError struct{ msg string }

func (e unreachableError) Error() string { return e.msg }

// errHelp: help was asked for and printed; exit 0.
var errHelp = errors.New("help")

func usagef(cmd *command, format string, args ...any) error {
	return usageError{msg: fmt.Sprintf(format, args...), cmd: cmd}
}

// report prints err the way its kind is printed and returns the exit code.
func (a *app) report(err error) int {
	if err == nil || errors.Is(err, errHelp) {
		return ExitOK
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(a.stderr, ue.msg)
		if ue.cmd != nil {
			fmt.Fprintf(a.stderr, "usage: fq %s %s\n", ue.cmd.name, ue.cmd.synopsis)
		}
		return ExitUsage
	}
	var une unreachableError
	if errors.As(err, &une) {
		fmt.Fprintln(a.stderr, une.msg)
		return ExitUnreachable
	}
	if e, ok := api.AsError(err); ok {
		// The server's message, exactly as it sent it.
		msg := e.Message
		if msg == "" {
			msg = string(e.Code)
		}
		fmt.Fprintln(a.stderr, msg)
		if e.Code == api.CodeUnauthenticated && a.noToken {
			fmt.Fprintf(a.stderr, "fq: no token found: give --token, FQ_TOKEN or FQ_TOKEN_FILE (./%s does not exist)\n", DefaultTokenFile)
		}
		return ExitRefused
	}
	if errors.Is(err, client.ErrUnreachable) {
		fmt.Fprintf(a.stderr, "fq: cannot reach a FlexiQ node over NATS at %s: %v\n", a.nats.value, err)
		return ExitUnreachable
	}
	fmt.Fprintln(a.stderr, "fq:", err)
	return ExitRefused
}

// ---------------------------------------------------------------------------
// Token

// resolveToken finds the token: --token, FQ_TOKEN, the file FQ_TOKEN_FILE,
// else ./flexiq-data/root.token. No token at all is not an error here: the
// request goes without one and the server's refusal says what is missing.
func (a *app) resolveToken() (string, error) {
	if a.tokenDone {
		return a.tokenVal, nil
	}
	var tok string
	switch {
	case a.token.fromFlag || a.token.fromEnv:
		tok = strings.TrimSpace(a.token.value)
		if tok == "" {
			return "", usageError{msg: a.source(&a.token) + ": must not be empty"}
		}
	case a.getenv("FQ_TOKEN_FILE") != "":
		file := a.getenv("FQ_TOKEN_FILE")
		data, err := os.ReadFile(file)
		if err != nil {
			return "", usageError{msg: fmt.Sprintf("FQ_TOKEN_FILE: cannot read the token: %v", err)}
		}
		tok = strings.TrimSpace(string(data))
		if tok == "" {
			return "", usageError{msg: fmt.Sprintf("FQ_TOKEN_FILE: %s is empty", file)}
		}
	default:
		data, err := os.ReadFile(DefaultTokenFile)
		switch {
		case errors.Is(err, os.ErrNotExist):
			a.noToken = true
		case err != nil:
			return "", usageError{msg: fmt.Sprintf("fq: cannot read the default token file: %v (give --token, FQ_TOKEN or FQ_TOKEN_FILE)", err)}
		default:
			tok = strings.TrimSpace(string(data))
			a.noToken = tok == ""
		}
	}
	a.tokenDone, a.tokenVal = true, tok
	return tok, nil
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
