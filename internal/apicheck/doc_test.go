package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUndocumented(t *testing.T) {
	t.Parallel()
	const src = `package p

// Documented is.
func Documented() {}

func Bare() {}

func unexported() {}

// T is.
type T struct{}

func (T) Method() {}

// Doc is.
func (*T) Doc() {}

type u struct{}

func (u) Hidden() {}

type (
	// In is.
	In int
	Out int
)

// Group covers its members.
const (
	A = 1
	B = 2
)

var (
	C = 1 // C is.
	D = 2
	e = 3
)

// I is.
type I interface {
	// M is.
	M()
	N() // N is.
	O()
}

type G[P any] struct{}

func (*G[P]) Do() {}
`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "p.go", src, parser.ParseComments)
	require.NoError(t, err)
	assert.Equal(t, []string{
		"p.go:6: Bare",
		"p.go:13: T.Method",
		"p.go:25: Out",
		"p.go:36: D",
		"p.go:45: I.O",
		"p.go:48: G",
		"p.go:50: G.Do",
	}, undocumented(fset, []*ast.File{f}))
}
