package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestMain runs the example's main instead of the tests when the test
// binary is started as the example (TestSIGTERMClosesTheLimiter).
func TestMain(m *testing.M) {
	if args := os.Getenv("SLUICE_EXAMPLE_ARGS"); args != "" {
		os.Args = append([]string{os.Args[0]}, strings.Fields(args)...)
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSIGTERMClosesTheLimiter: a deploy stops a process with SIGTERM. The
// example closes its limiters then, as on Ctrl-C: each instance leaves the
// store's registry at once (else the fleet counts it for an InstanceTTL and
// the others' shares shrink) and gives back the leased units it did not
// use (else they count until their bucket leaves the window).
func TestSIGTERMClosesTheLimiter(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "SLUICE_EXAMPLE_ARGS=-listen 127.0.0.1:0,127.0.0.1:0 -redis "+srv.Addr())
	out, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := bufio.NewScanner(out)
	up := 0
	for up < 2 && lines.Scan() {
		if strings.HasPrefix(lines.Text(), "server: instance ") {
			up++
		}
	}
	require.Equal(t, 2, up, "both instances up")
	go func() { // drain the rest of the log
		for lines.Scan() {
		}
	}()
	client := srv.Client(t)
	ctx := context.Background()
	require.Equal(t, int64(2), client.ZCard(ctx, "example:instances").Val(), "both registered")

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		assert.NoError(t, err, "a clean exit")
	case <-time.After(30 * time.Second):
		t.Fatal("the example did not stop on SIGTERM")
	}
	assert.Zero(t, client.ZCard(ctx, "example:instances").Val(), "both left the registry")
}
