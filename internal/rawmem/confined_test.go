package rawmem_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestUnsafeConfined: no Go file of the repository (every module of the
// workspace, tests included) imports unsafe but this package's, so that the
// memory tricks stay in one place with their rules.
func TestUnsafeConfined(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.work"))
	require.NoError(t, err, "the repository's root is two levels up")
	own, err := filepath.Abs(".")
	require.NoError(t, err)

	fset := token.NewFileSet()
	var files int
	var offenders []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); path != root && (n == "testdata" || strings.HasPrefix(n, ".") || strings.HasPrefix(n, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || filepath.Dir(path) == own {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		files++
		for _, im := range f.Imports {
			if p, _ := strconv.Unquote(im.Path.Value); p == "unsafe" {
				rel, _ := filepath.Rel(root, path)
				offenders = append(offenders, filepath.ToSlash(rel))
			}
		}
		return nil
	})
	require.NoError(t, err)
	assert.Greater(t, files, 100, "the walk found the repository's files")
	assert.Empty(t, offenders, "files that import unsafe outside internal/rawmem: use rawmem's functions instead")
}
