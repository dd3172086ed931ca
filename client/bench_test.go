package client

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/api"
)

// BenchmarkEnqueueCall is the client's side of a single-job enqueue: 32
// producers on one client, or one, against a responder that answers at
// once.
// What it measures is mostly the client's and the server's CPU a call;
// allocs/op is the client's and the responder's.
//
//	go test -run '^$' -bench EnqueueCall -benchmem ./client
func BenchmarkEnqueueCall(b *testing.B) {
	b.Run("producers=32", func(b *testing.B) { benchEnqueueCall(b, 16) })
	b.Run("producers=1", func(b *testing.B) { benchEnqueueCall(b, 0) })
}

// benchEnqueueCall runs parallelism times GOMAXPROCS producers, or one
// when parallelism is 0.
func benchEnqueueCall(b *testing.B, parallelism int) {
	srv := startNATS(b)
	node, err := nats.Connect(srv.ClientURL())
	if err != nil {
		b.Fatal(err)
	}
	defer node.Close()
	reply := []byte(`{"results":[{"id":"j1","outcome":"enqueued"}]}`)
	if _, err := node.Subscribe(api.SubjectEnqueue, func(m *nats.Msg) { _ = m.Respond(reply) }); err != nil {
		b.Fatal(err)
	}
	if err := node.Flush(); err != nil {
		b.Fatal(err)
	}
	c, err := Connect(srv.ClientURL(), "tok")
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	job := api.Job{Queue: "q", Task: "t", Payload: []byte(`{"bench":true}`)}
	ctx := context.Background()
	b.ReportAllocs()
	if parallelism == 0 {
		for b.Loop() {
			if _, err := c.Enqueue(ctx, job); err != nil {
				b.Fatal(err)
			}
		}
		return
	}
	b.SetParallelism(parallelism)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.Enqueue(ctx, job); err != nil {
				b.Error(err)
				return
			}
		}
	})
}
