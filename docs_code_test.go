package sluice_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fragmentMark is the word of a Go block's info string, "```go fragment",
// that marks it as a fragment: code shown in part, which TestDocCode only
// parses. GitHub highlights the block as Go either way (it reads the first
// word of the info string).
const fragmentMark = "fragment"

// TestDocCode: every ```go block of README.md and docs/*.md is either a
// complete Go file (a package clause: a program with package main and func
// main, or a package of its own), which must be gofmt'ed and compile
// against the library as it is, or is marked "```go fragment" and must
// parse as declarations or as statements, gofmt'ed. The complete ones are
// type-checked and vetted together in one go vet (faster than go build, and
// as strict on what compiles: a package main without func main is caught
// here), in a directory inside this module so that they import the local
// packages, with no network (GOPROXY=off).
func TestDocCode(t *testing.T) {
	t.Parallel()
	pages, err := filepath.Glob("docs/*.md")
	require.NoError(t, err)
	pages = append([]string{"README.md"}, pages...)
	var whole []goBlock
	for _, page := range pages {
		src, err := os.ReadFile(page)
		require.NoError(t, err)
		for _, b := range goBlocks(page, string(src)) {
			switch {
			case b.fragment:
				switch formatted, err := parseFragment(b.code); {
				case err != nil:
					t.Errorf("%s:%d: fragment does not parse: %v", b.page, b.line, err)
				case !formatted:
					t.Errorf("%s:%d: the fragment is not gofmt'ed", b.page, b.line)
				}
			case b.complete():
				whole = append(whole, b)
			default:
				t.Errorf("%s:%d: a Go block with no package clause: make it a complete file that compiles, or mark it \"```go %s\"", b.page, b.line, fragmentMark)
			}
		}
	}
	require.NotEmpty(t, whole, "no complete Go program in the docs: the extraction is broken")
	workspace := inWorkspace(t)
	var vet []goBlock
	for _, b := range whole {
		if got, err := format.Source([]byte(b.code)); err == nil && string(got) != b.code {
			t.Errorf("%s:%d: the program is not gofmt'ed", b.page, b.line)
		}
		if problem := mainProblem(b.code); problem != "" {
			t.Errorf("%s:%d: %s", b.page, b.line, problem)
		}
		if m := otherModule(b.code); m != "" && !workspace {
			t.Logf("%s:%d: not vetted: it imports %s, a module of the workspace, and go.work is off", b.page, b.line, m)
			continue
		}
		vet = append(vet, b)
	}
	if len(vet) == 0 {
		return
	}
	if out, err := vetDocPrograms(t, vet); err != nil {
		t.Errorf("the docs' complete Go programs do not compile or go vet finds fault (%v):\n%s", err, out)
	}
}

// goBlock is one ```go block of a Markdown page.
type goBlock struct {
	page     string
	line     int // of the opening fence
	fragment bool
	code     string
}

var packageClause = regexp.MustCompile(`(?m)^package \w+\s*$`)

// complete says whether the block is a whole Go file.
func (b goBlock) complete() bool { return packageClause.MatchString(b.code) }

// goBlocks returns the fenced blocks of src whose info string starts with
// the word "go", their fence's indentation removed.
func goBlocks(page, src string) []goBlock {
	var blocks []goBlock
	var cur *goBlock
	var fence, indent string
	var body strings.Builder
	sc := bufio.NewScanner(strings.NewReader(src))
	sc.Buffer(make([]byte, 0, 1<<16), 1<<22)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		trimmed := strings.TrimLeft(line, " \t")
		if fence == "" {
			if !strings.HasPrefix(trimmed, "```") && !strings.HasPrefix(trimmed, "~~~") {
				continue
			}
			marks := trimmed[:len(trimmed)-len(strings.TrimLeft(trimmed, trimmed[:1]))]
			fence, indent = marks, line[:len(line)-len(trimmed)]
			info := strings.Fields(trimmed[len(marks):])
			if len(info) > 0 && info[0] == "go" {
				cur = &goBlock{page: page, line: n}
				for _, w := range info[1:] {
					cur.fragment = cur.fragment || w == fragmentMark
				}
				body.Reset()
			}
			continue
		}
		if strings.HasPrefix(trimmed, fence) && strings.TrimSpace(strings.TrimLeft(trimmed, fence[:1])) == "" {
			if cur != nil {
				cur.code = body.String()
				blocks = append(blocks, *cur)
				cur = nil
			}
			fence = ""
			continue
		}
		if cur != nil {
			body.WriteString(strings.TrimPrefix(line, indent))
			body.WriteByte('\n')
		}
	}
	return blocks
}

// parseFragment parses code as top-level declarations or, failing that, as
// the statements of a function body, and says whether gofmt leaves it as it
// is.
func parseFragment(code string) (formatted bool, err error) {
	fset := token.NewFileSet()
	const decls = "package p\n\n"
	if _, err := parser.ParseFile(fset, "", decls+code, parser.ParseComments); err == nil {
		got, err := format.Source([]byte(decls + code))
		return err == nil && string(got) == decls+code, nil
	}
	// As statements: indented one tab in a function, as gofmt would.
	lines := strings.SplitAfter(strings.TrimSuffix(code, "\n"), "\n")
	for i, l := range lines {
		if strings.TrimSpace(l) != "" {
			lines[i] = "\t" + l
		}
	}
	const head, tail = "package p\n\nfunc _() {\n", "\n}\n"
	body := head + strings.Join(lines, "") + tail
	if _, err := parser.ParseFile(fset, "", body, parser.ParseComments); err != nil {
		return false, fmt.Errorf("neither declarations nor statements: %w", err)
	}
	got, err := format.Source([]byte(body))
	return err == nil && string(got) == body, nil
}

// libraryModule is this module's path.
const libraryModule = "github.com/sluicehq/sluice"

// otherModule returns the first import of code from a module of this
// repository other than the library (grpclimit, systemtest ...: a
// directory with its own go.mod), which resolves only in the workspace; ""
// if there is none.
func otherModule(code string) string {
	f, err := parser.ParseFile(token.NewFileSet(), "", code, parser.ImportsOnly)
	if err != nil {
		return ""
	}
	for _, imp := range f.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		rest, ok := strings.CutPrefix(p, libraryModule+"/")
		if !ok {
			continue
		}
		for dir := rest; dir != "."; dir = path.Dir(dir) {
			if _, err := os.Stat(filepath.Join(filepath.FromSlash(dir), "go.mod")); err == nil {
				return libraryModule + "/" + dir
			}
		}
	}
	return ""
}

// inWorkspace reports whether the go command works in go.work's workspace
// here, where every module of the repository resolves.
func inWorkspace(t *testing.T) bool {
	t.Helper()
	out, err := exec.Command("go", "env", "GOWORK").Output()
	if err != nil {
		return false
	}
	w := strings.TrimSpace(string(out))
	return w != "" && w != "off"
}

// mainProblem says what is wrong with a package main that has no func
// main, which go vet does not report; "" if nothing is.
func mainProblem(code string) string {
	f, err := parser.ParseFile(token.NewFileSet(), "", code, 0)
	if err != nil || f.Name.Name != "main" {
		return "" // go vet reports a syntax error at its line
	}
	for _, d := range f.Decls {
		if fn, ok := d.(*ast.FuncDecl); ok && fn.Recv == nil && fn.Name.Name == "main" {
			return ""
		}
	}
	return "a package main with no func main: a program needs one (or name the package otherwise)"
}

// vetDocPrograms writes each block as the only file of its own package in
// a temporary directory of this module (its name starts with "_", so that
// ./... patterns skip it), and vets them all in one go vet. An error's
// position is given back as the page's line.
func vetDocPrograms(t *testing.T, blocks []goBlock) (string, error) {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("skipped: no go command on PATH to vet the docs' programs")
	}
	dir, err := os.MkdirTemp(".", "_doccode")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	args := []string{"vet"}
	for i, b := range blocks {
		pkg := filepath.Join(dir, fmt.Sprintf("b%d", i))
		require.NoError(t, os.Mkdir(pkg, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(pkg, "main.go"), []byte(b.code), 0o600))
		args = append(args, "./"+filepath.ToSlash(pkg))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goTool, args...)
	// No network: the module cache holds what the library needs. No VCS
	// stamp: a main package would ask git for the repository's state.
	cmd.Env = append(os.Environ(), "GOPROXY=off", "GOFLAGS=-buildvcs=false")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return pagePositions(out.String(), dir, blocks), err
}

// pagePositions rewrites "dir/bN/main.go:L:C" in the go command's output as
// the position on the page the block came from.
func pagePositions(out, dir string, blocks []goBlock) string {
	pos := regexp.MustCompile(`(?:\./)?` + regexp.QuoteMeta(filepath.ToSlash(filepath.Clean(dir))) + `/b(\d+)/main\.go:(\d+)`)
	return pos.ReplaceAllStringFunc(out, func(m string) string {
		sub := pos.FindStringSubmatch(m)
		i, _ := strconv.Atoi(sub[1])
		n, _ := strconv.Atoi(sub[2])
		if i >= len(blocks) {
			return m
		}
		return fmt.Sprintf("%s:%d", blocks[i].page, blocks[i].line+n)
	})
}

// TestGoBlocks: the extraction finds Go blocks only, by the first word of
// their info string, marks fragments, and strips a list item's indentation.
func TestGoBlocks(t *testing.T) {
	t.Parallel()
	src := "# T\n\n```go\npackage main\n\nfunc main() {}\n```\n\n" +
		"```sh\ngo run .\n```\n\n" +
		"```go fragment\nx := 1\n```\n\n" +
		"- item\n\n  ```go\n  l.Close()\n  ```\n\n" +
		"````markdown\n```go\nnot a block\n```\n````\n\n" +
		"```golang\nnot go\n```\n"
	got := goBlocks("p.md", src)
	require.Len(t, got, 3)
	assert.Equal(t, goBlock{page: "p.md", line: 3, code: "package main\n\nfunc main() {}\n"}, got[0])
	assert.True(t, got[0].complete())
	assert.Equal(t, goBlock{page: "p.md", line: 13, fragment: true, code: "x := 1\n"}, got[1])
	assert.Equal(t, goBlock{page: "p.md", line: 19, code: "l.Close()\n"}, got[2])
	assert.False(t, got[2].complete())
}

// TestOtherModule: an import of grpclimit (its own module) needs the
// workspace; the library's packages and others' do not.
func TestOtherModule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, imports, want string }{
		{"library", `"github.com/sluicehq/sluice/httplimit"`, ""},
		{"grpclimit", `"fmt"; "github.com/sluicehq/sluice/grpclimit"`, "github.com/sluicehq/sluice/grpclimit"},
		{"a package of another module", `"github.com/sluicehq/sluice/cmd/loadtest/internal/lat"`, "github.com/sluicehq/sluice/cmd/loadtest"},
		{"elsewhere", `"github.com/redis/go-redis/v9"`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.want, otherModule("package main\n\nimport ("+tc.imports+")\n"))
		})
	}
}

// TestMainProblem: a package main needs a func main (a method named main
// is not one); another package does not.
func TestMainProblem(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, code string
		ok         bool
	}{
		{"program", "package main\n\nfunc main() {}\n", true},
		{"no main", "package main\n\nfunc run() {}\n", false},
		{"a method main", "package main\n\ntype T struct{}\n\nfunc (T) main() {}\n", false},
		{"a library", "package shop\n\nfunc Run() {}\n", true},
		{"syntax error: go vet says", "package main\n\nfunc main( {}\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			assert.Equal(t, tc.ok, mainProblem(tc.code) == "", mainProblem(tc.code))
		})
	}
}

// TestParseFragment: a fragment parses as declarations or as statements;
// an elision written "..." outside a comment does not;
// gofmt's changes are found.
func TestParseFragment(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, code      string
		parses, gofmted bool
	}{
		{"statements", "l, err := sluice.New(opts)\nif err != nil {\n\treturn err\n}\n", true, true},
		{"declarations", "var errOverloaded = errors.New(\"overloaded\")\n\nfunc f() {}\n", true, true},
		{"commented elision", "a := 1\n// ...\nb := a\n", true, true},
		{"comments aligned", "x := T{\n\tA:   1, // one\n\tBcd: 2, // two\n}\n", true, true},
		{"comments not aligned", "x := T{\n\tA:   1,    // one\n\tBcd: 2, // two\n}\n", true, false},
		{"bare elision", "a := 1\n...\nb := a\n", false, false},
		{"unbalanced", "if ok {\n", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			gofmted, err := parseFragment(tc.code)
			if tc.parses {
				assert.NoError(t, err)
			} else {
				assert.Error(t, err)
			}
			assert.Equal(t, tc.gofmted, gofmted)
		})
	}
}

// TestPagePositions: a compiler error in a block is reported at the line
// of its page.
func TestPagePositions(t *testing.T) {
	t.Parallel()
	blocks := []goBlock{{page: "README.md", line: 20}, {page: "docs/x.md", line: 100}}
	out := "# ./_doccode1/b1\n_doccode1/b1/main.go:7:2: undefined: sluice.Nope\n./_doccode1/b0/main.go:3:1: x\n"
	want := "# ./_doccode1/b1\ndocs/x.md:107:2: undefined: sluice.Nope\nREADME.md:23:1: x\n"
	assert.Equal(t, want, pagePositions(out, "./_doccode1", blocks))
}
