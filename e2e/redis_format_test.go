package e2e

import (
	"fmt"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/flexiq/flexiq/internal/testserver"
	"github.com/flexiq/flexiq/node"
	"github.com/flexiq/flexiq/store"
	redisstore "github.com/flexiq/flexiq/store/redis"
)

// A node on Redis writes job hashes a node of an older build can read
// (with their whole dispatch-order member, am) while such a node is live
// on the store, and the compact form (the order key, ak) once every live
// node reads it: a rolling upgrade never leaves an older node a job it
// cannot read.
func TestRedisJobHashesWaitForEveryNodeToReadThem(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		url := testserver.Redis(t)
		ctx := t.Context()
		rs, err := redisstore.Open(ctx, url, redisstore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer rs.Close()
		// An older node's row: it tells no job format. Not ready, so no
		// partition is placed on it.
		if _, err := rs.MemberHeartbeat(ctx, store.MemberHeartbeatParams{Node: "older", Now: time.Now(), TTL: time.Hour}); err != nil {
			t.Fatal(err)
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
		if m := enqueued(); m["am"] == "" || m["ak"] != "" {
			t.Fatalf("with an older node live the job hash holds am %q, ak %q; want only am", m["am"], m["ak"])
		}
		if err := rs.MemberLeave(ctx, "older"); err != nil {
			t.Fatal(err)
		}
		// The heartbeat that no longer sees the older node also switches
		// the store: wait for the node to report that heartbeat.
		for deadline := time.Now().Add(30 * time.Second); ; waitFor(20 * time.Millisecond) {
			if _, ok := members()["older"]; !ok {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("30 s after the older node left, the node still counts it a member")
			}
		}
		if m := enqueued(); m["ak"] == "" || m["am"] != "" {
			t.Fatalf("with every live node reading it the job hash holds am %q, ak %q; want only ak", m["am"], m["ak"])
		}
	})
}
