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
		if m := enqueued(); m["am"] == "" || m["ak"] != "" {
			t.Fatalf("with an older node live the job hash holds am %q, ak %q; want only am", m["am"], m["ak"])
		}
		if err := rs.MemberLeave(ctx, "older"); err != nil {
			t.Fatal(err)
		}
		// The node sees the older one gone at its next heartbeat.
		deadline := time.Now().Add(30 * time.Second)
		for {
			m := enqueued()
			if m["ak"] != "" && m["am"] == "" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("30 s after the older node left, job hashes still hold am %q, ak %q", m["am"], m["ak"])
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}
