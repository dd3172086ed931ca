package flexiqv1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
)

// protocVersion matches the header lines naming protoc's version: a
// comment, and the one part of the output that depends on the machine's
// protoc rather than on the .proto and the pinned generators.
var protocVersion = regexp.MustCompile(`(?m)^// (\t|- )protoc +\S+$`)

// The checked-in code is what scripts/protogen.sh generates from
// proto/flexiq/v1/flexiq.proto: a change to the .proto without
// regenerating (or a hand edit of the generated code) fails here.
func TestGeneratedCodeMatchesTheProto(t *testing.T) {
	if _, err := exec.LookPath("protoc"); err != nil {
		if os.Getenv("FLEXIQ_REQUIRE_ALL_BACKENDS") == "" {
			t.Skip("protoc is not installed (Debian: protobuf-compiler, libprotobuf-dev), so the generated code cannot be checked against flexiq.proto; scripts/protogen.sh installs it")
		}
		t.Fatalf("protoc is not installed and FLEXIQ_REQUIRE_ALL_BACKENDS is set: %v", err)
	}
	out := t.TempDir()
	cmd := exec.Command("bash", filepath.Join("..", "..", "scripts", "protogen.sh"), out)
	cmd.Env = append(os.Environ(), "PROTOGEN_NO_INSTALL=1")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("scripts/protogen.sh: %v\n%s", err, msg)
	}
	fresh := generated(t, filepath.Join(out, "grpcapi", "flexiqv1"))
	checkedIn := generated(t, ".")
	if len(fresh) == 0 {
		t.Fatal("scripts/protogen.sh generated nothing")
	}
	for name, want := range fresh {
		got, ok := checkedIn[name]
		if !ok {
			t.Errorf("%s is generated but not checked in: run scripts/protogen.sh", name)
			continue
		}
		if !bytes.Equal(protocVersion.ReplaceAll(got, nil), protocVersion.ReplaceAll(want, nil)) {
			t.Errorf("%s differs from what flexiq.proto generates: run scripts/protogen.sh (or go generate ./grpcapi)", name)
		}
	}
	for name := range checkedIn {
		if _, ok := fresh[name]; !ok {
			t.Errorf("%s is checked in but no longer generated: remove it", name)
		}
	}
}

// generated reads the generated files (*.pb.go) of dir.
func generated(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	names, err := filepath.Glob(filepath.Join(dir, "*.pb.go"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(names)
	out := map[string][]byte{}
	for _, n := range names {
		data, err := os.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(n)] = data
	}
	return out
}
