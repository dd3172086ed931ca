package client

import (
	"context"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/api"
)

// An enqueue request carries what a job sets and nothing else: a job of a
// queue, a task and a payload is those three fields on the wire, where
// api.Job's own encoding (a job as the node shows it) has every field.
func TestAnEnqueueSendsTheFieldsAJobSets(t *testing.T) {
	srv := startNATS(t)
	sent := make(chan []byte, 1)
	answering(t, srv, map[string]nats.MsgHandler{api.SubjectEnqueue: func(m *nats.Msg) {
		sent <- m.Data
		_ = m.Respond([]byte(`{"results":[{"id":"j1","outcome":"enqueued"}]}`))
	}})
	c, err := Connect(srv.ClientURL(), "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Enqueue(context.Background(), api.Job{Queue: "q", Task: "t", Payload: json.RawMessage(`{"a":1}`)}); err != nil {
		t.Fatal(err)
	}
	if got, want := string(<-sent), `{"jobs":[{"queue":"q","task":"t","payload":{"a":1}}]}`; got != want {
		t.Fatalf("an enqueue of a queue, a task and a payload sent\n%s\nwant\n%s", got, want)
	}
}

// What the node decodes from an enqueue request is the jobs the producer
// gave, every input field of them, set or not.
func TestAnEnqueueRequestDecodesToTheJobsGiven(t *testing.T) {
	at := time.Date(2026, 12, 5, 14, 30, 0, 123456000, time.UTC)
	attempts := int64(3)
	jobs := []api.Job{
		{ID: "j1", Queue: "q", Task: "t", Payload: json.RawMessage(`{"a":[1,2]}`), Priority: -5, RunAt: &at,
			MaxAttempts: &attempts, UniqueKey: "u", Debounce: &api.Debounce{Key: "d", WindowMS: 250}},
		{Queue: "q2", Task: "t2", DelayMS: 1500, Priority: 7},
		{Queue: "q3", Task: "t3", Payload: json.RawMessage(`null`)},
		{},
	}
	data, err := api.MarshalFast(enqueueBody(jobs))
	if err != nil {
		t.Fatal(err)
	}
	var got api.EnqueueRequest
	if err := api.Decode(data, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Jobs, jobs) {
		t.Fatalf("decoded\n%+v\nfrom %s, want\n%+v", got.Jobs, data, jobs)
	}
}

// Every call carries the token, from a header the calls share: calls made
// at once (under -race) each arrive with it, and none changes it.
func TestConcurrentCallsEachCarryTheToken(t *testing.T) {
	srv := startNATS(t)
	answering(t, srv, map[string]nats.MsgHandler{api.SubjectEnqueue: func(m *nats.Msg) {
		if got := m.Header.Get(api.HeaderAuthorization); got != "Bearer tok" {
			_ = m.Respond([]byte(`{"error":{"code":"UNAUTHENTICATED","message":"` + got + `"}}`))
			return
		}
		_ = m.Respond([]byte(`{"results":[{"id":"j1","outcome":"enqueued"}]}`))
	}})
	c, err := Connect(srv.ClientURL(), "tok")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	errs := make(chan error, 16)
	for range 16 {
		go func() {
			var err error
			for range 50 {
				if _, err = c.Enqueue(context.Background(), api.Job{Queue: "q", Task: "t"}); err != nil {
					break
				}
			}
			errs <- err
		}()
	}
	for range 16 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
