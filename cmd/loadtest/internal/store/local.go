package store

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ServerBinary is the executable StartLocal looks up in PATH.
const ServerBinary = "redis-server"

// ErrNoServer is StartLocal's error when no redis-server is in PATH.
var ErrNoServer = errors.New("no " + ServerBinary + " in PATH")

const (
	// localAttempts is how many free ports StartLocal tries: one picked
	// free may be taken before the server binds it.
	localAttempts = 5
	// localReady bounds how long one attempt waits for PING.
	localReady = 10 * time.Second
	// localExit bounds how long Close waits for the killed server.
	localExit = 10 * time.Second
)

// Local is a throwaway redis-server the load test started for its run: on
// a free 127.0.0.1 port, without persistence, in a temporary directory, in
// its own process group, killed with the load test (on Linux the kernel
// kills it if the load test dies first) and by Close.
type Local struct {
	cmd  *exec.Cmd
	dir  string
	done chan struct{} // closed once the process is reaped
}

// LocalAvailable reports whether StartLocal can find a redis-server.
func LocalAvailable() bool {
	_, err := exec.LookPath(ServerBinary)
	return err == nil
}

// StartLocal starts a throwaway redis-server and waits until it answers
// PING. Without one in PATH it returns ErrNoServer.
func StartLocal(ctx context.Context) (*Local, Target, error) {
	bin, err := exec.LookPath(ServerBinary)
	if err != nil {
		return nil, Target{}, fmt.Errorf("%w: %v", ErrNoServer, err)
	}
	dir, err := os.MkdirTemp("", "loadtest-redis-")
	if err != nil {
		return nil, Target{}, err
	}
	var errs []error
	for range localAttempts {
		port, err := freePort()
		if err != nil {
			errs = append(errs, err)
			continue
		}
		l, err := launch(ctx, bin, dir, port)
		if err == nil {
			addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			return l, Target{Addrs: []string{addr}}, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, Target{}, fmt.Errorf("starting a throwaway %s: %w", ServerBinary, errors.Join(errs...))
}

// freePort returns a 127.0.0.1 port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// launch starts the server on port and waits for its PING; on failure
// nothing is left running.
func launch(ctx context.Context, bin, dir string, port int) (*Local, error) {
	log := filepath.Join(dir, "redis.log")
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--dir", dir, "--logfile", log, "--daemonize", "no",
		"--save", "", "--appendonly", "no")
	cmd.Dir = dir
	cmd.SysProcAttr = serverAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	l := &Local{cmd: cmd, dir: dir, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(l.done)
	}()
	c := redis.NewClient(&redis.Options{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), MaxRetries: -1,
		DialTimeout: 200 * time.Millisecond, ReadTimeout: 200 * time.Millisecond})
	defer c.Close()
	deadline := time.Now().Add(localReady)
	for {
		pctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := c.Ping(pctx).Err()
		cancel()
		if err == nil {
			return l, nil
		}
		select {
		case <-l.done:
			tail, _ := os.ReadFile(log)
			return nil, fmt.Errorf("port %d: %s exited: %s", port, ServerBinary, lastLines(tail, 3))
		case <-ctx.Done():
			l.kill()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			l.kill()
			return nil, fmt.Errorf("port %d: no answer to PING within %v: %w", port, localReady, err)
		}
	}
}

// Close kills the server, waits for it (bounded) and removes its directory.
func (l *Local) Close() {
	l.kill()
	_ = os.RemoveAll(l.dir)
}

// kill stops the server's process group and waits for it, at most localExit.
func (l *Local) kill() {
	killGroup(l.cmd.Process)
	select {
	case <-l.done:
	case <-time.After(localExit):
	}
}

// lastLines returns the last n lines of b, for an error message.
func lastLines(b []byte, n int) string {
	end := len(b)
	for end > 0 && (b[end-1] == '\n' || b[end-1] == '\r') {
		end--
	}
	start := end
	for seen := 0; start > 0; start-- {
		if b[start-1] == '\n' {
			seen++
			if seen == n {
				break
			}
		}
	}
	return string(b[start:end])
}
