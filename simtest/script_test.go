package simtest

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var flagRewrite = flag.Bool("rewrite", false, "TestScripts: write each command's actual output into testdata")

// TestScripts runs the scenarios of testdata/*.txt, each one behaviour in
// readable steps, in the manner of etcd-io/raft's interaction tests
// (cockroachdb/datadriven): a command, "----", what it printed, a blank
// line. -rewrite regenerates the outputs; review the diff before keeping it.
func TestScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/*.txt")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scripts in testdata")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			runScript(t, file)
		})
	}
}

// block is one command of a script and the output it expects.
type block struct {
	pre  []string // comments and blank lines before the command
	cmd  string
	want []string
	line int
}

func parseScript(t *testing.T, text string) (blocks []block, trailer []string) {
	t.Helper()
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	var pre []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			pre = append(pre, l)
			continue
		}
		b := block{pre: pre, cmd: l, line: i + 1}
		pre = nil
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("line %d: %q wants a ---- line after it", i+1, l)
		}
		i += 2
		for ; i < len(lines) && lines[i] != ""; i++ {
			b.want = append(b.want, lines[i])
		}
		blocks = append(blocks, b)
	}
	return blocks, pre
}

func runScript(t *testing.T, file string) {
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	blocks, trailer := parseScript(t, string(data))
	sc := NewScript()
	defer sc.Close()
	var out strings.Builder
	for _, b := range blocks {
		got, err := sc.Do(b.cmd)
		if err != nil {
			t.Fatalf("%s:%d: %s: %v", file, b.line, b.cmd, err)
		}
		for _, p := range b.pre {
			if strings.TrimSpace(p) != "" { // a blank line already ends each block
				out.WriteString(p + "\n")
			}
		}
		out.WriteString(b.cmd + "\n----\n")
		if got != "" {
			out.WriteString(got + "\n")
		}
		out.WriteString("\n")
		if *flagRewrite {
			continue
		}
		if want := strings.Join(b.want, "\n"); got != want {
			t.Errorf("%s:%d: %s\n--- want\n%s\n--- got\n%s", file, b.line, b.cmd, want, got)
		}
	}
	for _, p := range trailer {
		if strings.TrimSpace(p) != "" {
			out.WriteString(p + "\n")
		}
	}
	if v := sc.violations(); len(v) > 0 && !*flagRewrite {
		t.Errorf("%s: %d violations, first: %v", file, len(v), v[0])
	}
	if *flagRewrite {
		text := strings.TrimRight(out.String(), "\n") + "\n"
		if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
