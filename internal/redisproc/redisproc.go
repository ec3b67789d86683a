// Package redisproc starts throwaway redis-server processes on free loopback ports, for the load test and the benchmarks, and lends its port picking and process handling to the tests' launcher (redistest).
package redisproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Binary is the executable Start looks up in PATH.
const Binary = "redis-server"

// ErrNotFound is Start's error when no redis-server is in PATH.
var ErrNotFound = errors.New(Binary + " not found in PATH (apt-get install redis-server)")

const (
	// attempts is how many free ports Start tries: a port picked free may
	// be taken before the server binds it.
	attempts = 5
	// readyTimeout bounds how long one attempt waits for PING.
	readyTimeout = 10 * time.Second
	// exitTimeout bounds how long Stop waits for the killed server.
	exitTimeout = 10 * time.Second
)

// Server is a throwaway redis-server: on a free 127.0.0.1 port (never 6379,
// so that a Redis the machine runs for other purposes is never touched),
// without persistence, in its own temporary directory and process group.
// Stop kills it; on Linux the kernel also kills it when its parent dies.
type Server struct {
	Port int
	Bin  string // the redis-server binary
	dir  string
	cmd  *exec.Cmd
	done chan struct{} // closed once the process is reaped
}

// Available reports whether Start can find a redis-server.
func Available() bool {
	_, err := exec.LookPath(Binary)
	return err == nil
}

// Start starts a redis-server and waits until it answers PING, at most
// ctx's deadline and 10 s per port tried. Without one in PATH it returns
// ErrNotFound.
func Start(ctx context.Context) (*Server, error) {
	bin, err := exec.LookPath(Binary)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotFound, err)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var errs []error
	for range attempts {
		s, err := startOnce(ctx, bin)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, fmt.Errorf("starting a throwaway %s: %w", Binary, errors.Join(errs...))
}

// startOnce starts the server on one free port; on failure nothing is left
// running and its directory is removed.
func startOnce(ctx context.Context, bin string) (*Server, error) {
	ports, err := FreePorts(1)
	if err != nil {
		return nil, err
	}
	port := ports[0]
	dir, err := os.MkdirTemp("", "sluice-redis-")
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin,
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--protected-mode", "no",
		"--save", "", "--appendonly", "no", "--daemonize", "no",
		"--dir", dir, "--logfile", "redis.log",
	)
	cmd.Dir = dir
	cmd.SysProcAttr = SysProcAttr()
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &Server{Port: port, Bin: bin, dir: dir, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(readyTimeout)
	for {
		if ping(s.Addr()) {
			return s, nil
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(dir, "redis.log"))
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("%s on port %d exited: %s", Binary, port, lastLine(string(log)))
		case <-ctx.Done():
			s.Stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return nil, fmt.Errorf("%s on port %d did not answer PING within %v", Binary, port, readyTimeout)
		}
	}
}

// ping reports whether addr answers PING, within a second.
func ping(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if err != nil {
		return false
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.HasPrefix(line, "+PONG")
}

// lastLine returns the last line of s, for an error message.
func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// Addr is the server's address.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// Done is closed once the server's process has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// Stop kills the server (its whole process group), waits for it at most
// 10 s and removes its directory. It may be called more than once.
func (s *Server) Stop() {
	if s == nil || s.cmd == nil {
		return
	}
	KillGroup(s.cmd.Process)
	select {
	case <-s.done:
	case <-time.After(exitTimeout):
	}
	_ = os.RemoveAll(s.dir)
	s.cmd = nil
}
