package redistest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

const (
	// readyTimeout bounds how long one start attempt waits for PING.
	readyTimeout = 10 * time.Second
	// startAttempts is how many ports Start tries when the port it picked
	// was taken between FreePort and bind.
	startAttempts = 5
	// restartAttempts is how many times Restart retries a busy port.
	restartAttempts = 10
	// restartBackoff is the pause between two Restart attempts.
	restartBackoff = 100 * time.Millisecond
	// exitTimeout bounds waiting for the process to exit after SIGKILL.
	exitTimeout = 10 * time.Second
	// stopTimeout bounds a graceful Stop before it falls back to SIGKILL.
	stopTimeout = 10 * time.Second
	// probeTimeout bounds a single readiness or health probe.
	probeTimeout = time.Second
	// pollInterval is the pause between two readiness or health probes.
	pollInterval = 20 * time.Millisecond
	// clientTimeout is the dial, read and write timeout of the clients
	// returned by Client.
	clientTimeout = time.Second

	// defaultServerBinary is the redis-server executable looked up in PATH.
	defaultServerBinary = "redis-server"
	// cliBinary is the redis-cli executable looked up in PATH.
	cliBinary = "redis-cli"
)

// errPortBusy marks a start attempt that failed because a port was in use.
var errPortBusy = errors.New("port already in use")

// config collects what the Options set.
type config struct {
	persistence bool
	args        []string
	// serverBinary overrides the redis-server executable name (tests use
	// it to simulate a machine without Redis).
	serverBinary string
	// cluster makes the server a cluster node (StartCluster only).
	cluster bool
}

// Option configures Start.
type Option func(*config)

// WithPersistence turns on the append-only file with appendfsync always, so
// that data survives Kill followed by Restart. Without it the server keeps
// nothing on disk and comes back empty after a restart.
func WithPersistence() Option {
	return func(c *config) { c.persistence = true }
}

// WithArgs appends extra redis-server command-line arguments, for example
// WithArgs("--maxmemory", "10mb"). They come last, so they override the
// defaults.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// Server is one throwaway redis-server process on a free loopback port.
//
// Kill, Restart, Stop, Pause and Resume report failures through the
// testing.TB given to Start, so call them from that test's goroutine.
type Server struct {
	tb      testing.TB
	cfg     config
	binary  string // resolved redis-server path
	dir     string
	logPath string // redis-server's own log file
	outPath string // redis-server's stdout and stderr (early config errors)
	port    int
	busPort int // cluster bus port; 0 unless this is a cluster node

	mu     sync.Mutex
	proc   *process // nil when not running
	paused bool
}

// process is one running redis-server.
type process struct {
	pid  int
	done chan struct{} // closed once the process has been reaped
	cmd  *exec.Cmd     // cmd.ProcessState is valid once done is closed
}

// Start starts a redis-server on a free 127.0.0.1 port and waits until it
// answers PING. The server has no persistence unless WithPersistence is
// given, runs in its own tb.TempDir(), and is killed (with its whole process
// group) and reaped in tb.Cleanup.
//
// Without redis-server in PATH, Start fails the test when the CI environment
// variable is "true" (CI must test against real Redis), and otherwise skips
// it with a message saying to install redis-server.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	cfg := config{serverBinary: defaultServerBinary}
	for _, o := range opts {
		o(&cfg)
	}
	return start(tb, cfg)
}

func start(tb testing.TB, cfg config) *Server {
	tb.Helper()
	bin, err := exec.LookPath(cfg.serverBinary)
	if err != nil {
		if os.Getenv("CI") == "true" {
			tb.Fatalf("redis-server not found: CI requires real Redis")
		}
		tb.Skipf("redistest: skipping, this test needs a real redis-server and none is in PATH (%v): "+
			"install redis-server (for example apt-get install redis-server, or brew install redis) to run it", err)
	}

	// TempDir before Cleanup: cleanups run last-in first-out, so the process
	// is dead before its directory is removed.
	dir := tb.TempDir()
	s := &Server{
		tb:      tb,
		cfg:     cfg,
		binary:  bin,
		dir:     dir,
		logPath: filepath.Join(dir, "redis.log"),
		outPath: filepath.Join(dir, "redis.out"),
	}
	tb.Cleanup(s.cleanup)

	nports := 1
	if cfg.cluster {
		nports = 2
	}
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(nports)
		if err != nil {
			tb.Fatalf("redistest: finding a free port: %v", err)
		}
		s.port = ports[0]
		if cfg.cluster {
			s.busPort = ports[1]
		}
		err = s.launch()
		if err == nil {
			break
		}
		if !errors.Is(err, errPortBusy) || attempt == startAttempts {
			tb.Fatalf("redistest: starting redis-server on %s (attempt %d): %v", s.Addr(), attempt, err)
		}
		tb.Logf("redistest: port of %s was taken, retrying with another one", s.Addr())
	}
	tb.Logf("redistest: redis-server listening on %s (dir %s)", s.Addr(), s.dir)
	return s
}

// args is the redis-server command line.
func (s *Server) args() []string {
	a := []string{
		"--port", strconv.Itoa(s.port),
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--logfile", s.logPath,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--save", "",
	}
	if s.cfg.persistence {
		a = append(a, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		a = append(a, "--appendonly", "no")
	}
	if s.cfg.cluster {
		a = append(a,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(s.dir, "nodes.conf"),
			"--cluster-node-timeout", "2000",
			// An explicit bus port: the default (port+10000) may be taken
			// or even beyond 65535 for ports from the ephemeral range.
			"--cluster-port", strconv.Itoa(s.busPort),
		)
	}
	return append(a, s.cfg.args...)
}

// launch starts the process once and waits until it is ready. On success
// s.proc is set; on failure nothing is left running. The caller holds s.mu
// or has not published s yet.
func (s *Server) launch() error {
	logOff, outOff := fileSize(s.logPath), fileSize(s.outPath)
	out, err := os.OpenFile(s.outPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(s.binary, s.args()...)
	cmd.Dir = s.dir
	cmd.Stdout, cmd.Stderr = out, out // *os.File: no copying goroutines
	cmd.SysProcAttr = sysProcAttr()
	err = cmd.Start()
	out.Close()
	if err != nil {
		return fmt.Errorf("exec %s: %w", s.binary, err)
	}
	p := &process{pid: cmd.Process.Pid, done: make(chan struct{}), cmd: cmd}
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()

	if err := s.waitReady(p); err != nil {
		if kerr := p.kill(); kerr != nil {
			err = errors.Join(err, kerr)
		}
		tail := s.logTail(logOff, outOff)
		if strings.Contains(tail, "Address already in use") {
			err = fmt.Errorf("%w: %w", errPortBusy, err)
		}
		return fmt.Errorf("%w\n--- tail of redis-server log (%s) ---\n%s", err, s.logPath, tail)
	}
	s.proc = p
	return nil
}

// waitReady waits until the process answers PING and is really the one
// listening on our port (not some other server that won the port).
func (s *Server) waitReady(p *process) error {
	// Abort a probe in flight as soon as the process exits: when the port
	// is taken by something that accepts but never answers, the probe would
	// otherwise hang until its timeout.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()

	deadline := time.Now().Add(readyTimeout)
	lastErr := errors.New("no probe yet")
	for {
		select {
		case <-p.done:
			return fmt.Errorf("redis-server exited during startup (%v)", p.cmd.ProcessState)
		default:
		}
		if lastErr = s.probe(ctx, p.pid); lastErr == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not answer PING within %v: %w", s.Addr(), readyTimeout, lastErr)
		}
		select {
		case <-p.done:
		case <-time.After(pollInterval):
		}
	}
}

// probe checks that the server answers PING and reports process_id pid.
func (s *Server) probe(ctx context.Context, pid int) error {
	r, err := do(ctx, s.Addr(), probeTimeout, []string{"PING"}, []string{"INFO", "server"})
	if err != nil {
		return err
	}
	if r[0] != "PONG" {
		return fmt.Errorf("PING answered %v", r[0])
	}
	info, _ := r[1].(string)
	if !strings.Contains(info, "\nprocess_id:"+strconv.Itoa(pid)+"\r") {
		return fmt.Errorf("%s is answered by another process, not pid %d", s.Addr(), pid)
	}
	return nil
}

// kill SIGKILLs the process group and waits until the process is reaped.
func (p *process) kill() error {
	select {
	case <-p.done:
		return nil // exited and reaped already
	default:
	}
	// Negative pid: the whole group (redis-server and any fork children).
	// SIGKILL also ends a SIGSTOPped process.
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(exitTimeout):
		return fmt.Errorf("redistest: redis-server pid %d still running %v after SIGKILL", p.pid, exitTimeout)
	}
}

// Addr returns the server's address, "127.0.0.1:PORT".
func (s *Server) Addr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// Port returns the server's TCP port. It stays the same across Restart.
func (s *Server) Port() int { return s.port }

// Client returns a new go-redis client for the server with small timeouts
// (DialTimeout, ReadTimeout and WriteTimeout of 1s; context deadlines are
// honoured) and a single dial per attempt, so commands against a killed
// server fail fast (the default MaxRetries still applies). It is closed in
// tb.Cleanup.
func (s *Server) Client(tb testing.TB) *redis.Client {
	tb.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  s.Addr(),
		DialTimeout:           clientTimeout,
		DialerRetries:         1,
		ReadTimeout:           clientTimeout,
		WriteTimeout:          clientTimeout,
		ContextTimeoutEnabled: true,
		// Maintenance notifications are a Redis Enterprise/Cloud feature;
		// probing for them only adds noise against a local server.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// Kill kills the server with SIGKILL (no shutdown, like a crash) and waits
// until the process has exited. Killing a stopped or killed server does
// nothing.
func (s *Server) Kill() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

func (s *Server) killLocked() {
	s.tb.Helper()
	if s.proc == nil {
		return
	}
	if err := s.proc.kill(); err != nil {
		s.tb.Errorf("%v", err)
	}
	s.proc, s.paused = nil, false
}

// Stop shuts the server down gracefully (SIGTERM, resuming it first if it is
// paused) and waits until it has exited, falling back to SIGKILL after 10s.
// Stopping a stopped or killed server does nothing.
func (s *Server) Stop() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	p := s.proc
	if p == nil {
		return
	}
	_ = syscall.Kill(p.pid, syscall.SIGTERM)
	if s.paused {
		_ = syscall.Kill(-p.pid, syscall.SIGCONT)
	}
	select {
	case <-p.done:
	case <-time.After(stopTimeout):
		s.tb.Logf("redistest: redis-server on %s ignored SIGTERM for %v, killing it", s.Addr(), stopTimeout)
		if err := p.kill(); err != nil {
			s.tb.Errorf("%v", err)
		}
	}
	s.proc, s.paused = nil, false
}

// Restart starts the server again on the same port after Kill or Stop (a
// running server is killed first) and waits until it answers PING. A server
// without persistence comes back empty; with WithPersistence it comes back
// with everything acknowledged before the kill. If the port is briefly busy,
// Restart retries a few times before failing the test.
func (s *Server) Restart() {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
	var err error
	for attempt := 1; attempt <= restartAttempts; attempt++ {
		if err = s.launch(); err == nil {
			return
		}
		if !errors.Is(err, errPortBusy) {
			break
		}
		time.Sleep(restartBackoff)
	}
	s.tb.Fatalf("redistest: restarting redis-server on %s: %v", s.Addr(), err)
}

// Pause freezes the server with SIGSTOP, to simulate a hung server:
// connections are still accepted by the kernel but nothing is answered.
// Undo it with Resume.
func (s *Server) Pause() {
	s.tb.Helper()
	s.signal("Pause", syscall.SIGSTOP)
}

// Resume continues a server frozen by Pause (SIGCONT).
func (s *Server) Resume() {
	s.tb.Helper()
	s.signal("Resume", syscall.SIGCONT)
}

func (s *Server) signal(op string, sig syscall.Signal) {
	s.tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil {
		s.tb.Fatalf("redistest: %s: redis-server on %s is not running", op, s.Addr())
	}
	if err := syscall.Kill(-s.proc.pid, sig); err != nil {
		s.tb.Fatalf("redistest: %s: signalling redis-server on %s: %v", op, s.Addr(), err)
	}
	s.paused = sig == syscall.SIGSTOP
	if s.paused {
		waitStopped(s.proc.pid, time.Second)
	}
}

// running reports whether the server process is up (not killed or stopped).
func (s *Server) running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc != nil
}

// cleanup is registered with tb.Cleanup by Start.
func (s *Server) cleanup() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.killLocked()
}

// FreePort returns a TCP port that was free on 127.0.0.1 a moment ago.
// Someone else may take it before you bind it; Start retries for that.
func FreePort(tb testing.TB) int {
	tb.Helper()
	ports, err := freePorts(1)
	if err != nil {
		tb.Fatalf("redistest: finding a free port: %v", err)
	}
	return ports[0]
}

// freePorts returns n distinct free loopback ports (all listeners are held
// open until every port is known, so they cannot repeat).
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logTail returns the end of what redis-server wrote to its stdout/stderr and
// log file since the given offsets.
func (s *Server) logTail(logOff, outOff int64) string {
	var b strings.Builder
	if t := tailFrom(s.outPath, outOff); t != "" {
		b.WriteString(t)
	}
	if t := tailFrom(s.logPath, logOff); t != "" {
		b.WriteString(t)
	}
	if b.Len() == 0 {
		return "(empty)"
	}
	return b.String()
}

// tailFrom returns at most the last 30 lines / 4 KiB of path after offset.
func tailFrom(path string, off int64) string {
	const maxBytes, maxLines = 4096, 30
	b, err := os.ReadFile(path)
	if err != nil || int64(len(b)) <= off {
		return ""
	}
	b = b[off:]
	if len(b) > maxBytes {
		b = b[len(b)-maxBytes:]
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > maxLines {
		lines = lines[len(lines)-maxLines:]
	}
	return strings.Join(lines, "\n") + "\n"
}
