package redisproc

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestStartStop: Start gives a server on loopback, never 6379, that answers
// PING; Stop kills it, removes its directory, and may be called again.
func TestStartStop(t *testing.T) {
	NeedServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Start(ctx)
	require.NoError(t, err)
	t.Cleanup(s.Stop)
	assert.NotEqual(t, 6379, s.Port)
	assert.True(t, ping(s.Addr()), "it answers PING")
	dir := s.dir

	s.Stop()
	select {
	case <-s.Done():
	default:
		t.Fatal("the server still runs after Stop")
	}
	_, err = os.Stat(dir)
	assert.True(t, os.IsNotExist(err), "its directory is removed: %v", err)
	assert.False(t, ping(s.Addr()), "nothing answers on its port")
	s.Stop()
}

// TestStartNotFound: without a redis-server in PATH, Start says so with
// ErrNotFound.
func TestStartNotFound(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	assert.False(t, Available())
	_, err := Start(context.Background())
	assert.ErrorIs(t, err, ErrNotFound)
}

// TestStartCanceled: a context already done starts nothing.
func TestStartCanceled(t *testing.T) {
	NeedServer(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Start(ctx)
	assert.ErrorIs(t, err, context.Canceled)
}

// TestLastLine: the last line of a log, for an error message.
func TestLastLine(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"", ""},
		{"one\n", "one"},
		{"a\nb\nc\n", "c"},
	} {
		assert.Equal(t, c.want, lastLine(c.in), "%q", c.in)
	}
}
