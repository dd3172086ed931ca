// Package buildinfo says which build of FlexiQ is running, from what the
// Go toolchain records in the binary: the module's version, the commit it
// was built from and whether the tree had changes. fq-node --version and
// fq version print it; an operator compares it across the nodes of a
// cluster during a rolling upgrade.
package buildinfo

import (
	"runtime/debug"
	"strings"
)

// String is the build: its version, the commit it was built from when the
// version does not say, and the Go version, such as
// "v0.0.0-20261202074625-8349978f9068+dirty go1.26.8" (a build of a
// working tree) or "v1.2.0 (commit 3dd83bb1a2c4, 2026-12-02T07:37:00Z)
// go1.26.0". A binary built without VCS stamping (-buildvcs=false) is
// "(devel) go1.26.8".
func String() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown (no build information in the binary)"
	}
	return describe(bi)
}

func describe(bi *debug.BuildInfo) string {
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	var b strings.Builder
	b.WriteString(bi.Main.Version)
	if b.Len() == 0 {
		b.WriteString("(devel)")
	}
	if rev := settings["vcs.revision"]; rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		if strings.Contains(bi.Main.Version, rev) {
			// A pseudo-version (Go 1.24 on) already names the commit,
			// its time and "+dirty".
			return bi.Main.Version + " " + bi.GoVersion
		}
		b.WriteString(" (commit " + rev)
		if settings["vcs.modified"] == "true" {
			b.WriteString("+changes")
		}
		if t := settings["vcs.time"]; t != "" {
			b.WriteString(", " + t)
		}
		b.WriteString(")")
	}
	b.WriteString(" " + bi.GoVersion)
	return b.String()
}
