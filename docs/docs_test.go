package docs

// The documentation must name what the code defines: every string
// constant and list item of api/subjects.go, every code and reason of
// api/errors.go (with each code's HTTP status in a table row), and every
// flag and FLEXIQ_ variable of cmd/node/main.go.

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/flexiq/flexiq/api"
	"github.com/flexiq/flexiq/bus"
)

// docs is the text of every docs/*.md, and its lines.
func docs(t *testing.T) (string, []string) {
	t.Helper()
	files, err := filepath.Glob("*.md")
	if err != nil || len(files) == 0 {
		t.Fatalf("no docs/*.md found (err %v)", err)
	}
	var b strings.Builder
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(data)
		b.WriteByte('\n')
	}
	return b.String(), strings.Split(b.String(), "\n")
}

// parseGo parses one source file of the repository (path relative to the
// repository root).
func parseGo(t *testing.T, path string) *ast.File {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), filepath.Join("..", path), nil, 0)
	if err != nil {
		t.Fatalf("parse %s: %v", path, err)
	}
	return f
}

// stringLit is the value of a string literal, ok false for anything else.
func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// stringConsts returns the string constants of a file by name: those of
// the given type name ("" = any), with their literal values.
func stringConsts(f *ast.File, typ string) map[string]string {
	out := map[string]string{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if typ != "" {
				id, ok := vs.Type.(*ast.Ident)
				if !ok || id.Name != typ {
					continue
				}
			}
			for i, name := range vs.Names {
				if i < len(vs.Values) {
					if v, ok := stringLit(vs.Values[i]); ok {
						out[name.Name] = v
					}
				}
			}
		}
	}
	return out
}

// mentions reports whether text holds v as a whole token: not as a part
// of a longer name (fq.v1.token.revoked is not mentioned by
// fq.v1.token.revokedX, nor ABORTED by ABORTED_X).
func mentions(text, v string) bool {
	re := regexp.MustCompile(`(^|[^A-Za-z0-9_.-])` + regexp.QuoteMeta(v) + `($|[^A-Za-z0-9_.-]|\.($|[^A-Za-z0-9_-]))`)
	return re.MatchString(text)
}

// missing reports every want (name → text) absent from text, sorted.
func missing(text string, want map[string]string) []string {
	var out []string
	for name, v := range want {
		if !mentions(text, v) {
			out = append(out, name+" = "+strconv.Quote(v))
		}
	}
	sort.Strings(out)
	return out
}

// TestSubjectsDocumented: every string constant of api/subjects.go (the
// subjects, the service and queue group names, the headers, the inbox
// prefix) and every subject of its lists appears in the docs.
func TestSubjectsDocumented(t *testing.T) {
	text, _ := docs(t)
	f := parseGo(t, "api/subjects.go")
	want := stringConsts(f, "")
	if len(want) < 15 {
		t.Fatalf("found only %d string constants in api/subjects.go: %v", len(want), want)
	}
	// The lists (RequestSubjects, DiscoverySubjects): their literal items.
	ast.Inspect(f, func(n ast.Node) bool {
		vs, ok := n.(*ast.ValueSpec)
		if !ok {
			return true
		}
		for i, name := range vs.Names {
			if i >= len(vs.Values) {
				continue
			}
			if cl, ok := vs.Values[i].(*ast.CompositeLit); ok {
				for j, e := range cl.Elts {
					if v, ok := stringLit(e); ok {
						want[name.Name+"["+strconv.Itoa(j)+"]"] = v
					}
				}
			}
		}
		return true
	})
	for _, s := range api.RequestSubjects {
		want["RequestSubjects:"+s] = s
	}
	if m := missing(text, want); len(m) > 0 {
		t.Errorf("api/subjects.go defines what docs/*.md never mention:\n  %s", strings.Join(m, "\n  "))
	}
}

// TestErrorsDocumented: every code and reason of api/errors.go appears in
// the docs, and the code→status table gives each code its HTTP status.
func TestErrorsDocumented(t *testing.T) {
	text, lines := docs(t)
	f := parseGo(t, "api/errors.go")
	codes := stringConsts(f, "Code")
	reasons := stringConsts(f, "Reason")
	if len(codes) < 10 || len(reasons) < 7 {
		t.Fatalf("found %d codes and %d reasons in api/errors.go", len(codes), len(reasons))
	}
	if m := missing(text, codes); len(m) > 0 {
		t.Errorf("codes of api/errors.go missing from docs/*.md:\n  %s", strings.Join(m, "\n  "))
	}
	if m := missing(text, reasons); len(m) > 0 {
		t.Errorf("reasons of api/errors.go missing from docs/*.md:\n  %s", strings.Join(m, "\n  "))
	}
	// A table row naming the code and ending in its status.
	for _, code := range codes {
		status := strconv.Itoa(api.HTTPStatus(api.Code(code)))
		row := regexp.MustCompile("^\\|[^|]*`" + regexp.QuoteMeta(code) + "`[^|]*\\| *" + status + " *\\|$")
		found := false
		for _, l := range lines {
			if row.MatchString(strings.TrimSpace(l)) {
				found = true
				break
			}
		}
		if !found {
			t.Errorf("no table row in docs/*.md gives %s its HTTP status %s (| `%s` | %s |)", code, status, code, status)
		}
	}
	if !strings.Contains(text, api.Unauthenticated().Message) { // a sentence, not a name
		t.Errorf("docs/*.md do not quote the UNAUTHENTICATED message %q", api.Unauthenticated().Message)
	}
}

var envName = regexp.MustCompile(`^FLEXIQ_[A-Z0-9_]+$`)

// nodeOptions reads cmd/node/main.go: the {"flag", "FLEXIQ_…", …} entries
// (flag and env twins), flags registered directly on the flag set
// (fs.Var(…, "name", …)), and every FLEXIQ_… variable it reads.
func nodeOptions(t *testing.T) (pairs map[string]string, flags, envs map[string]bool) {
	t.Helper()
	f := parseGo(t, "cmd/node/main.go")
	pairs, flags, envs = map[string]string{}, map[string]bool{}, map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CompositeLit:
			if len(n.Elts) >= 2 {
				name, ok1 := stringLit(n.Elts[0])
				env, ok2 := stringLit(n.Elts[1])
				if ok1 && ok2 && envName.MatchString(env) {
					pairs[name] = env
					flags[name] = true
				}
			}
		case *ast.CallExpr:
			sel, ok := n.Fun.(*ast.SelectorExpr)
			if !ok || !strings.HasSuffix(sel.Sel.Name, "Var") || len(n.Args) < 2 {
				break
			}
			if x, ok := sel.X.(*ast.Ident); !ok || x.Name != "fs" {
				break
			}
			if name, ok := stringLit(n.Args[1]); ok {
				flags[name] = true
			}
		case *ast.BasicLit:
			if v, ok := stringLit(n); ok && envName.MatchString(v) {
				envs[v] = true
			}
		}
		return true
	})
	return pairs, flags, envs
}

// TestNodeFlagsDocumented: every fq-node flag and FLEXIQ_… variable
// appears in the docs, each flag as --name on one line with its twin.
func TestNodeFlagsDocumented(t *testing.T) {
	text, lines := docs(t)
	pairs, flags, envs := nodeOptions(t)
	if len(pairs) < 15 || len(flags) < 20 || len(envs) < 20 {
		t.Fatalf("cmd/node/main.go: found %d flag/env pairs, %d flags, %d variables: has its shape changed?", len(pairs), len(flags), len(envs))
	}
	var bad []string
	for name := range flags {
		if !strings.Contains(text, "`--"+name+"`") {
			bad = append(bad, "flag `--"+name+"`")
		}
	}
	for env := range envs {
		if !strings.Contains(text, "`"+env+"`") {
			bad = append(bad, "variable `"+env+"`")
		}
	}
	for name, env := range pairs {
		found := false
		for _, l := range lines {
			if strings.Contains(l, "`--"+name+"`") && strings.Contains(l, "`"+env+"`") {
				found = true
				break
			}
		}
		if !found {
			bad = append(bad, "no line pairs `--"+name+"` with its variable `"+env+"`")
		}
	}
	sort.Strings(bad)
	if len(bad) > 0 {
		t.Errorf("cmd/node/main.go defines what docs/*.md never mention:\n  %s", strings.Join(bad, "\n  "))
	}
}

// TestNoContractOutsideTheRepository: the repository explains itself. No
// Go source, .proto or Markdown file cites a specification kept outside
// it: neither its sections ("SPEC" then a section sign, also across a
// comment's line break) nor a path into the shared directory next to the
// repository. Cite the docs/*.md page instead. The generated code of
// grpcapi/flexiqv1 is skipped (its comments come from the .proto, which
// is checked), and so are node_modules and .git.
func TestNoContractOutsideTheRepository(t *testing.T) {
	// Both built from parts, so that this file does not match itself.
	section := regexp.MustCompile(`SPEC(\s|//)*` + "\u00a7")
	outside := "../" + "shared"
	const root = ".."
	var bad []string
	checked := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if d.Name() == ".git" || d.Name() == "node_modules" || rel == "grpcapi/flexiqv1" {
				return filepath.SkipDir
			}
			return nil
		}
		switch filepath.Ext(rel) {
		case ".go", ".md", ".proto":
		default:
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		checked++
		text := string(data)
		line := func(at int) int { return 1 + strings.Count(text[:at], "\n") }
		for _, m := range section.FindAllStringIndex(text, -1) {
			bad = append(bad, rel+":"+strconv.Itoa(line(m[0]))+": cites a section of the outside specification")
		}
		for at := 0; ; {
			i := strings.Index(text[at:], outside)
			if i < 0 {
				break
			}
			bad = append(bad, rel+":"+strconv.Itoa(line(at+i))+": points at "+outside)
			at += i + len(outside)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked only %d .go, .proto and .md files under the repository root: has the layout changed?", checked)
	}
	if len(bad) > 0 {
		t.Errorf("the repository must explain itself: cite docs/*.md, not a contract outside it:\n  %s", strings.Join(bad, "\n  "))
	}
}

// README's external NATS server configuration is what fq-node nats-config
// prints (and the tests run nats-server with): it cannot go stale.
func TestREADMEShowsTheExternalServerConfig(t *testing.T) {
	conf, err := bus.ExternalServerConfig("example-secret", "0.0.0.0:4222")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(readme), conf) {
		t.Fatal("README's external NATS server configuration differs from bus.ExternalServerConfig(\"example-secret\", \"0.0.0.0:4222\")")
	}
}
