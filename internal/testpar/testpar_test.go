package testpar

import (
	"flag"
	"os"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
)

// raised is what Short returned in TestMain.
var raised int

func TestMain(m *testing.M) {
	raised = Short(5)
	os.Exit(m.Run())
}

// TestShort: Short raises -test.parallel in the -short lane unless the
// command line set it, and returns the value in force either way.
func TestShort(t *testing.T) {
	f := flag.Lookup("test.parallel")
	got, err := strconv.Atoi(f.Value.String())
	assert.NoError(t, err)
	assert.Equal(t, got, raised, "Short returns the value in force")
	set := false
	flag.Visit(func(v *flag.Flag) { set = set || v == f })
	if testing.Short() && !set {
		assert.Equal(t, max(5, runtime.GOMAXPROCS(0)), got)
	}
	assert.Equal(t, got, Short(5), "a second call changes nothing")
}
