package node

import "testing"

func TestGCTargetIsRaisedUnlessGOGCIsSet(t *testing.T) {
	unset := func(string) string { return "" }
	if pct, ok := GCPercent(unset); !ok || pct != DefaultGCPercent {
		t.Fatalf("GOGC unset: got (%d, %v), want (%d, true)", pct, ok, DefaultGCPercent)
	}
	for _, v := range []string{"100", "off"} {
		set := func(k string) string {
			if k == "GOGC" {
				return v
			}
			return ""
		}
		if pct, ok := GCPercent(set); ok {
			t.Fatalf("GOGC=%s: the node set its own target %d over the operator's", v, pct)
		}
	}
}
