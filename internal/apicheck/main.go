// Command apicheck lists the exported names of sluice's machinery packages
// (window, localcache, syncer) that no other package uses, and exits with
// status 1 if there is any. The machinery packages export only what the
// library's own packages use of each other; the rest belongs unexported (or
// in the package's export_test.go).
//
// Run it from the repository's root, in the workspace:
//
//	go run ./internal/apicheck
//
// Counted, for each exported top-level name and each exported method of an
// exported type:
//   - uses from the non-test files of every other package of the workspace,
//     type-checked against the compiler's export data (`go list -export`);
//   - uses from the test files of the library's other packages, by name
//     (pkg.Name for top-level names, .Name for methods);
//   - a method implementing an interface method that another package uses,
//     and the methods of an exported interface that another package uses;
//   - a type named by another package, or the type of an expression there.
//
// The test files of the package itself are not uses. The report says which
// names only other modules (the load test, the benchmarks, the system tests)
// or only the library's other tests keep exported.
//
// It also fails on any exported name of the library's packages outside
// internal/ (the public ones and the machinery) without a doc comment.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
)

// library is the library module's path.
var library = "github.com/sluicehq/sluice"

// machinery are the packages checked.
var machinery = []string{library + "/window", library + "/localcache", library + "/syncer"}

// listDir, listPattern and listEnv say where and what go list lists: the
// workspace of the current directory, unless a test says otherwise.
var (
	listDir     = ""
	listPattern = "work"
	listEnv     []string
)

// report is what the check found: the keys ("path.Name" or
// "path.Type.Method") of the machinery's exported names used by no other
// package, by the library's other packages' tests only, by other modules
// only, how many names it checked, and the exported names of any package of
// the library outside internal/ that have no doc comment.
type report struct {
	unused, onlyTests, onlyOther []string
	undocumented                 []string // "pkg/file.go:line: Name", every public package
	checked                      int
}

// conventional are methods the standard library calls through its own
// interfaces (fmt, errors, encoding): exported whoever calls them.
var conventional = map[string]bool{
	"String": true, "GoString": true, "Format": true, "Error": true, "Unwrap": true,
	"Is": true, "As": true, "MarshalJSON": true, "UnmarshalJSON": true,
	"MarshalText": true, "UnmarshalText": true, "LogValue": true,
}

type listed struct {
	ImportPath   string
	Name         string
	Dir          string
	GoFiles      []string
	TestGoFiles  []string
	XTestGoFiles []string
	Export       string
	Standard     bool
	DepOnly      bool
	Module       *struct{ Path string }
}

// use says where a name is used: in the library's non-test code, in the
// library's other tests, in another module.
type use struct{ lib, libTest, other bool }

func main() {
	count := flag.Bool("count", false, "print how many names the library exports (top-level names and methods of exported types, outside internal/) and exit")
	flag.BoolVar(&listNames, "names", false, "with -count, print every counted name too")
	flag.Parse()
	run := run
	if *count {
		run = countNames
	}
	if err := run(os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "apicheck:", err)
		os.Exit(1)
	}
}

func run(out io.Writer) error {
	r, err := analyse()
	if err != nil {
		return err
	}
	section := func(title string, ks []string) {
		if len(ks) == 0 {
			return
		}
		fmt.Fprintf(out, "%s (%d):\n", title, len(ks))
		for _, k := range ks {
			fmt.Fprintln(out, "\t"+strings.TrimPrefix(k, library+"/"))
		}
	}
	section("exported, used by other modules only (the load test, benchmarks, system tests)", r.onlyOther)
	section("exported, used by the library's other packages' tests only", r.onlyTests)
	section("exported, used by no other package", r.unused)
	if len(r.unused) > 0 {
		return errors.New("unexport these names (or move them to the package's export_test.go)")
	}
	if len(r.undocumented) > 0 {
		section("exported without a doc comment", r.undocumented)
		return errors.New("document these names")
	}
	fmt.Fprintf(out, "apicheck: every exported name of %d in %s is used by another package\n",
		r.checked, strings.Join(trim(machinery), ", "))
	return nil
}

// analyse finds where each exported name of the machinery is used.
func analyse() (report, error) {
	var r report
	pkgs, fset, imp, err := load()
	if err != nil {
		return r, err
	}

	// The names to account for.
	names := map[string]*use{} // "pkg.Name" or "pkg.Type.Method"
	var order []string
	add := func(k string) { names[k] = &use{}; order = append(order, k) }
	var typesOf []*types.Named
	for _, path := range machinery {
		pkg, err := imp.Import(path)
		if err != nil {
			return r, err
		}
		scope := pkg.Scope()
		for _, n := range scope.Names() {
			obj := scope.Lookup(n)
			if !obj.Exported() {
				continue
			}
			add(key(obj))
			tn, ok := obj.(*types.TypeName)
			if !ok || tn.IsAlias() {
				continue
			}
			named, ok := tn.Type().(*types.Named)
			if !ok {
				continue
			}
			typesOf = append(typesOf, named)
			if iface, ok := named.Underlying().(*types.Interface); ok {
				for m := range iface.ExplicitMethods() {
					if m.Exported() {
						add(key(m))
					}
				}
				continue
			}
			for m := range named.Methods() {
				if m.Exported() {
					add(key(m))
				}
			}
		}
	}
	isMachinery := func(p *types.Package) bool {
		return p != nil && contains(machinery, p.Path())
	}

	// Uses in other packages' non-test code, type-checked.
	var usedIface []ifaceUse // interface methods called, and by whom
	mark := func(k string, lib bool) {
		if u := names[k]; u != nil {
			if lib {
				u.lib = true
			} else {
				u.other = true
			}
		}
	}
	for _, p := range pkgs {
		if p.Standard || p.DepOnly || p.Module == nil || len(p.GoFiles) == 0 {
			continue
		}
		lib := p.Module.Path == library
		var files []*ast.File
		for _, f := range p.GoFiles {
			af, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, 0)
			if err != nil {
				return r, err
			}
			files = append(files, af)
		}
		info := &types.Info{Uses: map[*ast.Ident]types.Object{}, Types: map[ast.Expr]types.TypeAndValue{}}
		conf := types.Config{Importer: imp, Error: func(error) {}}
		if _, err := conf.Check(p.ImportPath, fset, files, info); err != nil && len(info.Uses) == 0 {
			return r, fmt.Errorf("type-checking %s: %w", p.ImportPath, err)
		}
		other := func(q *types.Package) bool { return isMachinery(q) && q.Path() != p.ImportPath }
		for _, obj := range info.Uses {
			if f, ok := obj.(*types.Func); ok && isInterfaceMethod(f) {
				usedIface = append(usedIface, ifaceUse{f, p.ImportPath, lib})
			}
			if other(obj.Pkg()) {
				mark(key(obj), lib)
			}
		}
		for _, tv := range info.Types {
			t := tv.Type
			if ptr, ok := t.(*types.Pointer); ok {
				t = ptr.Elem()
			}
			if n, ok := t.(*types.Named); ok && other(n.Obj().Pkg()) {
				mark(key(n.Origin().Obj()), lib)
			}
		}
	}
	// Methods that implement an interface method used elsewhere, and the
	// methods of a used exported interface.
	for _, named := range typesOf {
		obj := named.Obj()
		if iface, ok := named.Underlying().(*types.Interface); ok {
			u := names[key(obj)]
			for m := range iface.ExplicitMethods() {
				if mu := names[key(m)]; mu != nil && u != nil {
					mu.lib = mu.lib || u.lib
					mu.other = mu.other || u.other
				}
			}
			continue
		}
		for m := range named.Methods() {
			mu := names[key(m)]
			if mu == nil {
				continue
			}
			if conventional[m.Name()] {
				mu.lib = true
				continue
			}
			for _, iu := range usedIface {
				if iu.f.Name() != m.Name() || iu.caller == obj.Pkg().Path() {
					continue
				}
				iface := iu.f.Type().(*types.Signature).Recv().Type().Underlying().(*types.Interface)
				if types.Implements(named, iface) || types.Implements(types.NewPointer(named), iface) {
					if iu.lib {
						mu.lib = true
					} else {
						mu.other = true
					}
				}
			}
		}
	}

	// Uses in the library's other packages' tests, by name.
	for _, p := range pkgs {
		if p.Module == nil || p.Module.Path != library || p.DepOnly {
			continue
		}
		for _, f := range append(append([]string{}, p.TestGoFiles...), p.XTestGoFiles...) {
			af, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, 0)
			if err != nil {
				return r, err
			}
			testUses(af, p.ImportPath, names)
		}
	}

	// A type in the signature of a used function or method is used as much
	// as that function: its users hold or pass values of it.
	for _, path := range machinery {
		pkg, _ := imp.Import(path)
		var funcs []*types.Func
		for _, n := range pkg.Scope().Names() {
			switch obj := pkg.Scope().Lookup(n).(type) {
			case *types.Func:
				funcs = append(funcs, obj)
			case *types.TypeName:
				if named, ok := obj.Type().(*types.Named); ok {
					funcs = append(funcs, slices.Collect(named.Methods())...)
				}
			}
		}
		for _, f := range funcs {
			fu := names[key(f)]
			if fu == nil {
				continue
			}
			sig := f.Type().(*types.Signature)
			for v := range chainVars(sig.Params(), sig.Results()) {
				t := v.Type()
				if ptr, ok := t.(*types.Pointer); ok {
					t = ptr.Elem()
				}
				if n, ok := t.(*types.Named); ok && n.Obj().Pkg() == pkg {
					if tu := names[key(n.Obj())]; tu != nil {
						tu.lib = tu.lib || fu.lib
						tu.libTest = tu.libTest || fu.libTest
						tu.other = tu.other || fu.other
					}
				}
			}
		}
	}

	for _, k := range order {
		u := names[k]
		switch {
		case u.lib:
		case u.libTest:
			r.onlyTests = append(r.onlyTests, k)
		case u.other:
			r.onlyOther = append(r.onlyOther, k)
		default:
			r.unused = append(r.unused, k)
		}
	}
	r.checked = len(order)

	// Doc comments, on every package of the library outside internal/.
	for _, p := range pkgs {
		if !public(p) {
			continue
		}
		var files []*ast.File
		for _, f := range p.GoFiles {
			af, err := parser.ParseFile(fset, filepath.Join(p.Dir, f), nil, parser.ParseComments)
			if err != nil {
				return r, err
			}
			files = append(files, af)
		}
		for _, u := range undocumented(fset, files) {
			r.undocumented = append(r.undocumented, strings.TrimPrefix(p.ImportPath, library)+"/"+u)
		}
	}
	return r, nil
}

// public says whether p is one of the library's packages whose exported
// names are counted: in the library module, outside internal/, not a
// command.
func public(p listed) bool {
	return !p.DepOnly && p.Module != nil && p.Module.Path == library && p.Name != "main" &&
		!strings.Contains(p.ImportPath+"/", "/internal/") && len(p.GoFiles) > 0
}

// testUses marks the names that a test file of another package uses:
// pkg.Name for the machinery packages it imports, and .Name selectors for
// methods (by name alone: the files are not type-checked).
func testUses(f *ast.File, self string, names map[string]*use) {
	local := map[string]string{} // local name -> machinery path
	for _, is := range f.Imports {
		path := strings.Trim(is.Path.Value, `"`)
		if !contains(machinery, path) || path == self {
			continue
		}
		name := path[strings.LastIndex(path, "/")+1:]
		if is.Name != nil {
			name = is.Name.Name
		}
		local[name] = path
	}
	if len(local) == 0 {
		return
	}
	methods := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok {
			if path, ok := local[id.Name]; ok {
				if u := names[path+"."+sel.Sel.Name]; u != nil {
					u.libTest = true
				}
				return true
			}
		}
		methods[sel.Sel.Name] = true
		return true
	})
	for k, u := range names {
		if strings.Count(strings.TrimPrefix(k, library+"/"), ".") == 2 && methods[k[strings.LastIndex(k, ".")+1:]] {
			// A method, by name, of a package the file imports.
			for _, path := range local {
				if strings.HasPrefix(k, path+".") {
					u.libTest = true
				}
			}
		}
	}
}

// chainVars yields the variables of tuples in turn.
func chainVars(tuples ...*types.Tuple) func(yield func(*types.Var) bool) {
	return func(yield func(*types.Var) bool) {
		for _, t := range tuples {
			for v := range t.Variables() {
				if !yield(v) {
					return
				}
			}
		}
	}
}

// listNames makes countNames print every name it counts.
var listNames bool

// countNames prints how many names each of the library's packages outside
// internal/ exports: top-level names, and the methods of exported types
// (an exported interface's methods included).
func countNames(out io.Writer) error {
	pkgs, _, imp, err := load()
	if err != nil {
		return err
	}
	total := 0
	for _, p := range pkgs {
		if !public(p) {
			continue
		}
		pkg, err := imp.Import(p.ImportPath)
		if err != nil {
			return err
		}
		n := 0
		for _, name := range pkg.Scope().Names() {
			obj := pkg.Scope().Lookup(name)
			if !obj.Exported() {
				continue
			}
			n++
			if listNames {
				fmt.Fprintf(out, "       %s.%s\n", p.ImportPath, name)
			}
			tn, ok := obj.(*types.TypeName)
			if !ok || tn.IsAlias() {
				continue
			}
			named, ok := tn.Type().(*types.Named)
			if !ok {
				continue
			}
			if iface, ok := named.Underlying().(*types.Interface); ok {
				for m := range iface.ExplicitMethods() {
					if m.Exported() {
						n++
						if listNames {
							fmt.Fprintf(out, "       %s.%s.%s\n", p.ImportPath, name, m.Name())
						}
					}
				}
				continue
			}
			for m := range named.Methods() {
				if m.Exported() {
					n++
					if listNames {
						fmt.Fprintf(out, "       %s.%s.%s\n", p.ImportPath, name, m.Name())
					}
				}
			}
		}
		fmt.Fprintf(out, "%5d  %s\n", n, p.ImportPath)
		total += n
	}
	fmt.Fprintf(out, "%5d  exported names in all\n", total)
	return nil
}

// key names an object: "path.Name", or "path.Type.Method" for a method.
func key(obj types.Object) string {
	if f, ok := obj.(*types.Func); ok {
		f = f.Origin()
		if recv := f.Type().(*types.Signature).Recv(); recv != nil {
			t := recv.Type()
			if ptr, ok := t.(*types.Pointer); ok {
				t = ptr.Elem()
			}
			if n, ok := t.(*types.Named); ok {
				return f.Pkg().Path() + "." + n.Origin().Obj().Name() + "." + f.Name()
			}
		}
		return f.Pkg().Path() + "." + f.Name()
	}
	if v, ok := obj.(*types.Var); ok {
		obj = v.Origin()
	}
	if obj.Pkg() == nil {
		return obj.Name()
	}
	return obj.Pkg().Path() + "." + obj.Name()
}

// ifaceUse is a call of an interface method: a method of a machinery type
// that implements it is used if the caller is another package.
type ifaceUse struct {
	f      *types.Func
	caller string
	lib    bool
}

func isInterfaceMethod(f *types.Func) bool {
	recv := f.Type().(*types.Signature).Recv()
	return recv != nil && types.IsInterface(recv.Type())
}

// load lists the workspace's packages (goList) and returns an importer of
// their compiled export data, with the file set it records positions in.
func load() ([]listed, *token.FileSet, types.ImporterFrom, error) {
	pkgs, err := goList()
	if err != nil {
		return nil, nil, nil, err
	}
	exports := map[string]string{}
	for _, p := range pkgs {
		if p.Export != "" {
			exports[p.ImportPath] = p.Export
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	}).(types.ImporterFrom)
	return pkgs, fset, imp, nil
}

func goList() ([]listed, error) {
	cmd := exec.Command("go", "list", "-e", "-export", "-deps", "-json=ImportPath,Name,Dir,GoFiles,TestGoFiles,XTestGoFiles,Export,Standard,DepOnly,Module", listPattern)
	cmd.Dir = listDir
	if listEnv != nil {
		cmd.Env = append(os.Environ(), listEnv...)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w\n%s", err, stderr.String())
	}
	var pkgs []listed
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			return nil, err
		}
		pkgs = append(pkgs, p)
	}
	sort.Slice(pkgs, func(i, j int) bool { return pkgs[i].ImportPath < pkgs[j].ImportPath })
	return pkgs, nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func trim(paths []string) []string {
	var out []string
	for _, p := range paths {
		out = append(out, strings.TrimPrefix(p, library+"/"))
	}
	return out
}
