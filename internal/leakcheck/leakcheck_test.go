package leakcheck

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMain(m *testing.M) { VerifyTestMain(m) }

const sampleTrace = `goroutine 7 [running]:
main.work(0xc000012345, {0x1, 0x2})
	/src/main.go:12 +0x1d
main.main.func1()
	/src/main.go:20 +0x25
created by main.main in goroutine 1
	/src/main.go:19 +0x45

goroutine 1 [chan receive, 2 minutes]:
testing.(*T).Run(0xc0000a2000, {0x6a2f3e, 0x8}, 0x6b1e40)
	/go/src/testing/testing.go:2005 +0x485
testing.runTests.func1(0xc0000a2000)
	/go/src/testing/testing.go:2477 +0x37
...additional frames elided...

goroutine 18 gp=0xc000102380 m=nil [select]:
example.com/p.(*Syncer[...]).loop(...)
	/src/p/s.go:40
`

func TestParse(t *testing.T) {
	gs := parse(sampleTrace)
	require.Len(t, gs, 3)

	assert.Equal(t, 7, gs[0].id)
	assert.Equal(t, "running", gs[0].state)
	assert.Equal(t, []string{"main.work", "main.main.func1"}, gs[0].funcs, "the creator is not on the stack")
	assert.True(t, strings.HasPrefix(gs[0].stack, "goroutine 7 [running]:\nmain.work("))

	assert.Equal(t, 1, gs[1].id)
	assert.Equal(t, "chan receive, 2 minutes", gs[1].state)
	assert.Equal(t, "testing.(*T).Run", gs[1].top())
	assert.True(t, gs[1].has("testing.runTests.func1"))
	assert.True(t, ignored(gs[1]), "a test runner waiting for its test")

	assert.Equal(t, 18, gs[2].id)
	assert.Equal(t, "select", gs[2].state)
	assert.Equal(t, "example.com/p.(*Syncer[...]).loop", gs[2].top())
	assert.False(t, ignored(gs[2]))
}

// TestFindsLeak starts a goroutine that blocks until released: Find reports
// it, with its stack, until it has ended. It looks for 50ms, not Find's
// patience: the same loop, which gives up at its deadline either way.
func TestFindsLeak(t *testing.T) {
	release, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		blockUntil(release)
	}()

	err := findWithin(50 * time.Millisecond)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "1 goroutines leaked")
	assert.Contains(t, err.Error(), "leakcheck.blockUntil")

	close(release)
	<-done
	assert.NoError(t, Find())
}

//go:noinline
func blockUntil(c <-chan struct{}) { <-c }

// TestIgnoresParallelRunners checks that parallel tests waiting for their
// turn and their parents are not leaks.
func TestIgnoresParallelRunners(t *testing.T) {
	t.Run("group", func(t *testing.T) {
		for range 3 {
			t.Run("p", func(t *testing.T) {
				t.Parallel()
			})
		}
		assert.NoError(t, Find())
	})
}
