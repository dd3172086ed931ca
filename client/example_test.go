package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/client"
	"github.com/flexiq/flexiq/node"
)

// A producer enqueues jobs, and tells a refusal it can act on (the
// namespace's queue is full: back off, retry later) from the rest.
func ExampleClient_Enqueue() {
	n, cleanup := startNode()
	defer cleanup()
	// The namespace holds at most one pending job (an operator's quota).
	adminCall(n, "PUT", "/v1/quota", `{"max_pending":1}`)

	c, err := client.Connect(n.NATSURL(), newToken(n, "producer"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	ctx := context.Background()
	for _, to := range []string{"ada@example.com", "bob@example.com"} {
		res, err := c.Enqueue(ctx, api.Job{
			Queue: "emails", Task: "send", Payload: json.RawMessage(`{"to":"` + to + `"}`),
		})
		var refused *api.Error
		switch {
		case errors.As(err, &refused) && refused.Reason == api.ReasonQueueFull:
			// Nothing was written. The same code, reason and message
			// reach every client: NATS, HTTP, gRPC and fq.
			fmt.Println("refused:", refused.Code, refused.Message)
		case err != nil:
			// Another refusal (*api.Error), or no node answered
			// (client.ErrUnreachable).
			log.Fatal(err)
		default:
			fmt.Println(to, res.Outcome)
		}
	}
	// Output:
	// ada@example.com enqueued
	// refused: RESOURCE_EXHAUSTED queue 'emails' is full: 1 pending >= max_pending 1
}

// A worker runs a handler on up to Concurrency jobs at once, acking each
// with the handler's result; Run stops gracefully when its context ends,
// once every job it took is acked.
func ExampleWorker() {
	n, cleanup := startNode()
	defer cleanup()
	ctx := context.Background()

	producer, err := client.Connect(n.NATSURL(), newToken(n, "producer"))
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()
	for i := 1; i <= 5; i++ {
		job := api.Job{Queue: "thumbnails", Task: "resize", Payload: json.RawMessage(fmt.Sprintf(`{"image":%d}`, i))}
		if _, err := producer.Enqueue(ctx, job); err != nil {
			log.Fatal(err)
		}
	}

	c, err := client.Connect(n.NATSURL(), newToken(n, "worker"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	run, stop := context.WithCancel(ctx)
	var (
		mu   sync.Mutex
		done []string
	)
	w := client.NewWorker(c, client.WorkerConfig{Queues: []string{"thumbnails"}, Concurrency: 3},
		func(ctx context.Context, job api.Job) (json.RawMessage, error) {
			mu.Lock()
			defer mu.Unlock()
			done = append(done, string(job.Payload))
			if len(done) == 5 {
				stop() // this example stops once all five ran
			}
			// A nil error acks the job with this result; an error nacks
			// it (retried after a backoff, unless it wraps
			// client.ErrNoRetry).
			return json.RawMessage(`{"resized":true}`), nil
		})
	if err := w.Run(run); err != nil {
		log.Fatal(err)
	}

	sort.Strings(done)
	for _, p := range done {
		fmt.Println("ran", p)
	}
	var usage struct {
		Usage struct{ Pending, Archived int64 }
	}
	if err := json.Unmarshal(adminCall(n, "GET", "/v1/usage", ""), &usage); err != nil {
		log.Fatal(err)
	}
	fmt.Println("pending:", usage.Usage.Pending, "completed:", usage.Usage.Archived)
	// Output:
	// ran {"image":1}
	// ran {"image":2}
	// ran {"image":3}
	// ran {"image":4}
	// ran {"image":5}
	// pending: 0 completed: 5
}

// startNode runs a whole FlexiQ node in this process for an example: an
// embedded NATS server and the admin door on free loopback ports, and a
// SQLite store in a temporary directory; cleanup stops it and removes the
// directory. In real use the node is fq-node, and a client only needs its
// NATS URL and a token.
func startNode() (n *node.Node, cleanup func()) {
	dir, err := os.MkdirTemp("", "flexiq-example-")
	if err != nil {
		log.Fatal(err)
	}
	cfg := node.Defaults()
	cfg.DataDir = dir
	cfg.NATSListen = "127.0.0.1:-1"
	cfg.AdminAddr = "127.0.0.1:0"
	cfg.GRPCAddr = "" // these examples use NATS only
	cfg.NodeID = "example"
	cfg.Maintenance = false
	n, err = node.Start(context.Background(), cfg)
	if err != nil {
		log.Fatal(err)
	}
	return n, func() {
		if err := n.Stop(context.Background()); err != nil {
			log.Fatal(err)
		}
		os.RemoveAll(dir)
	}
}

// newToken creates a token of role in the default namespace, as an
// operator does with `fq token create`.
func newToken(n *node.Node, role string) string {
	var out struct{ Token string }
	if err := json.Unmarshal(adminCall(n, "POST", "/v1/tokens", `{"namespace":"default","role":"`+role+`"}`), &out); err != nil {
		log.Fatal(err)
	}
	return out.Token
}

// adminCall makes an admin door call with the root token and returns the
// body of its (successful) reply.
func adminCall(n *node.Node, method, path, body string) []byte {
	var rd io.Reader
	if body != "" {
		rd = bytes.NewBufferString(body)
	}
	req, err := http.NewRequest(method, n.AdminURL()+path, rd)
	if err != nil {
		log.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+n.RootToken())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode/100 != 2 {
		log.Fatalf("%s %s: %d %s %v", method, path, resp.StatusCode, data, err)
	}
	return data
}

// A worker that runs many small jobs holds some ahead of its free slots
// (Prefetch): the next job starts as soon as a slot frees, without a
// claim's round trip in between. Prefetched jobs are claimed, so they
// count as running for max_running; a stop gives back those not started,
// their attempt not spent.
func ExampleWorkerConfig_prefetch() {
	n, cleanup := startNode()
	defer cleanup()
	ctx := context.Background()

	producer, err := client.Connect(n.NATSURL(), newToken(n, "producer"))
	if err != nil {
		log.Fatal(err)
	}
	defer producer.Close()
	jobs := make([]api.Job, 10)
	for i := range jobs {
		jobs[i] = api.Job{Queue: "pings", Task: "ping"}
	}
	if _, err := producer.EnqueueMany(ctx, jobs); err != nil {
		log.Fatal(err)
	}

	c, err := client.Connect(n.NATSURL(), newToken(n, "worker"))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	run, stop := context.WithCancel(ctx)
	var ran atomic.Int64
	w := client.NewWorker(c, client.WorkerConfig{Queues: []string{"pings"}, Concurrency: 1, Prefetch: 4},
		func(context.Context, api.Job) (json.RawMessage, error) {
			if ran.Add(1) == 3 {
				stop() // stop after three: the prefetched rest goes back
			}
			return nil, nil
		})
	if err := w.Run(run); err != nil {
		log.Fatal(err)
	}

	var usage struct {
		Usage struct{ Pending, Running, Archived int64 }
	}
	if err := json.Unmarshal(adminCall(n, "GET", "/v1/usage", ""), &usage); err != nil {
		log.Fatal(err)
	}
	fmt.Println("ran:", ran.Load(), "completed:", usage.Usage.Archived, "running:", usage.Usage.Running, "pending:", usage.Usage.Pending)
	// Output:
	// ran: 3 completed: 3 running: 0 pending: 7
}

// A handler doing long work watches its context. When the job's lease is
// lost (the worker's heartbeats did not reach a node in time, and another
// worker may be running the job now), the context ends with an
// *api.Error of reason LEASE_LOST as its cause, and whatever the handler
// returns is not sent.
func ExampleHandler_leaseLost() {
	work := func(ctx context.Context, job api.Job) (json.RawMessage, error) {
		for part := 0; part < 100; part++ {
			if err := context.Cause(ctx); err != nil {
				if e, ok := api.AsError(err); ok && e.Reason == api.ReasonLeaseLost {
					log.Printf("job %s: lease lost after %d parts; stopping", job.ID, part)
				}
				return nil, err
			}
			// ... one part of the work ...
		}
		return json.RawMessage(`{"parts":100}`), nil
	}
	_ = client.Handler(work)
}
