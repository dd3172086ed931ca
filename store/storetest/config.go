package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/flexiq/flexiq/store"
)

func putConfig(t testing.TB, s store.Store, p store.ConfigPutParams) store.ConfigItem {
	t.Helper()
	got, err := s.ConfigPut(t.Context(), p)
	if err != nil {
		t.Fatalf("ConfigPut(%s/%s/%s): %v", p.Item.Namespace, p.Item.Kind, p.Item.Name, err)
	}
	return got
}

func getConfig(t testing.TB, s store.Store, ns, kind, name string) store.ConfigItem {
	t.Helper()
	got, err := s.ConfigGet(t.Context(), ns, kind, name)
	if err != nil {
		t.Fatalf("ConfigGet(%s/%s/%s): %v", ns, kind, name, err)
	}
	return got
}

func configList(t testing.TB, s store.Store, ns, kind string) []store.ConfigItem {
	t.Helper()
	got, err := s.ConfigList(t.Context(), ns, kind)
	if err != nil {
		t.Fatalf("ConfigList(%q, %q): %v", ns, kind, err)
	}
	return got
}

func configNames(items []store.ConfigItem) []string {
	out := []string{}
	for _, it := range items {
		out = append(out, it.Namespace+"/"+it.Name)
	}
	return out
}

func item(ns, kind, name, value string) store.ConfigItem {
	return store.ConfigItem{Namespace: ns, Kind: kind, Name: name, Value: []byte(value)}
}

// wantItem checks an item's identity, value, revision and time; Seq is
// checked by the caller.
func wantItem(t testing.TB, what string, got store.ConfigItem, want store.ConfigItem, rev int64, updated time.Time) {
	t.Helper()
	if got.Namespace != want.Namespace || got.Kind != want.Kind || got.Name != want.Name || !sameJSON(got.Value, want.Value) ||
		got.Revision != rev || !sameTime(got.UpdatedAt, updated) {
		t.Errorf("%s = {%s/%s/%s Value:%s Revision:%d UpdatedAt:%s}, want {%s/%s/%s Value:%s Revision:%d UpdatedAt:%s}",
			what, got.Namespace, got.Kind, got.Name, showBytes(got.Value), got.Revision, fmtTime(got.UpdatedAt),
			want.Namespace, want.Kind, want.Name, showBytes(want.Value), rev, fmtTime(updated))
	}
}

func exerciseConfig(t *testing.T, newStore Factory) {
	t.Run("PutGet", func(t *testing.T) {
		s := newStore(t, nil)
		q := item(nsA, "queue", "emails", `{"max_concurrent":5}`)
		got := putConfig(t, s, store.ConfigPutParams{Item: q, Now: base, Create: true})
		wantItem(t, "created item", got, q, 1, base)
		stored := getConfig(t, s, nsA, "queue", "emails")
		wantItem(t, "ConfigGet", stored, q, 1, base)
		if stored.Seq != got.Seq {
			t.Errorf("ConfigGet Seq %d, ConfigPut returned %d", stored.Seq, got.Seq)
		}
		_, err := s.ConfigGet(t.Context(), nsA, "queue", "other")
		wantErrIs(t, "ConfigGet of an unknown name", err, store.ErrNotFound)
		_, err = s.ConfigGet(t.Context(), nsA, "task", "emails")
		wantErrIs(t, "ConfigGet of another kind", err, store.ErrNotFound)
		_, err = s.ConfigGet(t.Context(), nsB, "queue", "emails")
		wantErrIs(t, "ConfigGet in another namespace", err, store.ErrNotFound)
	})

	t.Run("ReplaceKeepsSeqBumpsRevision", func(t *testing.T) {
		s := newStore(t, nil)
		first := putConfig(t, s, store.ConfigPutParams{Item: item(nsA, "trigger", "t1", `{"event":"a"}`), Now: base})
		putConfig(t, s, store.ConfigPutParams{Item: item(nsA, "trigger", "t2", `{"event":"b"}`), Now: base})
		repl := item(nsA, "trigger", "t1", `{"event":"c"}`)
		got := putConfig(t, s, store.ConfigPutParams{Item: repl, Now: at(time.Minute)})
		wantItem(t, "replaced item", got, repl, 2, at(time.Minute))
		if got.Seq != first.Seq {
			t.Errorf("replace changed Seq from %d to %d", first.Seq, got.Seq)
		}
		putConfig(t, s, store.ConfigPutParams{Item: repl, Now: at(2 * time.Minute)})
		wantItem(t, "replaced again", getConfig(t, s, nsA, "trigger", "t1"), repl, 3, at(2*time.Minute))
		wantIDsStr(t, "ConfigList after replacing t1", configNames(configList(t, s, nsA, "trigger")), nsA+"/t1", nsA+"/t2")
	})

	t.Run("CreateOnExistingConflicts", func(t *testing.T) {
		s := newStore(t, nil)
		orig := item(nsA, "periodic", "nightly", `{"cron":"0 3 * * *"}`)
		putConfig(t, s, store.ConfigPutParams{Item: orig, Now: base, Create: true})
		_, err := s.ConfigPut(t.Context(), store.ConfigPutParams{Item: item(nsA, "periodic", "nightly", `{"cron":"@every 1s"}`), Now: at(time.Minute), Create: true})
		wantErrIs(t, "Create on an existing item", err, store.ErrConflict)
		wantItem(t, "item after the conflict", getConfig(t, s, nsA, "periodic", "nightly"), orig, 1, base)
		// The same name elsewhere is another item.
		putConfig(t, s, store.ConfigPutParams{Item: item(nsB, "periodic", "nightly", `{}`), Now: base, Create: true})
		putConfig(t, s, store.ConfigPutParams{Item: item(nsA, "queue", "nightly", `{}`), Now: base, Create: true})
	})

	t.Run("IfRevision", func(t *testing.T) {
		s := newStore(t, nil)
		v1 := item(nsA, "task", "resize", `{"max_concurrent":1}`)
		_, err := s.ConfigPut(t.Context(), store.ConfigPutParams{Item: v1, Now: base, IfRevision: i64(1)})
		wantErrIs(t, "IfRevision 1 on a missing item", err, store.ErrConflict)
		_, err = s.ConfigGet(t.Context(), nsA, "task", "resize")
		wantErrIs(t, "ConfigGet after the conflict", err, store.ErrNotFound)
		wantItem(t, "IfRevision 0 on a missing item", putConfig(t, s, store.ConfigPutParams{Item: v1, Now: base, IfRevision: i64(0)}), v1, 1, base)
		for _, rev := range []int64{0, 2} {
			_, err = s.ConfigPut(t.Context(), store.ConfigPutParams{Item: item(nsA, "task", "resize", `{}`), Now: at(time.Minute), IfRevision: i64(rev)})
			wantErrIs(t, fmt.Sprintf("IfRevision %d on revision 1", rev), err, store.ErrConflict)
		}
		wantItem(t, "item after conflicts", getConfig(t, s, nsA, "task", "resize"), v1, 1, base)
		v2 := item(nsA, "task", "resize", `{"max_concurrent":2}`)
		wantItem(t, "IfRevision 1 on revision 1", putConfig(t, s, store.ConfigPutParams{Item: v2, Now: at(time.Minute), IfRevision: i64(1)}), v2, 2, at(time.Minute))
	})

	t.Run("Delete", func(t *testing.T) {
		s := newStore(t, nil)
		putConfig(t, s, store.ConfigPutParams{Item: item(nsA, "queue", "q", `{}`), Now: base})
		putConfig(t, s, store.ConfigPutParams{Item: item(nsB, "queue", "q", `{}`), Now: base})
		if err := s.ConfigDelete(t.Context(), nsA, "queue", "q"); err != nil {
			t.Fatalf("ConfigDelete: %v", err)
		}
		_, err := s.ConfigGet(t.Context(), nsA, "queue", "q")
		wantErrIs(t, "ConfigGet after delete", err, store.ErrNotFound)
		wantErrIs(t, "ConfigDelete again", s.ConfigDelete(t.Context(), nsA, "queue", "q"), store.ErrNotFound)
		wantErrIs(t, "ConfigDelete of an unknown item", s.ConfigDelete(t.Context(), nsA, "task", "q"), store.ErrNotFound)
		getConfig(t, s, nsB, "queue", "q")
		wantIDsStr(t, "ConfigList after delete", configNames(configList(t, s, nsA, "queue")))

		// Created again, it is a new item at revision 1.
		again := item(nsA, "queue", "q", `{"max_attempts":3}`)
		wantItem(t, "recreated item", putConfig(t, s, store.ConfigPutParams{Item: again, Now: at(time.Minute), Create: true}), again, 1, at(time.Minute))
	})

	t.Run("ListInCreationOrder", func(t *testing.T) {
		s := newStore(t, nil)
		for i, name := range []string{"zeta", "alpha", "mid"} {
			putConfig(t, s, store.ConfigPutParams{Item: item(nsA, "trigger", name, fmt.Sprintf(`{"n":%d}`, i)), Now: at(time.Duration(i) * time.Second)})
		}
		putConfig(t, s, store.ConfigPutParams{Item: item(nsB, "trigger", "b1", `{}`), Now: base})
		putConfig(t, s, store.ConfigPutParams{Item: item(nsA, "periodic", "p1", `{}`), Now: base})
		putConfig(t, s, store.ConfigPutParams{Item: item(nsA, "trigger", "last", `{}`), Now: base})
		// Replacing keeps the place; delete and create again moves to the end.
		putConfig(t, s, store.ConfigPutParams{Item: item(nsA, "trigger", "zeta", `{"n":9}`), Now: at(time.Hour)})
		if err := s.ConfigDelete(t.Context(), nsA, "trigger", "alpha"); err != nil {
			t.Fatalf("ConfigDelete: %v", err)
		}
		putConfig(t, s, store.ConfigPutParams{Item: item(nsA, "trigger", "alpha", `{}`), Now: at(time.Hour)})

		got := configList(t, s, nsA, "trigger")
		wantIDsStr(t, "ConfigList acme triggers", configNames(got), nsA+"/zeta", nsA+"/mid", nsA+"/last", nsA+"/alpha")
		for i := 1; i < len(got); i++ {
			if got[i].Seq <= got[i-1].Seq {
				t.Errorf("ConfigList Seq not increasing: %s %d after %s %d", got[i].Name, got[i].Seq, got[i-1].Name, got[i-1].Seq)
			}
		}
		if len(got) > 0 {
			wantItem(t, "listed zeta", got[0], item(nsA, "trigger", "zeta", `{"n":9}`), 2, at(time.Hour))
		}
		wantIDsStr(t, "ConfigList globex triggers", configNames(configList(t, s, nsB, "trigger")), nsB+"/b1")
		wantIDsStr(t, "ConfigList acme periodic", configNames(configList(t, s, nsA, "periodic")), nsA+"/p1")
		wantIDsStr(t, "ConfigList of a kind with no items", configNames(configList(t, s, nsA, "queue")))

		all := configList(t, s, "", "trigger")
		var fromA []string
		seen := map[string]bool{}
		for _, it := range all {
			seen[it.Namespace+"/"+it.Name] = true
			if it.Namespace == nsA {
				fromA = append(fromA, it.Namespace+"/"+it.Name)
			}
		}
		if len(all) != 5 || !seen[nsB+"/b1"] {
			t.Errorf("ConfigList of every namespace: %q, want acme's four triggers and globex's b1", configNames(all))
		}
		wantIDsStr(t, "ConfigList of every namespace, acme's in creation order", fromA, nsA+"/zeta", nsA+"/mid", nsA+"/last", nsA+"/alpha")
	})
}
