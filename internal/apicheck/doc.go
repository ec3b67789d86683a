package main

import (
	"fmt"
	"go/ast"
	"go/token"
	"path/filepath"
)

// undocumented returns the exported names declared in files (one package's
// non-test files, parsed with comments) that carry no doc comment: functions,
// methods of exported types, types, the methods of exported interfaces, and
// constants and variables (a group's doc comment covers its members; a
// trailing line comment covers one). Each is "file:line: Name" or
// "file:line: Type.Method".
func undocumented(fset *token.FileSet, files []*ast.File) []string {
	var out []string
	miss := func(pos token.Pos, name string) {
		p := fset.Position(pos)
		out = append(out, fmt.Sprintf("%s:%d: %s", filepath.Base(p.Filename), p.Line, name))
	}
	for _, f := range files {
		for _, decl := range f.Decls {
			switch d := decl.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() || d.Doc != nil {
					continue
				}
				name := d.Name.Name
				if d.Recv != nil {
					recv := receiverName(d.Recv.List[0].Type)
					if !ast.IsExported(recv) {
						continue
					}
					name = recv + "." + name
				}
				miss(d.Pos(), name)
			case *ast.GenDecl:
				grouped := d.Lparen.IsValid()
				for _, spec := range d.Specs {
					switch s := spec.(type) {
					case *ast.TypeSpec:
						if !s.Name.IsExported() {
							continue
						}
						if s.Doc == nil && (grouped || d.Doc == nil) {
							miss(s.Pos(), s.Name.Name)
						}
						if it, ok := s.Type.(*ast.InterfaceType); ok {
							for _, m := range it.Methods.List {
								for _, n := range m.Names {
									if n.IsExported() && m.Doc == nil && m.Comment == nil {
										miss(n.Pos(), s.Name.Name+"."+n.Name)
									}
								}
							}
						}
					case *ast.ValueSpec:
						if s.Doc != nil || s.Comment != nil || d.Doc != nil {
							continue
						}
						for _, n := range s.Names {
							if n.IsExported() {
								miss(n.Pos(), n.Name)
							}
						}
					}
				}
			}
		}
	}
	return out
}

// receiverName is the type name of a method's receiver: T, *T, T[P] or *T[P].
func receiverName(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}
