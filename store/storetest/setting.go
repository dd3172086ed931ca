package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/flexiq/flexiq/store"
)

func putSetting(t testing.TB, s store.Store, p store.SettingPutParams) store.Setting {
	t.Helper()
	got, err := s.SettingPut(t.Context(), p)
	if err != nil {
		t.Fatalf("SettingPut(%q): %v", p.Key, err)
	}
	return got
}

func getSetting(t testing.TB, s store.Store, key string) store.Setting {
	t.Helper()
	got, err := s.SettingGet(t.Context(), key)
	if err != nil {
		t.Fatalf("SettingGet(%q): %v", key, err)
	}
	return got
}

func auditList(t testing.TB, s store.Store, ns string, limit int) []store.AuditEntry {
	t.Helper()
	got, err := s.AuditList(t.Context(), store.AuditListParams{Namespace: ns, Limit: limit})
	if err != nil {
		t.Fatalf("AuditList(%q): %v", ns, err)
	}
	return got
}

func settingList(t testing.TB, s store.Store, prefix string) []store.Setting {
	t.Helper()
	got, err := s.SettingList(t.Context(), prefix)
	if err != nil {
		t.Fatalf("SettingList(%q): %v", prefix, err)
	}
	return got
}

func wantSetting(t testing.TB, what string, got store.Setting, key, value string, rev int64, updated time.Time) {
	t.Helper()
	var v []byte
	if value != "" {
		v = []byte(value)
	}
	if got.Key != key || !sameJSON(got.Value, v) || (value == "") != (got.Value == nil) || got.Revision != rev || !sameTime(got.UpdatedAt, updated) {
		t.Errorf("%s = {Key:%q Value:%s Revision:%d UpdatedAt:%s}, want {Key:%q Value:%s Revision:%d UpdatedAt:%s}",
			what, got.Key, showBytes(got.Value), got.Revision, fmtTime(got.UpdatedAt),
			key, showBytes(v), rev, fmtTime(updated))
	}
}

func settingKeys(list []store.Setting) []string {
	out := []string{}
	for _, s := range list {
		out = append(out, s.Key)
	}
	return out
}

func quotaAudit(ns, action string) *store.AuditRecord {
	return &store.AuditRecord{Actor: "tok-1", Action: action, TargetKind: "namespace", Target: ns, Namespace: ns}
}

func exerciseSetting(t *testing.T, newStore Factory) {
	t.Run("GetUnknown", func(t *testing.T) {
		s := newStore(t, nil)
		_, err := s.SettingGet(t.Context(), "never")
		wantErrIs(t, "SettingGet of a key never written", err, store.ErrNotFound)
	})

	t.Run("PutBumpsRevision", func(t *testing.T) {
		s := newStore(t, nil)
		got := putSetting(t, s, store.SettingPutParams{Key: "k", Value: []byte(`{"a":1}`), Now: base})
		wantSetting(t, "first put", got, "k", `{"a":1}`, 1, base)
		wantSetting(t, "get after first put", getSetting(t, s, "k"), "k", `{"a":1}`, 1, base)
		got = putSetting(t, s, store.SettingPutParams{Key: "k", Value: []byte(`[1,"two",null]`), Now: at(time.Minute)})
		wantSetting(t, "second put", got, "k", `[1,"two",null]`, 2, at(time.Minute))
		wantSetting(t, "get after second put", getSetting(t, s, "k"), "k", `[1,"two",null]`, 2, at(time.Minute))
		// Keys are independent.
		got = putSetting(t, s, store.SettingPutParams{Key: "k2", Value: []byte(`"x"`), Now: base})
		wantSetting(t, "other key", got, "k2", `"x"`, 1, base)
	})

	t.Run("DeleteLeavesTombstone", func(t *testing.T) {
		s := newStore(t, nil)
		putSetting(t, s, store.SettingPutParams{Key: "k", Value: []byte(`1`), Now: base})
		putSetting(t, s, store.SettingPutParams{Key: "k", Value: []byte(`2`), Now: at(time.Second)})
		got := putSetting(t, s, store.SettingPutParams{Key: "k", Now: at(2 * time.Second)})
		wantSetting(t, "delete", got, "k", "", 3, at(2*time.Second))
		wantSetting(t, "get after delete", getSetting(t, s, "k"), "k", "", 3, at(2*time.Second))
		got = putSetting(t, s, store.SettingPutParams{Key: "k", Value: []byte(`3`), Now: at(3 * time.Second)})
		wantSetting(t, "put after delete", got, "k", `3`, 4, at(3*time.Second))
	})

	t.Run("DeleteNeverWritten", func(t *testing.T) {
		// Clearing a quota that was never set is still a write (docs/quotas.md:
		// +1 on every successful write, set, merge or clear).
		s := newStore(t, nil)
		got := putSetting(t, s, store.SettingPutParams{Key: "k", Now: base, Audit: quotaAudit(nsA, "quota.clear")})
		wantSetting(t, "delete of a key never written", got, "k", "", 1, base)
		wantSetting(t, "get after it", getSetting(t, s, "k"), "k", "", 1, base)
		entries := auditList(t, s, nsA, 10)
		if len(entries) != 1 || entries[0].Before != nil || entries[0].After != nil {
			t.Errorf("audit of a delete of nothing: %+v, want one entry with Before and After nil", entries)
		}
	})

	t.Run("List", func(t *testing.T) {
		s := newStore(t, nil)
		wantIDsStr(t, "SettingList of an empty store", settingKeys(settingList(t, s, "")))
		for _, k := range []string{"quota:ns:4:acme", "b", "quota:default", "a_b", "axb", "a%c", "ab", "quota:ns:6:globex", "gone"} {
			putSetting(t, s, store.SettingPutParams{Key: k, Value: []byte(`"` + k + `"`), Now: base})
		}
		putSetting(t, s, store.SettingPutParams{Key: "gone", Now: at(time.Second)})

		all := settingList(t, s, "")
		wantIDsStr(t, "SettingList all (by key, tombstones skipped)", settingKeys(all),
			"a%c", "a_b", "ab", "axb", "b", "quota:default", "quota:ns:4:acme", "quota:ns:6:globex")
		for _, st := range all {
			wantSetting(t, "listed setting", st, st.Key, `"`+st.Key+`"`, 1, base)
		}
		wantIDsStr(t, "SettingList quota:", settingKeys(settingList(t, s, "quota:")), "quota:default", "quota:ns:4:acme", "quota:ns:6:globex")
		wantIDsStr(t, "SettingList quota:ns:", settingKeys(settingList(t, s, "quota:ns:")), "quota:ns:4:acme", "quota:ns:6:globex")
		// A prefix is literal text, not a pattern.
		wantIDsStr(t, "SettingList a_", settingKeys(settingList(t, s, "a_")), "a_b")
		wantIDsStr(t, "SettingList a%", settingKeys(settingList(t, s, "a%")), "a%c")
		wantIDsStr(t, "SettingList A (case matters)", settingKeys(settingList(t, s, "A")))
		wantIDsStr(t, "SettingList gone", settingKeys(settingList(t, s, "gone")))
		wantIDsStr(t, "SettingList of a whole key", settingKeys(settingList(t, s, "ab")), "ab")
	})

	t.Run("IfRevision", func(t *testing.T) {
		s := newStore(t, nil)
		_, err := s.SettingPut(t.Context(), store.SettingPutParams{Key: "k", Value: []byte(`1`), Now: base, IfRevision: i64(1), Audit: quotaAudit(nsA, "quota.set")})
		wantErrIs(t, "IfRevision 1 on a key never written", err, store.ErrConflict)
		_, err = s.SettingGet(t.Context(), "k")
		wantErrIs(t, "SettingGet after a conflict", err, store.ErrNotFound)

		got := putSetting(t, s, store.SettingPutParams{Key: "k", Value: []byte(`1`), Now: base, IfRevision: i64(0), Audit: quotaAudit(nsA, "quota.set")})
		wantSetting(t, "IfRevision 0 on a key never written", got, "k", `1`, 1, base)

		for _, rev := range []int64{0, 2, 5} {
			_, err = s.SettingPut(t.Context(), store.SettingPutParams{Key: "k", Value: []byte(`"stale"`), Now: at(time.Minute), IfRevision: i64(rev), Audit: quotaAudit(nsA, "quota.set")})
			wantErrIs(t, "stale IfRevision", err, store.ErrConflict)
		}
		_, err = s.SettingPut(t.Context(), store.SettingPutParams{Key: "k", Now: at(time.Minute), IfRevision: i64(0), Audit: quotaAudit(nsA, "quota.clear")})
		wantErrIs(t, "stale IfRevision on delete", err, store.ErrConflict)
		wantSetting(t, "after conflicts", getSetting(t, s, "k"), "k", `1`, 1, base)
		if n := len(auditList(t, s, nsA, 100)); n != 1 {
			t.Errorf("audit entries after one write and four conflicts: %d, want 1", n)
		}

		got = putSetting(t, s, store.SettingPutParams{Key: "k", Now: at(2 * time.Minute), IfRevision: i64(1)})
		wantSetting(t, "IfRevision delete", got, "k", "", 2, at(2*time.Minute))
		_, err = s.SettingPut(t.Context(), store.SettingPutParams{Key: "k", Value: []byte(`2`), Now: at(3 * time.Minute), IfRevision: i64(0)})
		wantErrIs(t, "IfRevision 0 on a tombstone", err, store.ErrConflict)
		got = putSetting(t, s, store.SettingPutParams{Key: "k", Value: []byte(`2`), Now: at(3 * time.Minute), IfRevision: i64(2)})
		wantSetting(t, "IfRevision on a tombstone", got, "k", `2`, 3, at(3*time.Minute))
	})

	t.Run("Audit", func(t *testing.T) {
		s := newStore(t, nil)
		putSetting(t, s, store.SettingPutParams{Key: "quota:ns:4:acme", Value: []byte(`{"max_pending":10}`), Now: at(1 * time.Second), Audit: quotaAudit(nsA, "quota.set")})
		putSetting(t, s, store.SettingPutParams{Key: "quota:ns:6:globex", Value: []byte(`{"max_running":1}`), Now: at(2 * time.Second), Audit: quotaAudit(nsB, "quota.set")})
		putSetting(t, s, store.SettingPutParams{Key: "quota:ns:4:acme", Value: []byte(`{"max_pending":20, "on_excess":"drop"}`), Now: at(3 * time.Second), Audit: quotaAudit(nsA, "quota.set")})
		putSetting(t, s, store.SettingPutParams{Key: "quota:ns:4:acme", Value: []byte(`{"max_pending":30}`), Now: at(4 * time.Second)}) // not audited
		putSetting(t, s, store.SettingPutParams{Key: "quota:ns:4:acme", Now: at(5 * time.Second), Audit: quotaAudit(nsA, "quota.clear")})
		putSetting(t, s, store.SettingPutParams{Key: "quota:ns:4:acme", Value: []byte(`{"max_pending":1}`), Now: at(6 * time.Second), Audit: quotaAudit(nsA, "quota.set")})
		putSetting(t, s, store.SettingPutParams{Key: "generic", Value: []byte(`true`), Now: at(7 * time.Second),
			Audit: &store.AuditRecord{Actor: "root", Action: "setting.put", TargetKind: "setting", Target: "generic"}})

		type want struct {
			action        string
			at            time.Time
			before, after string
		}
		check := func(what string, got []store.AuditEntry, ns string, wants ...want) {
			t.Helper()
			if len(got) != len(wants) {
				t.Errorf("%s: %d entries, want %d: %+v", what, len(got), len(wants), got)
				return
			}
			for i, w := range wants {
				e := got[i]
				if e.Namespace != ns || e.Actor != "tok-1" || e.Action != w.action || e.TargetKind != "namespace" || e.Target != ns || !sameTime(e.At, w.at) {
					t.Errorf("%s[%d] = %+v (at %s), want namespace/target %s actor tok-1 action %s kind namespace at %s",
						what, i, e.AuditRecord, fmtTime(e.At), ns, w.action, fmtTime(w.at))
				}
				if (w.before == "") != (e.Before == nil) || !sameJSON(e.Before, []byte(w.before)) {
					t.Errorf("%s[%d] Before = %s, want %q", what, i, showBytes(e.Before), w.before)
				}
				if (w.after == "") != (e.After == nil) || !sameJSON(e.After, []byte(w.after)) {
					t.Errorf("%s[%d] After = %s, want %q", what, i, showBytes(e.After), w.after)
				}
			}
		}
		acme := auditList(t, s, nsA, 100)
		check("AuditList acme", acme, nsA,
			want{"quota.set", at(6 * time.Second), "", `{"max_pending":1}`},
			want{"quota.clear", at(5 * time.Second), `{"max_pending":30}`, ""},
			want{"quota.set", at(3 * time.Second), `{"max_pending":10}`, `{"max_pending":20,"on_excess":"drop"}`},
			want{"quota.set", at(1 * time.Second), "", `{"max_pending":10}`},
		)
		check("AuditList acme limit 2", auditList(t, s, nsA, 2), nsA,
			want{"quota.set", at(6 * time.Second), "", `{"max_pending":1}`},
			want{"quota.clear", at(5 * time.Second), `{"max_pending":30}`, ""},
		)
		check("AuditList globex", auditList(t, s, nsB, 100), nsB,
			want{"quota.set", at(2 * time.Second), "", `{"max_running":1}`},
		)
		check("AuditList of a namespace with no writes", auditList(t, s, "empty", 100), "empty")
		seen := map[int64]bool{}
		for _, e := range acme {
			if seen[e.ID] {
				t.Errorf("audit entry ID %d repeated", e.ID)
			}
			seen[e.ID] = true
		}
		if len(acme) == 4 && !(acme[0].ID > acme[1].ID && acme[1].ID > acme[2].ID && acme[2].ID > acme[3].ID) {
			t.Errorf("audit IDs %d %d %d %d, want increasing with each write (listed newest first)", acme[0].ID, acme[1].ID, acme[2].ID, acme[3].ID)
		}
	})

	t.Run("AuditNewestFirstBySameTime", func(t *testing.T) {
		// Two writes in the same instant still list in write order.
		s := newStore(t, nil)
		putSetting(t, s, store.SettingPutParams{Key: "k", Value: []byte(`1`), Now: base, Audit: quotaAudit(nsA, "first")})
		putSetting(t, s, store.SettingPutParams{Key: "k", Value: []byte(`2`), Now: base, Audit: quotaAudit(nsA, "second")})
		got := auditList(t, s, nsA, 10)
		if len(got) != 2 || got[0].Action != "second" || got[1].Action != "first" {
			t.Errorf("AuditList: %+v, want second then first", got)
		}
	})
}

func wantIDsStr(t testing.TB, what string, got []string, want ...string) {
	t.Helper()
	if want == nil {
		want = []string{}
	}
	if got == nil {
		got = []string{}
	}
	if !slices.Equal(got, want) {
		t.Errorf("%s: %q, want %q", what, got, want)
	}
}
