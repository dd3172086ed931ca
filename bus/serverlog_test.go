package bus

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/flexiq/flexiq/auth"
	"github.com/flexiq/flexiq/internal/testlog"
)

// At debug level the embedded server's own reports reach the node's log,
// marked component=nats, with no secret in them: a client that sends its
// token as its user name is refused, and the report of it quotes the
// name, which the log hides, as it hides the cluster secret and the root
// token in whatever shape the operator chose it.
func TestServerReportsAreLoggedWithoutSecrets(t *testing.T) {
	var out testlog.Buffer
	log := out.Logger(slog.LevelDebug)
	a := NewClientAuth(testSecret, &tokens{live: map[string]auth.Principal{}}, nil)
	// An operator's root token need not look like a FlexiQ token.
	const root = "operator-chosen-root-secret"
	srv, err := StartEmbedded(EmbeddedOptions{Listen: "127.0.0.1:-1", Auth: a, Log: log, ClusterSecret: testSecret, Hide: []string{root}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(); srv.WaitForShutdown() })
	const token = "fq_a_token_sent_as_a_user_name"
	for _, user := range []string{token, root} {
		if nc, err := nats.Connect(srv.ClientURL(), nats.UserInfo(user, testSecret), nats.MaxReconnects(0)); err == nil {
			nc.Close()
			t.Fatal("a client with a made-up user was admitted")
		}
	}
	srv.Shutdown()
	srv.WaitForShutdown()
	got := out.String()
	if !strings.Contains(got, "component=nats") || !strings.Contains(got, `authentication error - User \"fq_***\"`) {
		t.Fatalf("the server's reports are not in the log:\n%s", got)
	}
	if strings.Contains(got, token) || strings.Contains(got, testSecret) || strings.Contains(got, root) ||
		!strings.Contains(got, `User \"***\"`) {
		t.Fatalf("a secret is in the log:\n%s", got)
	}
}
