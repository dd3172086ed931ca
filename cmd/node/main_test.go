package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestFlagsAndEnvironmentTwins(t *testing.T) {
	cfg, err := parse(nil, env(map[string]string{
		"FLEXIQ_DATA_DIR": "/d", "FLEXIQ_QUOTA_CACHE_TTL": "500ms", "FLEXIQ_MAINTENANCE": "off", "FLEXIQ_CLEANUP_BATCH": "7",
	}), &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.DataDir != "/d" || cfg.QuotaCacheTTL != 500*time.Millisecond || cfg.Maintenance || cfg.CleanupBatch != 7 {
		t.Fatalf("env not applied: %+v", cfg)
	}
	// A flag wins over its variable.
	cfg, err = parse([]string{"--data-dir", "/f", "--archive-ttl", "1h"}, env(map[string]string{"FLEXIQ_DATA_DIR": "/d"}), &bytes.Buffer{})
	if err != nil || cfg.DataDir != "/f" || cfg.ArchiveTTL != time.Hour {
		t.Fatalf("flags: %+v %v", cfg, err)
	}
	// gRPC is turned off with "" (flag) or "off" (either).
	for _, args := range [][]string{{"--grpc-addr", ""}, {"--grpc-addr", "off"}} {
		if cfg, err := parse(args, env(nil), &bytes.Buffer{}); err != nil || cfg.GRPCAddr != "" {
			t.Fatalf("%v: grpc %q %v", args, cfg.GRPCAddr, err)
		}
	}
	if cfg, err := parse(nil, env(map[string]string{"FLEXIQ_GRPC_ADDR": "off"}), &bytes.Buffer{}); err != nil || cfg.GRPCAddr != "" {
		t.Fatalf("FLEXIQ_GRPC_ADDR=off: grpc %q %v", cfg.GRPCAddr, err)
	}
	// The refusal pace: <count>/s, or off.
	if cfg, err := parse([]string{"--refusal-pace", "50/s"}, env(nil), &bytes.Buffer{}); err != nil ||
		cfg.RefusalPace.Burst != 500 || cfg.RefusalPace.Interval != 20*time.Millisecond || cfg.RefusalPace.MaxHold != time.Second {
		t.Fatalf("--refusal-pace 50/s: %+v %v", cfg.RefusalPace, err)
	}
	if cfg, err := parse(nil, env(map[string]string{"FLEXIQ_REFUSAL_PACE": "off"}), &bytes.Buffer{}); err != nil || cfg.RefusalPace.Interval != 0 {
		t.Fatalf("FLEXIQ_REFUSAL_PACE=off: %+v %v", cfg.RefusalPace, err)
	}
	// Defaults of docs/configuration.md.
	cfg, _ = parse(nil, env(nil), &bytes.Buffer{})
	if cfg.RefusalPace.Burst != 1000 || cfg.RefusalPace.Interval != 10*time.Millisecond {
		t.Fatalf("default refusal pace: %+v", cfg.RefusalPace)
	}
	if cfg.DataDir != "./flexiq-data" || cfg.NATSListen != "127.0.0.1:4222" || cfg.AdminAddr != "127.0.0.1:7070" ||
		!cfg.Maintenance || cfg.ArchiveTTL != 168*time.Hour || cfg.DeadTTL != 720*time.Hour ||
		cfg.CleanupInterval != 30*time.Second || cfg.CleanupBatch != 1000 || cfg.QuotaCacheTTL != 2*time.Second {
		t.Fatalf("defaults: %+v", cfg)
	}
}

func TestBadValuesExit2NamingTheFlagOrVariable(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		name string
	}{
		{[]string{"--archive-ttl", "soon"}, nil, "--archive-ttl"},
		{[]string{"--cleanup-batch=0"}, nil, "--cleanup-batch"},
		{[]string{"-cleanup-batch", "0"}, nil, " -cleanup-batch"},
		{[]string{"--no-such-flag"}, nil, "unknown flag --no-such-flag"},
		{[]string{"--store", "mysql://x"}, nil, `--store: store URL "mysql://x": unknown scheme "mysql"`},
		{[]string{"--store", "sqlite://x.db?synchronous=MAYBE"}, nil, "--store: "},
		{nil, map[string]string{"FLEXIQ_STORE": "sqlite://"}, "FLEXIQ_STORE: "},
		{nil, map[string]string{"FLEXIQ_DEAD_TTL": "-1h"}, "FLEXIQ_DEAD_TTL"},
		{nil, map[string]string{"FLEXIQ_MAINTENANCE": "maybe"}, "FLEXIQ_MAINTENANCE"},
		{nil, map[string]string{"FLEXIQ_CLEANUP_BATCH": "many"}, "FLEXIQ_CLEANUP_BATCH"},
		{[]string{"--refusal-pace", "100/m"}, nil, `--refusal-pace: must be off or <count>/s with count 1-1000000 (e.g. 100/s), got "100/m"`},
		{[]string{"--refusal-pace", "0/s"}, nil, "--refusal-pace"},
		{nil, map[string]string{"FLEXIQ_REFUSAL_PACE": "fast"}, `FLEXIQ_REFUSAL_PACE: must be off or <count>/s`},
		{[]string{"--log-level", "chatty"}, nil, `--log-level: must be debug, info, warn or error, got "chatty"`},
		{nil, map[string]string{"FLEXIQ_LOG_LEVEL": "trace"}, `FLEXIQ_LOG_LEVEL: must be debug, info, warn or error`},
		// SQLite cannot be shared: a cluster flag with it names both.
		{[]string{"--cluster-listen", "127.0.0.1:6222"}, nil, "--cluster-listen needs a shared store: the default store"},
		{[]string{"--routes", "nats://127.0.0.1:6222", "--store", "sqlite://x.db"}, nil, "--routes needs a shared store: --store is SQLite"},
		{nil, map[string]string{"FLEXIQ_CLUSTER_LISTEN": "127.0.0.1:6222", "FLEXIQ_STORE": "sqlite://x.db"}, "FLEXIQ_CLUSTER_LISTEN needs a shared store: FLEXIQ_STORE is SQLite"},
		{[]string{"--routes", "127.0.0.1:6222", "--store", "redis://127.0.0.1:1"}, nil, "--routes: \"127.0.0.1:6222\" is not a route URL"},
		{[]string{"--nats-tls-cert", "c.pem"}, nil, "--nats-tls-cert and FLEXIQ_NATS_TLS_KEY go together"},
		{[]string{"--tls-key", "k.pem"}, nil, "FLEXIQ_TLS_CERT and --tls-key go together"},
		{nil, map[string]string{"FLEXIQ_TLS_CERT": "c.pem"}, "FLEXIQ_TLS_CERT and FLEXIQ_TLS_KEY go together"},
		{[]string{"--nats-creds", "x.creds"}, nil, "--nats-creds goes with FLEXIQ_NATS_URL"},
		{[]string{"--nats-url", "nats://127.0.0.1:4222", "--nats-tls-cert", "c.pem", "--nats-tls-key", "k.pem"}, nil,
			"--nats-tls-cert and --nats-tls-key are the embedded server's; with --nats-url the NATS server is yours"},
	} {
		var out, errb bytes.Buffer
		code := realMain(tc.args, env(tc.env), &out, &errb)
		if code != 2 || !strings.Contains(errb.String(), tc.name) || strings.Count(errb.String(), "\n") != 1 {
			t.Errorf("%v %v: exit %d, stderr %q; want 2 and one line naming %s", tc.args, tc.env, code, errb.String(), tc.name)
		}
	}
}

func TestUnreachableStoreExits1(t *testing.T) {
	var out, errb bytes.Buffer
	code := realMain([]string{"--data-dir", t.TempDir(), "--store", "postgres://nobody@127.0.0.1:1/x?connect_timeout=1",
		"--nats-listen", "127.0.0.1:-1", "--admin-addr", "127.0.0.1:0"}, env(nil), &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "store") {
		t.Fatalf("exit %d, stderr %q; want 1 with a clear message", code, errb.String())
	}
	code = realMain([]string{"--data-dir", t.TempDir(), "--nats-url", "nats://127.0.0.1:1", "--admin-addr", "127.0.0.1:0"}, env(nil), &out, &errb)
	if code != 1 || !strings.Contains(errb.String(), "NATS") {
		t.Fatalf("exit %d, stderr %q; want 1 naming NATS", code, errb.String())
	}
}

// fq-node --version prints the build and starts nothing.
func TestVersion(t *testing.T) {
	for _, arg := range []string{"--version", "-version", "version"} {
		var out, errb bytes.Buffer
		if code := realMain([]string{arg}, func(string) string { return "" }, &out, &errb); code != 0 {
			t.Fatalf("%s: exit %d: %s", arg, code, errb.String())
		}
		if !strings.HasPrefix(out.String(), "fq-node ") || !strings.Contains(out.String(), "go1.") {
			t.Fatalf("%s printed %q", arg, out.String())
		}
	}
}
