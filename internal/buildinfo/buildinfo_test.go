package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestDescribe(t *testing.T) {
	for _, tc := range []struct {
		bi   debug.BuildInfo
		want string
	}{
		{debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "v1.2.0"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "3dd83bb1a2c4e5f60718293a4b5c6d7e8f901234"},
			{Key: "vcs.time", Value: "2026-12-02T07:37:00Z"},
			{Key: "vcs.modified", Value: "false"},
		}}, "v1.2.0 (commit 3dd83bb1a2c4, 2026-12-02T07:37:00Z) go1.26.0"},
		{debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "3dd83bb"},
			{Key: "vcs.modified", Value: "true"},
		}}, "(devel) (commit 3dd83bb+changes) go1.26.0"},
		{debug.BuildInfo{GoVersion: "go1.26.0"}, "(devel) go1.26.0"},
		{debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261202074625-8349978f9068+dirty"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "8349978f9068aaaabbbbccccddddeeeeffff0000"},
			{Key: "vcs.modified", Value: "true"},
		}}, "v0.0.0-20261202074625-8349978f9068+dirty go1.26.8"},
	} {
		if got := describe(&tc.bi); got != tc.want {
			t.Errorf("describe = %q, want %q", got, tc.want)
		}
	}
	if String() == "" {
		t.Fatal("String is empty")
	}
}
