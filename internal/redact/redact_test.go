package redact

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestRedactHidesEverySecretOfAURL(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"redis://:s3cret@127.0.0.1:6379/0", "redis://:***@127.0.0.1:6379/0"},
		{"rediss://u:s3cret@h:6380/0?prefix=a:", "rediss://u:***@h:6380/0?prefix=a:"},
		{"postgres://u:s3cret@h:5432/db?sslmode=disable", "postgres://u:***@h:5432/db?sslmode=disable"},
		{"postgres://u@h/db?password=s3cret&sslmode=require", "postgres://u@h/db?password=***&sslmode=require"},
		{"postgres://h/db?sslmode=require&PassWord=s3cret", "postgres://h/db?sslmode=require&PassWord=***"},
		{"postgres://h/db?sslpassword=s3cret#frag", "postgres://h/db?sslpassword=***#frag"},
		{"postgresql://u:s3cret@h1:5432,h2:5432/db", "postgresql://u:***@h1:5432,h2:5432/db"},
		{"postgres://u:s3cret@h/db?application_name=a@b", "postgres://u:***@b"},
		{"nats://u:s3cret@h:4222", "nats://u:***@h:4222"},
		{"nats://s3cret@h:4222", "nats://***@h:4222"},
		{"nats://u:s3cret@h1:4222,nats://s3cret@h2:4222", "nats://u:***@h1:4222,nats://***@h2:4222"},
		// Raw characters a URL should have escaped, and URLs too broken to
		// parse: the secret is still hidden.
		{"redis://:s3cret/p@ss?w,rd@h:6379", "redis://:***@h:6379"},
		{"redis://:s3cret@h:x", "redis://:***@h:x"},
		{"redis://:s3%40cret@h", "redis://:***@h"},
		// PostgreSQL's keyword/value form.
		{"host=h user=u password=s3cret dbname=db", "host=h user=u password=*** dbname=db"},
		{"host=h password = 's3 \\' cret' dbname=db", "host=h password = *** dbname=db"},
		{"postgres:/u:s3cret@h/db", "postgres:***@h/db"},
		// Nothing to hide.
		{"sqlite://./flexiq-data/flexiq.db", "sqlite://./flexiq-data/flexiq.db"},
		{"postgres://nobody@127.0.0.1:1/x?connect_timeout=1", "postgres://nobody@127.0.0.1:1/x?connect_timeout=1"},
		{"redis://127.0.0.1:6379/0?prefix={fq}:", "redis://127.0.0.1:6379/0?prefix={fq}:"},
		{"nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"mysql://x", "mysql://x"},
		{"", ""},
	} {
		got := URL(c.in)
		if got != c.want {
			t.Errorf("URL(%q) = %q, want %q", c.in, got, c.want)
		}
		for _, secret := range []string{"s3cret", "cret", "p@ss"} {
			if strings.Contains(got, secret) {
				t.Errorf("URL(%q) = %q: %q shows", c.in, got, secret)
			}
		}
	}
}

// A driver's error that quotes the URL, in any of its encodings, is
// redacted and still unwraps to the driver's error.
func TestRedactErrorHidesTheSecretsAndKeepsTheCause(t *testing.T) {
	const raw = "redis://:s3%40cret@h:x"
	//lint:ignore SA1007 the parse error, which quotes the URL, is the point
	_, perr := url.Parse(raw)
	if perr == nil {
		t.Fatal("want a parse error")
	}
	for _, err := range []error{perr, errors.New("dial redis://:s3@cret@h failed"), errors.New("auth s3%40cret refused")} {
		got := Error(err, raw)
		if strings.Contains(got.Error(), "s3") {
			t.Errorf("Error(%q) = %q", err, got)
		}
		if !errors.Is(got, err) {
			t.Errorf("Error(%q) does not unwrap to it", err)
		}
	}
	var ue *url.Error
	if !errors.As(Error(perr, raw), &ue) {
		t.Error("errors.As no longer finds the *url.Error")
	}
	if err := Error(nil, raw); err != nil {
		t.Errorf("Error(nil) = %v", err)
	}
	plain := errors.New("connection refused")
	if Error(plain, raw) != plain {
		t.Error("an error with nothing to hide was wrapped")
	}
}

// Text hides the secrets it is given and every token-shaped word, and
// leaves the rest of the text as it was.
func TestTextHidesSecretsAndTokens(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{`authentication error - User "fq_AbC-12_x"`, `authentication error - User "fq_***"`},
		{"route password s3cret-xyz refused", "route password *** refused"},
		{"two fq_a and fq_b.", "two fq_*** and fq_***."},
		{"nothing secret: fq_ alone, tok_123", "nothing secret: fq_ alone, tok_123"},
	} {
		if got := Text(c.in, "s3cret-xyz", ""); got != c.want {
			t.Errorf("Text(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}
