package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The repository's documents link to each other by relative path and
// heading anchor (README.md, docs/*.md, sdk/node/README.md). A moved
// section or a renamed heading breaks such a link silently on a rendered
// page; this test finds it.

// mdLink is an inline Markdown link's target: ](target) or ](target "title").
var mdLink = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// codeSpan is an inline code span.
var codeSpan = regexp.MustCompile("`[^`]*`")

// headingSlug is the anchor GitHub gives a heading: lower case, letters,
// digits, '-' and '_' kept, spaces made '-', everything else dropped.
func headingSlug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteByte('-')
		}
	}
	return b.String()
}

// anchors lists the heading anchors of a Markdown text, outside fenced
// code blocks; a repeated heading's later anchors get -1, -2, ….
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if fenced || !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimLeft(line, "#")
		if !strings.HasPrefix(h, " ") {
			continue
		}
		slug := headingSlug(h)
		if n := seen[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// withoutCode drops fenced code blocks and inline code spans, where a
// "](…)" is text, not a link.
func withoutCode(text string) string {
	var b strings.Builder
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			b.WriteString(codeSpan.ReplaceAllString(line, ""))
			b.WriteByte('\n')
		}
	}
	return b.String()
}

func TestLinksBetweenDocumentsResolve(t *testing.T) {
	files := []string{"../README.md", "../sdk/node/README.md"}
	more, err := filepath.Glob("*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, more...)
	texts := map[string]string{}
	read := func(path string) (string, bool) {
		path = filepath.Clean(path)
		if text, ok := texts[path]; ok {
			return text, true
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return "", false
		}
		texts[path] = string(data)
		return texts[path], true
	}
	checked := 0
	for _, file := range files {
		text, ok := read(file)
		if !ok {
			t.Fatalf("%s: cannot read it", file)
		}
		for _, m := range mdLink.FindAllStringSubmatch(withoutCode(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := filepath.Clean(file)
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), path)
				if _, err := os.Stat(dest); err != nil {
					t.Errorf("%s: link to %q: no such file", file, target)
					continue
				}
			}
			checked++
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			destText, ok := read(dest)
			if !ok {
				t.Errorf("%s: link to %q: cannot read %s", file, target, dest)
				continue
			}
			if !anchors(destText)[anchor] {
				t.Errorf("%s: link to %q: %s has no heading with that anchor", file, target, dest)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d links checked: the link pattern no longer matches the documents", checked)
	}
}

func TestHeadingSlug(t *testing.T) {
	for heading, want := range map[string]string{
		"A noisy neighbour (`fq bench flood`)":             "a-noisy-neighbour-fq-bench-flood",
		"Where the throughput aims stand":                  "where-the-throughput-aims-stand",
		"`fq bench flood`: a noisy neighbour":              "fq-bench-flood-a-noisy-neighbour",
		"Many nodes (`go test -run '^$' -bench 'Cluster…'": "many-nodes-go-test--run---bench-cluster",
	} {
		if got := headingSlug(heading); got != want {
			t.Errorf("headingSlug(%q) = %q, want %q", heading, got, want)
		}
	}
}
