// Command fq-node runs a FlexiQ node. With no flags it is a whole
// single-node system: an embedded NATS server on 127.0.0.1:4222, a SQLite
// store under ./flexiq-data, the admin door on 127.0.0.1:7070, maintenance
// on. Every flag has an environment twin (docs/configuration.md).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/oklog/run"

	"github.com/flexiq/flexiq/actors"
	"github.com/flexiq/flexiq/bus"
	"github.com/flexiq/flexiq/internal/buildinfo"
	"github.com/flexiq/flexiq/internal/redact"
	"github.com/flexiq/flexiq/node"
	"github.com/flexiq/flexiq/store/open"
)

func main() {
	if pct, ok := node.GCPercent(os.Getenv); ok {
		debug.SetGCPercent(pct)
	}
	os.Exit(realMain(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// usageError is a bad flag or value: exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func realMain(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 1 && (args[0] == "--version" || args[0] == "-version" || args[0] == "version") {
		fmt.Fprintln(stdout, "fq-node "+buildinfo.String())
		return 0
	}
	natsConfig := len(args) > 0 && args[0] == "nats-config"
	if natsConfig {
		args = args[1:]
	}
	cfg, err := parse(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintln(stderr, "fq-node:", err)
		return 2
	}
	if natsConfig {
		return printNATSConfig(cfg, stdout, stderr)
	}
	ctx := context.Background()
	n, err := node.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "fq-node:", err)
		return 1
	}
	fmt.Fprintf(stdout, "FlexiQ node %s\n", n.ID())
	cfg.Log.Info("FlexiQ node started", "node", n.ID(), "build", buildinfo.String())
	fmt.Fprintf(stdout, "  store:      %s\n", storeLabel(cfg))
	fmt.Fprintf(stdout, "  nats:       %s%s\n", redact.URL(n.NATSURL()), map[bool]string{true: " (embedded, authenticated)", false: ""}[cfg.NATSURL == ""])
	fmt.Fprintf(stdout, "  admin door: %s\n", n.AdminURL())
	grpcLine := n.GRPCAddr()
	switch {
	case grpcLine == "":
		grpcLine = "off (--grpc-addr empty)"
	case cfg.TLSCert != "":
		grpcLine += " (TLS)"
	}
	fmt.Fprintf(stdout, "  grpc:       %s\n", grpcLine)
	if f := n.TokenFile(); f != "" {
		fmt.Fprintf(stdout, "  root token: written to %s\n", f)
	} else {
		fmt.Fprintf(stdout, "  root token: from --root-token / FLEXIQ_ROOT_TOKEN\n")
	}
	switch {
	case n.ClusterAddr() != "":
		fmt.Fprintf(stdout, "  cluster:    %s routes on %s, %d route(s) given\n", cfg.ClusterName, n.ClusterAddr(), len(cfg.Routes))
	case n.Clustered():
		fmt.Fprintf(stdout, "  cluster:    shares its store (no routes of its own)\n")
	default:
		fmt.Fprintf(stdout, "  cluster:    none (a single node)\n")
	}
	if cfg.ClusterSecret == "" {
		fmt.Fprintf(stdout, "  cluster secret: in %s\n", filepath.Join(cfg.DataDir, "cluster.secret"))
	}
	fmt.Fprintf(stdout, "  maintenance: %v\n", cfg.Maintenance)

	var g run.Group
	g.Add(run.SignalHandler(ctx, os.Interrupt, syscall.SIGTERM))
	{
		// The node runs until interrupted; its Stop orders the shutdown
		// (admin door, service drain, actors, NATS, store) within 5 s.
		done := make(chan struct{})
		g.Add(func() error {
			<-done
			return nil
		}, func(error) {
			stopCtx, cancel := context.WithTimeout(context.Background(), 4500*time.Millisecond)
			defer cancel()
			if err := n.Stop(stopCtx); err != nil {
				cfg.Log.Error("unclean stop", "err", err)
			}
			close(done)
		})
	}
	err = g.Run()
	var sig run.SignalError
	if err != nil && !errors.As(err, &sig) {
		fmt.Fprintln(stderr, "fq-node:", err)
		return 1
	}
	fmt.Fprintln(stdout, "stopped")
	return 0
}

// printNATSConfig prints the configuration of an external NATS server for
// this cluster secret (fq-node nats-config): see docs/security.md "An
// external NATS server". The secret itself is not printed: the server
// reads it from its environment.
func printNATSConfig(cfg node.Config, stdout, stderr io.Writer) int {
	secret, err := node.ClusterSecretOf(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "fq-node:", err)
		return 1
	}
	conf, err := bus.ExternalServerConfig(secret, cfg.NATSListen)
	if err != nil {
		fmt.Fprintln(stderr, "fq-node:", err)
		return 1
	}
	fmt.Fprint(stdout, conf)
	return 0
}

// storeLabel is the store URL as the banner shows it: never with its
// password (docs/security.md).
func storeLabel(cfg node.Config) string {
	if cfg.Store == "" {
		return "sqlite://" + cfg.DataDir + "/flexiq.db"
	}
	return redact.URL(cfg.Store)
}

// parse reads flags, each with its environment twin; a flag wins over its
// variable. A bad value names the flag or variable as the user wrote it.
func parse(args []string, getenv func(string) string, stderr io.Writer) (node.Config, error) {
	cfg := node.Defaults()
	fs := flag.NewFlagSet("fq-node", flag.ContinueOnError)
	// A bad flag is one line (printed by the caller), not the usage text.
	fs.SetOutput(io.Discard)

	type strOpt struct {
		flag, env, help string
		dst             *string
	}
	type durOpt struct {
		flag, env, help string
		dst             *time.Duration
	}
	var routes string
	strs := []strOpt{
		{"data-dir", "FLEXIQ_DATA_DIR", "data directory", &cfg.DataDir},
		{"store", "FLEXIQ_STORE", "store URL: sqlite://<path>, postgres://… or redis://… (default sqlite://<data-dir>/flexiq.db)", &cfg.Store},
		{"nats-url", "FLEXIQ_NATS_URL", "external NATS URL (empty: run an embedded server)", &cfg.NATSURL},
		{"nats-listen", "FLEXIQ_NATS_LISTEN", "embedded NATS server address", &cfg.NATSListen},
		{"admin-addr", "FLEXIQ_ADMIN_ADDR", "admin door (HTTP) address", &cfg.AdminAddr},
		{"grpc-addr", "FLEXIQ_GRPC_ADDR", "gRPC address (empty or off disables)", &cfg.GRPCAddr},
		{"node-id", "FLEXIQ_NODE_ID", "node id (default hostname + random suffix)", &cfg.NodeID},
		{"root-token", "FLEXIQ_ROOT_TOKEN", "root token (default: generated into <data-dir>/root.token)", &cfg.RootToken},
		{"cluster-listen", "FLEXIQ_CLUSTER_LISTEN", "embedded NATS server's route listener, e.g. 127.0.0.1:6222 (empty: no cluster)", &cfg.ClusterListen},
		{"routes", "FLEXIQ_ROUTES", "comma-separated route URLs of other nodes' embedded servers (nats://127.0.0.1:6223,…)", &routes},
		{"cluster-name", "FLEXIQ_CLUSTER_NAME", "NATS cluster name", &cfg.ClusterName},
		{"cluster-secret", "FLEXIQ_CLUSTER_SECRET", "credential shared by every node of a cluster (default: generated into <data-dir>/cluster.secret)", &cfg.ClusterSecret},
		{"nats-creds", "FLEXIQ_NATS_CREDS", "with --nats-url: NATS credentials file for the node's connection", &cfg.NATSCreds},
		{"nats-tls-cert", "FLEXIQ_NATS_TLS_CERT", "TLS certificate of the embedded server's client and route listeners", &cfg.NATSTLSCert},
		{"nats-tls-key", "FLEXIQ_NATS_TLS_KEY", "TLS key of the embedded server's client and route listeners", &cfg.NATSTLSKey},
		{"tls-cert", "FLEXIQ_TLS_CERT", "TLS certificate of the admin door (HTTPS) and gRPC; read again when it changes", &cfg.TLSCert},
		{"tls-key", "FLEXIQ_TLS_KEY", "TLS key of the admin door (HTTPS) and gRPC", &cfg.TLSKey},
	}
	durs := []durOpt{
		{"archive-ttl", "FLEXIQ_ARCHIVE_TTL", "how long completed jobs are kept", &cfg.ArchiveTTL},
		{"dead-ttl", "FLEXIQ_DEAD_TTL", "how long dead letters are kept", &cfg.DeadTTL},
		{"cleanup-interval", "FLEXIQ_CLEANUP_INTERVAL", "retention tick", &cfg.CleanupInterval},
		{"quota-cache-ttl", "FLEXIQ_QUOTA_CACHE_TTL", "longest a node trusts a cached quota", &cfg.QuotaCacheTTL},
		{"sample-interval", "FLEXIQ_SAMPLE_INTERVAL", "how often the dashboard's usage history is sampled and the quota alarms evaluated", &cfg.SampleInterval},
		{"cluster-join-wait", "FLEXIQ_CLUSTER_JOIN_WAIT", "longest a starting node waits for routes to every live member before it takes namespaces anyway", &cfg.ClusterJoinWait},
	}
	// Environment first, so flags override it.
	for _, o := range strs {
		if v := getenv(o.env); v != "" {
			*o.dst = v
		}
		fs.StringVar(o.dst, o.flag, *o.dst, o.help+" (env "+o.env+")")
	}
	for _, o := range durs {
		if v := getenv(o.env); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return cfg, usageError{fmt.Sprintf("%s: must be a positive duration such as 30s or 168h, got %q", o.env, v)}
			}
			*o.dst = d
		}
		fs.Var(positiveDuration{o.dst}, o.flag, o.help+" (env "+o.env+")")
	}
	if v := getenv("FLEXIQ_CLEANUP_BATCH"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return cfg, usageError{fmt.Sprintf("FLEXIQ_CLEANUP_BATCH: must be an integer >= 1, got %q", v)}
		}
		cfg.CleanupBatch = n
	}
	fs.Var(positiveInt{&cfg.CleanupBatch}, "cleanup-batch", "rows deleted per namespace per kind per tick (env FLEXIQ_CLEANUP_BATCH)")
	if v := getenv("FLEXIQ_REFUSAL_PACE"); v != "" {
		if err := (refusalPace{&cfg.RefusalPace}).Set(v); err != nil {
			return cfg, usageError{"FLEXIQ_REFUSAL_PACE: " + err.Error()}
		}
	}
	fs.Var(refusalPace{&cfg.RefusalPace}, "refusal-pace", "how fast a namespace's quota refusals are answered past a burst of ten seconds' worth: <count>/s, or off (env FLEXIQ_REFUSAL_PACE)")
	if v := getenv("FLEXIQ_MAINTENANCE"); v != "" {
		switch strings.ToLower(v) {
		case "on", "1", "true", "yes":
			cfg.Maintenance = true
		case "off", "0", "false", "no":
			cfg.Maintenance = false
		default:
			return cfg, usageError{fmt.Sprintf("FLEXIQ_MAINTENANCE: must be on or off, got %q", v)}
		}
	}
	level := slog.LevelInfo
	if v := getenv("FLEXIQ_LOG_LEVEL"); v != "" {
		if err := (logLevel{&level}).Set(v); err != nil {
			return cfg, usageError{"FLEXIQ_LOG_LEVEL: " + err.Error()}
		}
	}
	fs.Var(logLevel{&level}, "log-level", "least level logged: debug (adds the embedded NATS server's own reports), info, warn or error (env FLEXIQ_LOG_LEVEL)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(stderr)
			fmt.Fprintln(stderr, "usage: fq-node [flags]   (every flag also has an environment variable)")
			fs.PrintDefaults()
			return cfg, err
		}
		return cfg, usageError{flagError(err, args)}
	}
	if fs.NArg() > 0 {
		return cfg, usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	cfg.Log = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	// name is how the user gave an option: the flag when set, else its
	// environment variable.
	name := func(flagName, env string) string {
		n := env
		fs.Visit(func(f *flag.Flag) {
			if f.Name == flagName {
				n = "--" + flagName
			}
		})
		return n
	}
	if cfg.Store != "" {
		if err := open.Check(cfg.Store); err != nil {
			return cfg, usageError{fmt.Sprintf("%s: %v", name("store", "FLEXIQ_STORE"), err)}
		}
	}
	// An empty variable reads as unset, so the environment turns gRPC off
	// with "off" (the flag takes "" too).
	if cfg.GRPCAddr == "off" {
		cfg.GRPCAddr = ""
	}
	for _, r := range strings.Split(routes, ",") {
		if r = strings.TrimSpace(r); r == "" {
			continue
		}
		u, err := url.Parse(r)
		if err != nil || u.Host == "" || (u.Scheme != "nats" && u.Scheme != "nats-route" && u.Scheme != "tls") {
			return cfg, usageError{fmt.Sprintf("%s: %q is not a route URL such as nats://127.0.0.1:6222", name("routes", "FLEXIQ_ROUTES"), r)}
		}
		cfg.Routes = append(cfg.Routes, r)
	}
	clustered := cfg.ClusterListen != "" || len(cfg.Routes) > 0
	if clustered && (cfg.Store == "" || open.IsSQLite(cfg.Store)) {
		opt := name("cluster-listen", "FLEXIQ_CLUSTER_LISTEN")
		if cfg.ClusterListen == "" {
			opt = name("routes", "FLEXIQ_ROUTES")
		}
		return cfg, usageError{fmt.Sprintf("%s needs a shared store: %s is SQLite, which one node owns; use postgres:// or redis://", opt, storeOpt(cfg, name))}
	}
	if clustered && cfg.NATSURL != "" {
		return cfg, usageError{fmt.Sprintf("%s: routes are the embedded server's; with %s the cluster is the external NATS server's", name("cluster-listen", "FLEXIQ_CLUSTER_LISTEN"), name("nats-url", "FLEXIQ_NATS_URL"))}
	}
	if (cfg.NATSTLSCert == "") != (cfg.NATSTLSKey == "") {
		return cfg, usageError{fmt.Sprintf("%s and %s go together", name("nats-tls-cert", "FLEXIQ_NATS_TLS_CERT"), name("nats-tls-key", "FLEXIQ_NATS_TLS_KEY"))}
	}
	if (cfg.TLSCert == "") != (cfg.TLSKey == "") {
		return cfg, usageError{fmt.Sprintf("%s and %s go together", name("tls-cert", "FLEXIQ_TLS_CERT"), name("tls-key", "FLEXIQ_TLS_KEY"))}
	}
	if cfg.NATSTLSCert != "" && cfg.NATSURL != "" {
		// Silently serving without it would leave an operator believing
		// the bus is encrypted.
		return cfg, usageError{fmt.Sprintf("%s and %s are the embedded server's; with %s the NATS server is yours: give it TLS in its own configuration and reach it with a tls:// URL", name("nats-tls-cert", "FLEXIQ_NATS_TLS_CERT"), name("nats-tls-key", "FLEXIQ_NATS_TLS_KEY"), name("nats-url", "FLEXIQ_NATS_URL"))}
	}
	if cfg.NATSCreds != "" && cfg.NATSURL == "" {
		return cfg, usageError{fmt.Sprintf("%s goes with %s (an external NATS server)", name("nats-creds", "FLEXIQ_NATS_CREDS"), name("nats-url", "FLEXIQ_NATS_URL"))}
	}
	return cfg, nil
}

// storeOpt names the store option as given ("--store", "FLEXIQ_STORE", or
// the default).
func storeOpt(cfg node.Config, name func(string, string) string) string {
	if cfg.Store == "" {
		return "the default store (sqlite://<data-dir>/flexiq.db)"
	}
	return name("store", "FLEXIQ_STORE")
}

// flagError words a flag package error with the flag as the user wrote it:
// the package says "-archive-ttl" for "--archive-ttl".
func flagError(err error, args []string) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		msg = "unknown flag -" + name
	}
	for _, a := range args {
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, _, _ := strings.Cut(a[2:], "=")
		i := strings.Index(msg, " -"+name)
		if i < 0 {
			continue
		}
		rest := msg[i+2+len(name):]
		if rest == "" || rest[0] == ':' || rest[0] == ' ' {
			return msg[:i] + " --" + name + rest
		}
	}
	return msg
}

type positiveDuration struct{ d *time.Duration }

func (p positiveDuration) String() string {
	if p.d == nil {
		return ""
	}
	return p.d.String()
}

func (p positiveDuration) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		return fmt.Errorf("must be a positive duration such as 30s or 168h, got %q", s)
	}
	*p.d = d
	return nil
}

// refusalPace is --refusal-pace: off, or <count>/s, a burst of 10 × count
// refusals answered at once and then count a second, each held at most
// a second (docs/protocol.md, Refusals are paced).
type refusalPace struct{ p *actors.Pace }

// maxRefusalPace bounds --refusal-pace's count.
const maxRefusalPace = 1_000_000

func (r refusalPace) String() string {
	if r.p == nil || r.p.Interval <= 0 {
		return "off"
	}
	return strconv.Itoa(int(time.Second/r.p.Interval)) + "/s"
}

func (r refusalPace) Set(s string) error {
	if s == "off" {
		*r.p = actors.Pace{}
		return nil
	}
	count, ok := strings.CutSuffix(s, "/s")
	n, err := strconv.Atoi(count)
	if !ok || err != nil || n < 1 || n > maxRefusalPace || strings.HasPrefix(count, "+") {
		return fmt.Errorf("must be off or <count>/s with count 1-%d (e.g. 100/s), got %q", maxRefusalPace, s)
	}
	*r.p = actors.PaceOf(n)
	return nil
}

// logLevel is --log-level: one of slog's four level names, in any case.
type logLevel struct{ l *slog.Level }

func (l logLevel) String() string {
	if l.l == nil {
		return "" // the zero value: flag then shows the default
	}
	return strings.ToLower(l.l.String())
}

func (l logLevel) Set(s string) error {
	switch strings.ToLower(s) {
	case "debug":
		*l.l = slog.LevelDebug
	case "info":
		*l.l = slog.LevelInfo
	case "warn":
		*l.l = slog.LevelWarn
	case "error":
		*l.l = slog.LevelError
	default:
		return fmt.Errorf("must be debug, info, warn or error, got %q", s)
	}
	return nil
}

type positiveInt struct{ n *int }

func (p positiveInt) String() string {
	if p.n == nil {
		return ""
	}
	return strconv.Itoa(*p.n)
}

func (p positiveInt) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 {
		return fmt.Errorf("must be an integer >= 1, got %q", s)
	}
	*p.n = n
	return nil
}
