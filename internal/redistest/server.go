package redistest

import (
	"crypto/tls"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/sluicehq/sluice/internal/redisproc"
)

const (
	// startAttempts is how many ports Start tries when the port it picked
	// was taken between redisproc.FreePorts and bind.
	startAttempts = 5
	// clientTimeout is the dial, read and write timeout of the clients
	// returned by Client.
	clientTimeout = time.Second
	// defaultServerBinary is the redis-server executable looked up in PATH.
	defaultServerBinary = "redis-server"
)

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
	// confPath is a Sentinel's configuration file (Sentinel rewrites it).
	confPath string
	// tlsCert and tlsKey are the server's certificate and key (WithTLS).
	tlsCert, tlsKey string

	mu     sync.Mutex
	proc   *process // nil when not running
	paused bool
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
	bin := need(tb, cfg.serverBinary)

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
	if cfg.tlsCA != nil {
		s.tlsCert, s.tlsKey = cfg.tlsCA.Issue(tb, "redistest server", "127.0.0.1")
	}
	if cfg.sentinel {
		s.confPath = filepath.Join(dir, "sentinel.conf")
	}

	nports := 1
	if cfg.cluster {
		nports = 2
	}
	for attempt := 1; ; attempt++ {
		ports, err := redisproc.FreePorts(nports)
		if err != nil {
			tb.Fatalf("redistest: finding a free port: %v", err)
		}
		s.port = ports[0]
		if cfg.cluster {
			s.busPort = ports[1]
		}
		if cfg.sentinel {
			// Written afresh for each attempt: Sentinel rewrites it.
			if err := os.WriteFile(s.confPath, []byte(cfg.sentinelConf), 0o644); err != nil {
				tb.Fatalf("redistest: writing %s: %v", s.confPath, err)
			}
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
	tb.Logf("redistest: %s listening on %s (dir %s)", filepath.Base(bin), s.Addr(), s.dir)
	return s
}

// need returns the path of the executable name, or ends the test without
// it: fails it when the CI environment variable is "true" (CI must test
// against real Redis), skips it otherwise with a message saying what to
// install.
func need(tb testing.TB, name string) string {
	tb.Helper()
	bin, err := exec.LookPath(name)
	if err == nil {
		return bin
	}
	pkg := "redis-server"
	if name == sentinelBinary {
		pkg = "redis-sentinel"
	}
	if os.Getenv("CI") == "true" {
		if pkg == "redis-server" {
			tb.Fatalf("redis-server not found: CI requires real Redis")
		}
		tb.Fatalf("%s not found: CI requires real Redis (apt-get install %s)", name, pkg)
	}
	tb.Skipf("redistest: skipping, this test needs a real %s and none is in PATH (%v): "+
		"install %s (for example apt-get install %s, or brew install redis) to run it", name, err, pkg, pkg)
	return ""
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
		TLSConfig:                s.TLSConfig(),
	})
	tb.Cleanup(func() { _ = c.Close() })
	return c
}

// TLSConfig returns the TLS client configuration for a server started
// WithTLS (trusting only its CA), or nil for a plain TCP one.
func (s *Server) TLSConfig() *tls.Config {
	if s.cfg.tlsCA == nil {
		return nil
	}
	return s.cfg.tlsCA.ClientTLS()
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
