package e2e

import (
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/internal/testserver"
	"github.com/flexiq/flexiq/node"
	"github.com/flexiq/flexiq/store"
	redisstore "github.com/flexiq/flexiq/store/redis"
)

// A node on Redis writes job hashes every live node on the store reads:
// with their whole dispatch-order member (am) while a node built before
// job formats were told is live, with the order key (ak) and every field
// while the oldest live node reads store.JobFormatOrderKey, and lean,
// without what it holds elsewhere or at its defaults (store.JobFormat),
// once every live node reads that: a rolling upgrade never leaves an
// older node a job it cannot read.
func TestRedisJobHashesWaitForEveryNodeToReadThem(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		url := testserver.Redis(t)
		ctx := t.Context()
		rs, err := redisstore.Open(ctx, url, redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		// Older nodes' rows: one tells no job format, one the format
		// before lean. Not ready, so no partition is placed on them.
		for _, m := range []store.MemberHeartbeatParams{
			{Node: "older"}, {Node: "old", Info: store.MemberInfo{JobFormat: store.JobFormatOrderKey}},
		} {
			m.Now, m.TTL = time.Now(), time.Hour
			if _, err := rs.MemberHeartbeat(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		e := start(t, func(c *node.Config) { c.Store, c.ClusterJoinWait = url, time.Millisecond })
		tn := e.tenant("acme")
		opt, err := goredis.ParseURL(url)
		if err != nil {
			t.Fatal(err)
		}
		rc := goredis.NewClient(opt)
		defer rc.Close()
		enqueued := func() map[string]string {
			t.Helper()
			r, err := tn.p.Enqueue(ctx, job("q", "t"))
			if err != nil {
				t.Fatal(err)
			}
			m, err := rc.HGetAll(ctx, fmt.Sprintf("fq:j:%d:%s:%s", len("acme"), "acme", r.ID)).Result()
			if err != nil || len(m) == 0 {
				t.Fatalf("job hash of %s: %v, %v", r.ID, m, err)
			}
			return m
		}
		members := func() map[string]int {
			t.Helper()
			var st struct {
				Members []struct {
					ID        string `json:"id"`
					JobFormat int    `json:"job_format"`
				} `json:"members"`
			}
			e.mustDo(200, "GET", "/v1/cluster", e.root, nil, &st)
			out := map[string]int{}
			for _, m := range st.Members {
				out[m.ID] = m.JobFormat
			}
			return out
		}
		if f, ok := members()["older"]; !ok || f != 0 {
			t.Fatalf("the node does not see the older node (format %d, %t)", f, ok)
		}
		// leave takes node away and waits until the node reports the
		// heartbeat that no longer sees it, which also switches the store.
		leave := func(node string) {
			t.Helper()
			if err := rs.MemberLeave(ctx, node); err != nil {
				t.Fatal(err)
			}
			for deadline := time.Now().Add(30 * time.Second); ; waitFor(20 * time.Millisecond) {
				if _, ok := members()[node]; !ok {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("30 s after %s left, the node still counts it a member", node)
				}
			}
		}
		full := func(m map[string]string) bool {
			return m["namespace"] == "acme" && m["id"] != "" && m["priority"] == "0" && m["attempt"] == "0"
		}
		if m := enqueued(); m["am"] == "" || m["ak"] != "" || !full(m) {
			t.Fatalf("with a node of no format live the job hash is %v; want am, not ak, and every field", m)
		}
		leave("older")
		if m := enqueued(); m["ak"] == "" || m["am"] != "" || !full(m) {
			t.Fatalf("with a node of format %d live the job hash is %v; want ak, not am, and every field", store.JobFormatOrderKey, m)
		}
		leave("old")
		if m := enqueued(); m["ak"] == "" || m["am"] != "" || m["namespace"] != "" || m["id"] != "" || m["priority"] != "" || m["attempt"] != "" ||
			m["max_attempts"] != "" || m["run_at_us"] != "" {
			t.Fatalf("with every live node reading format %d the job hash is %v; want ak and no namespace, id, priority, attempt, max_attempts or run_at_us", store.JobFormat, m)
		}
		// And the node reads what it wrote: the job as enqueued.
		j := job("q", "t")
		j.Priority = -3
		r, err := tn.p.Enqueue(ctx, j)
		if err != nil {
			t.Fatal(err)
		}
		var got api.Job
		e.mustDo(200, "GET", "/v1/jobs/"+r.ID, tn.admin, nil, &got)
		if got.ID != r.ID || got.Priority != -3 || got.Attempt != 0 || got.Status != api.StatusPending {
			t.Errorf("GET /v1/jobs/%s: %+v; want the pending job of priority -3, attempt 0", r.ID, got)
		}
	})
}
