package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// flags is one command's flag set (the standard library's), with the
// globals registered too so they may come after the command, and errors
// that name the flag as the user wrote it.
type flags struct {
	a   *app
	cmd *command // nil for the top level
	fs  *flag.FlagSet
	bad *badFlag // the value error of the last failed Set
	set map[string]bool
}

type badFlag struct {
	name string
	err  error
}

func (a *app) newFlags(cmd *command) *flags {
	name := "fq"
	if cmd != nil {
		name = "fq " + cmd.name
	}
	f := &flags{a: a, cmd: cmd, fs: flag.NewFlagSet(name, flag.ContinueOnError)}
	f.fs.SetOutput(io.Discard)
	f.fs.Usage = func() {}
	for _, s := range a.globals() {
		help := map[string]string{
			"server": "admin door URL (env FQ_SERVER)",
			"nats":   "NATS URL (env FQ_NATS_URL)",
			"token":  "bearer token (env FQ_TOKEN; else the file FQ_TOKEN_FILE; else ./" + DefaultTokenFile + ")",
			"ca":     "PEM certificates trusted for TLS instead of the system's (env FQ_CA)",
		}[s.flag]
		f.fs.Func(s.flag, help, func(v string) error {
			s.value, s.fromFlag = v, true
			return nil
		})
	}
	return f
}

// fn registers a flag whose value set parses; its error is kept so the
// message can name the flag as written.
func (f *flags) fn(name, usage string, set func(string) error) {
	f.fs.Func(name, usage, func(v string) error {
		if err := set(v); err != nil {
			f.bad = &badFlag{name: name, err: err}
			return err
		}
		return nil
	})
}

// String is a plain string flag.
func (f *flags) String(name, def, usage string) *string {
	p := new(string)
	*p = def
	f.fn(name, usage, func(v string) error { *p = v; return nil })
	return p
}

// Bool is a boolean flag (--json, or --json=false).
func (f *flags) Bool(name, usage string) *bool {
	p := new(bool)
	f.fs.BoolFunc(name, usage, func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			f.bad = &badFlag{name: name, err: fmt.Errorf("must be true or false, got %q", v)}
			return f.bad.err
		}
		*p = b
		return nil
	})
	return p
}

// Int64 is any integer: a negative limit is the server's to refuse.
func (f *flags) Int64(name, usage string) *int64 {
	p := new(int64)
	f.fn(name, usage, func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return fmt.Errorf("must be an integer, got %q", v)
		}
		*p = n
		return nil
	})
	return p
}

// PosInt is a client-side count, at least 1.
func (f *flags) PosInt(name string, def int, usage string) *int {
	p := new(int)
	*p = def
	f.fn(name, usage, func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return fmt.Errorf("must be an integer >= 1, got %q", v)
		}
		*p = n
		return nil
	})
	return p
}

// Duration is a Go duration (30s, 1h). Its text as written is kept in
// *text for flags whose value is sent on as text.
func (f *flags) Duration(name string, def time.Duration, usage string) (d *time.Duration, text *string) {
	d, text = new(time.Duration), new(string)
	*d = def
	f.fn(name, usage, func(v string) error {
		x, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("must be a duration such as 30s or 1h, got %q", v)
		}
		*d, *text = x, v
		return nil
	})
	return d, text
}

// JSON is a flag whose value must be valid JSON.
func (f *flags) JSON(name, usage string) *json.RawMessage {
	p := new(json.RawMessage)
	f.fn(name, usage, func(v string) error {
		if !json.Valid([]byte(v)) {
			var x any
			err := json.Unmarshal([]byte(v), &x)
			return fmt.Errorf("not valid JSON: %v", err)
		}
		*p = json.RawMessage(v)
		return nil
	})
	return p
}

// Enum is a flag that takes one of allowed.
func (f *flags) Enum(name string, allowed []string, usage string) *string {
	p := new(string)
	f.fn(name, usage, func(v string) error {
		for _, x := range allowed {
			if v == x {
				*p = v
				return nil
			}
		}
		return fmt.Errorf("must be %s, got %q", orList(allowed), v)
	})
	return p
}

func orList(xs []string) string {
	if len(xs) < 2 {
		return strings.Join(xs, "")
	}
	return strings.Join(xs[:len(xs)-1], ", ") + " or " + xs[len(xs)-1]
}

// given reports whether the flag was set on the command line.
func (f *flags) given(name string) bool { return f.set[name] }

// parse parses args. interspersed lets flags follow positional arguments
// (fq job show ID --json); without it parsing stops at the first argument
// that is not a flag (the command, or fq work's CMD).
func (f *flags) parse(args []string, interspersed bool) ([]string, error) {
	var pos []string
	rest := args
	for {
		if err := f.fs.Parse(rest); err != nil {
			return nil, f.parseError(err)
		}
		left := f.fs.Args()
		if !interspersed || len(left) == 0 {
			pos = append(pos, left...)
			break
		}
		consumed := rest[:len(rest)-len(left)]
		if len(consumed) > 0 && consumed[len(consumed)-1] == "--" {
			pos = append(pos, left...) // after "--" everything is an argument
			break
		}
		pos = append(pos, left[0])
		rest = left[1:]
	}
	f.set = map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { f.set[fl.Name] = true })
	return pos, nil
}

func (f *flags) parseError(err error) error {
	if errors.Is(err, flag.ErrHelp) {
		if f.cmd == nil {
			f.a.topUsage(f.a.stdout)
			return errHelp
		}
		fmt.Fprintf(f.a.stdout, "usage: fq %s %s\n", f.cmd.name, f.cmd.synopsis)
		var rows [][]string
		f.fs.VisitAll(func(fl *flag.Flag) {
			if fl.Name != "server" && fl.Name != "nats" && fl.Name != "token" {
				rows = append(rows, []string{"  --" + fl.Name, fl.Usage})
			}
		})
		if len(rows) > 0 {
			fmt.Fprintln(f.a.stdout, "\nflags:")
			printTable(f.a.stdout, rows)
		}
		fmt.Fprintln(f.a.stdout, "\nglobal flags --server, --nats and --token may come before or after the command (see fq help).")
		return errHelp
	}
	if f.bad != nil {
		return usageError{msg: fmt.Sprintf("%s: %v", written(f.a.args, f.bad.name), f.bad.err), cmd: f.cmd}
	}
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		if f.cmd == nil {
			return usageError{msg: written(f.a.args, name) + ": unknown flag (a command's flags go after the command; see fq help)"}
		}
		return usageError{msg: written(f.a.args, name) + ": unknown flag", cmd: f.cmd}
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return usageError{msg: written(f.a.args, name) + ": needs a value", cmd: f.cmd}
	}
	return usageError{msg: msg, cmd: f.cmd}
}

// written is flag name as the user wrote it in args: -name or --name.
func written(args []string, name string) string {
	for _, tok := range args {
		if tok == "--" {
			break
		}
		dashes := 0
		for dashes < 2 && dashes < len(tok) && tok[dashes] == '-' {
			dashes++
		}
		if dashes == 0 {
			continue
		}
		n, _, _ := strings.Cut(tok[dashes:], "=")
		if n == name {
			return tok[:dashes] + name
		}
	}
	return "--" + name
}

// ---------------------------------------------------------------------------
// Global URLs, checked when a command first needs them.

// serverURL is the admin door's base URL.
func (a *app) serverURL() (string, error) {
	v := a.server.value
	u, err := url.Parse(v)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return "", usageError{msg: fmt.Sprintf("%s: must be an http:// or https:// URL such as %s, got %q", a.source(&a.server), DefaultServer, v)}
	}
	return strings.TrimRight(v, "/"), nil
}

// natsURL is the NATS URL (a comma-separated list is allowed, as nats.go
// takes it).
func (a *app) natsURL() (string, error) {
	v := a.nats.value
	bad := usageError{msg: fmt.Sprintf("%s: must be a NATS URL such as %s, got %q", a.source(&a.nats), DefaultNATS, v)}
	n := 0
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		n++
		if !strings.Contains(part, "://") {
			if _, port, err := net.SplitHostPort(part); err != nil || port == "" {
				return "", bad
			}
			continue
		}
		u, err := url.Parse(part)
		if err != nil || u.Host == "" {
			return "", bad
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return "", bad
		}
	}
	if n == 0 {
		return "", bad
	}
	return v, nil
}
