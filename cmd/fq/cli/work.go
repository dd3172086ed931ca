package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/client"
)

// maxErrorTail bounds the stderr a failed command's nack carries.
const maxErrorTail = 4096

func (a *app) work(cmd *command, args []string) error {
	f := a.newFlags(cmd)
	queues := f.String("queue", "", "queue to work, or several separated by commas (required)")
	concurrency := f.PosInt("concurrency", 1, "jobs run at once (default 1)")
	lease, _ := f.Duration("lease", 30*time.Second, "lease of each claimed job, extended by heartbeats (default 30s)")
	maxJobs := f.Int64("max-jobs", "stop after this many jobs (0: run until SIGINT/SIGTERM)")
	// Parsing stops at the first argument that is not a flag: the command.
	argv, err := f.parse(args, false)
	if err != nil {
		return err
	}
	if *queues == "" {
		return usagef(cmd, "fq work: --queue is required")
	}
	if *lease <= 0 {
		return usagef(cmd, "%s: must be a positive duration, got %s", written(a.args, "lease"), *lease)
	}
	if *maxJobs < 0 {
		return usagef(cmd, "%s: must be >= 0, got %d", written(a.args, "max-jobs"), *maxJobs)
	}
	var qs []string
	for _, q := range strings.Split(*queues, ",") {
		if q = strings.TrimSpace(q); q != "" {
			qs = append(qs, q)
		}
	}
	if len(argv) > 0 {
		if _, err := exec.LookPath(argv[0]); err != nil {
			return usagef(cmd, "fq work: cannot run %q: %v", argv[0], err)
		}
	}

	c, err := a.connect(nats.MaxReconnects(-1), nats.ReconnectWait(time.Second))
	if err != nil {
		return err
	}
	defer c.Close()
	// Check the token and the queue names before working: otherwise every
	// claim would fail the same way, forever.
	for _, q := range qs {
		if err := api.CheckName("queue", q); err != nil {
			return err
		}
	}
	if err := probeWorker(a.ctx, c); err != nil {
		return err
	}

	ctx, stopSignals := signal.NotifyContext(a.ctx, os.Interrupt, syscall.SIGTERM)
	defer stopSignals()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-ctx.Done()
		stopSignals() // a second signal kills at once
	}()

	var (
		outMu sync.Mutex
		done  atomic.Int64
	)
	finished := func() {
		if n := done.Add(1); *maxJobs > 0 && n >= *maxJobs {
			cancel()
		}
	}
	handler := func(_ context.Context, job api.Job) (json.RawMessage, error) {
		defer finished()
		if len(argv) == 0 {
			line, err := api.Marshal(job)
			if err != nil {
				return nil, err
			}
			outMu.Lock()
			fmt.Fprintf(a.stdout, "%s\n", line)
			outMu.Unlock()
			return nil, nil
		}
		result, err := runJob(argv, job)
		outMu.Lock()
		if err != nil {
			fmt.Fprintf(a.stdout, "%s failed: %s\n", job.ID, firstLine(err.Error()))
		} else {
			fmt.Fprintf(a.stdout, "%s done\n", job.ID)
		}
		outMu.Unlock()
		return result, err
	}
	host, _ := os.Hostname()
	w := client.NewWorker(c, client.WorkerConfig{
		Queues:      qs,
		Concurrency: *concurrency,
		Lease:       *lease,
		Name:        fmt.Sprintf("fq-%s-%d", host, os.Getpid()),
		Log:         slog.New(slog.NewTextHandler(a.stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}, handler)
	return w.Run(ctx)
}

// probeWorker checks that the token may work jobs: a heartbeat naming no
// job passes authentication and the role check, then is refused as
// INVALID_ARGUMENT for its empty list.
func probeWorker(ctx context.Context, c *client.Client) error {
	_, err := c.Heartbeat(ctx, api.DefaultLeaseMS)
	if e, ok := api.AsError(err); ok && e.Code == api.CodeInvalidArgument {
		return nil
	}
	return err
}

// runJob runs argv with the payload on stdin. Exit 0 acks with stdout as
// the result (JSON as is, other text as a JSON string, nothing as no
// result); any other exit nacks with the tail of stderr.
func runJob(argv []string, job api.Job) (json.RawMessage, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = bytes.NewReader(job.Payload)
	cmd.Env = append(os.Environ(),
		"FQ_JOB_ID="+job.ID,
		"FQ_JOB_QUEUE="+job.Queue,
		"FQ_JOB_TASK="+job.Task,
		"FQ_JOB_ATTEMPT="+strconv.FormatInt(job.Attempt, 10),
	)
	var stdout bytes.Buffer
	stderr := &tailBuffer{max: maxErrorTail}
	cmd.Stdout, cmd.Stderr = &stdout, stderr
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		var exit *exec.ExitError
		switch {
		case msg != "":
		case errors.As(err, &exit):
			msg = "command failed: " + exit.String()
		default:
			msg = "command failed: " + err.Error()
		}
		return nil, errors.New(msg)
	}
	out := bytes.TrimSpace(stdout.Bytes())
	switch {
	case len(out) == 0:
		return nil, nil
	case json.Valid(out):
		return json.RawMessage(out), nil
	default:
		return jsonString(string(out)), nil
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.buf) }
