package storetest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"testing"
	"time"

	"github.com/flexiq/flexiq/store"
)

func exerciseToken(t *testing.T, newStore Factory) {
	hash := func(secret string) []byte { h := sha256.Sum256([]byte(secret)); return h[:] }
	wantToken := func(t *testing.T, what string, got, want store.Token) {
		t.Helper()
		if got.ID != want.ID || !bytes.Equal(got.Hash, want.Hash) || got.Namespace != want.Namespace || got.Role != want.Role || !sameTime(got.CreatedAt, want.CreatedAt) {
			t.Errorf("%s = %+v, want %+v", what, got, want)
		}
	}
	admin := store.Token{ID: "tok-admin", Hash: hash("s1"), Namespace: nsA, Role: "admin", CreatedAt: base}
	worker := store.Token{ID: "tok-worker", Hash: hash("s2"), Namespace: nsB, Role: "worker", CreatedAt: at(time.Minute)}
	// A hash with zero bytes and high bytes, to catch text-column handling.
	binary := store.Token{ID: "tok-bin", Hash: []byte{0, 1, 0xff, 0, 0x80, 'x', 0}, Namespace: nsA, Role: "producer", CreatedAt: at(2 * time.Minute)}

	t.Run("CreateConflict", func(t *testing.T) {
		s := newStore(t, nil)
		if err := s.TokenCreate(t.Context(), admin); err != nil {
			t.Fatal(err)
		}
		sameID := worker
		sameID.ID = admin.ID
		sameHash := worker
		sameHash.Hash = admin.Hash
		for _, tok := range []store.Token{sameID, sameHash} {
			if err := s.TokenCreate(t.Context(), tok); !errors.Is(err, store.ErrConflict) {
				t.Errorf("TokenCreate of a repeated id or hash = %v, want ErrConflict", err)
			}
		}
	})

	t.Run("CreateGet", func(t *testing.T) {
		s := newStore(t, nil)
		for _, tok := range []store.Token{admin, worker, binary} {
			if err := s.TokenCreate(t.Context(), tok); err != nil {
				t.Fatalf("TokenCreate(%s): %v", tok.ID, err)
			}
		}
		for _, tok := range []store.Token{admin, worker, binary} {
			got, err := s.TokenGetByHash(t.Context(), tok.Hash)
			if err != nil {
				t.Errorf("TokenGetByHash(%s): %v", tok.ID, err)
				continue
			}
			wantToken(t, "TokenGetByHash", got, tok)
		}
		_, err := s.TokenGetByHash(t.Context(), hash("unknown"))
		wantErrIs(t, "TokenGetByHash of an unknown hash", err, store.ErrNotFound)
		_, err = s.TokenGetByHash(t.Context(), binary.Hash[:3])
		wantErrIs(t, "TokenGetByHash of a prefix of a hash", err, store.ErrNotFound)
	})

	t.Run("Revoke", func(t *testing.T) {
		s := newStore(t, nil)
		for _, tok := range []store.Token{admin, worker} {
			if err := s.TokenCreate(t.Context(), tok); err != nil {
				t.Fatalf("TokenCreate(%s): %v", tok.ID, err)
			}
		}
		got, err := s.TokenRevoke(t.Context(), admin.ID, at(time.Hour))
		if err != nil {
			t.Fatalf("TokenRevoke: %v", err)
		}
		wantToken(t, "TokenRevoke result", got, admin)
		_, err = s.TokenGetByHash(t.Context(), admin.Hash)
		wantErrIs(t, "TokenGetByHash of a revoked token", err, store.ErrNotFound)
		_, err = s.TokenRevoke(t.Context(), admin.ID, at(2*time.Hour))
		wantErrIs(t, "TokenRevoke of a revoked token", err, store.ErrNotFound)
		_, err = s.TokenRevoke(t.Context(), "tok-unknown", at(time.Hour))
		wantErrIs(t, "TokenRevoke of an unknown id", err, store.ErrNotFound)
		// The other token still works.
		other, err := s.TokenGetByHash(t.Context(), worker.Hash)
		if err != nil {
			t.Fatalf("TokenGetByHash of a token not revoked: %v", err)
		}
		wantToken(t, "token not revoked", other, worker)
	})
}
