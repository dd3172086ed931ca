package open

import (
	"context"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/flexiq/flexiq/internal/testserver"
	"github.com/flexiq/flexiq/store"
)

func TestMain(m *testing.M) { testserver.Main(m) }

func TestRedisURLTakesThePrefixOut(t *testing.T) {
	for _, c := range []struct{ in, url, prefix, err string }{
		{"redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0", "", ""},
		{"redis://127.0.0.1:6379/2?prefix=%7Bfq%7D:&dial_timeout=3s", "redis://127.0.0.1:6379/2?dial_timeout=3s", "{fq}:", ""},
		{"rediss://u:secret@h:6380/0?prefix=a:", "rediss://u:secret@h:6380/0", "a:", ""},
		{"redis://h/0?prefix=", "", "", "prefix must not be empty"},
	} {
		u, p, err := redisURL(c.in)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) || strings.Contains(err.Error(), "secret") {
				t.Errorf("%s: error %v, want one saying %q", c.in, err, c.err)
			}
		case err != nil || u != c.url || p != c.prefix:
			t.Errorf("%s: %q %q %v, want %q %q", c.in, u, p, err, c.url, c.prefix)
		}
	}
}

// A prefix given in the URL starts every key the store writes.
func TestRedisPrefixFromTheURL(t *testing.T) {
	ctx := context.Background()
	base := testserver.Redis(t)
	sep := "?"
	if strings.Contains(base, "?") {
		sep = "&"
	}
	s, err := Open(ctx, base+sep+"prefix=%7Bopen-test%7D:")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.SettingPut(ctx, store.SettingPutParams{Key: "k", Value: []byte(`1`), Now: time.Unix(1000, 0)}); err != nil {
		t.Fatal(err)
	}
	opt, err := goredis.ParseURL(base)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opt)
	defer c.Close()
	// Only this test writes under {open-test}: (a shared Redis may hold
	// other tests' keys).
	keys, err := c.Keys(ctx, "{open-test}:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) == 0 {
		t.Fatal("no key starts with the URL's prefix {open-test}:")
	}
	if got, err := s.SettingGet(ctx, "k"); err != nil || string(got.Value) != "1" {
		t.Errorf("setting read back through the prefixed store: %q, %v", got.Value, err)
	}
}
