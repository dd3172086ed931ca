package auth

import (
	"context"
	"testing"
	"time"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/store"
)

type tokens map[string]store.Token

func (m tokens) TokenGetByHash(_ context.Context, h []byte) (store.Token, error) {
	t, ok := m[string(h)]
	if !ok {
		return t, store.ErrNotFound
	}
	return t, nil
}

func TestAuthenticate(t *testing.T) {
	id, secret, err := NewToken()
	if err != nil {
		t.Fatal(err)
	}
	st := tokens{string(Hash(secret)): {ID: id, Namespace: "acme", Role: "worker"}}
	now := time.Unix(0, 0)
	a := New(st, "root-secret", func() time.Time { return now })

	p, e := a.Authenticate(context.Background(), "Bearer root-secret")
	if e != nil || !p.IsRoot || p.Namespace != "default" || !p.Can(Root) || !p.Can(Admin) {
		t.Fatalf("root = %+v %v", p, e)
	}
	p, e = a.Authenticate(context.Background(), "bearer "+secret)
	if e != nil || p.Namespace != "acme" || p.Role != RoleWorker || p.TokenID != id {
		t.Fatalf("token = %+v %v", p, e)
	}
	if p.Can(Produce) || p.Can(Admin) || !p.Can(Work) || p.Can(Root) {
		t.Fatalf("worker permissions wrong: %+v", p)
	}
	for _, h := range []string{"", "Bearer", "Bearer ", "Basic " + secret, "Bearer nope", secret} {
		if _, e := a.Authenticate(context.Background(), h); e == nil || e.Code != api.CodeUnauthenticated {
			t.Fatalf("header %q: %v, want UNAUTHENTICATED", h, e)
		}
	}
	// A revoked token stays cached until forgotten (or 10 s).
	delete(st, string(Hash(secret)))
	if _, e := a.Authenticate(context.Background(), "Bearer "+secret); e != nil {
		t.Fatal("cache missed within its TTL")
	}
	a.Forget(id)
	if _, e := a.Authenticate(context.Background(), "Bearer "+secret); e == nil {
		t.Fatal("a forgotten, revoked token still authenticates")
	}
	if e := (Principal{Role: RoleProducer}).Check(Work, "claim jobs"); e == nil || e.Code != api.CodePermissionDenied || e.Message != "a producer token may not claim jobs" {
		t.Fatalf("Check = %v", e)
	}
}
