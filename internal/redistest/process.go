package redistest

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/redisproc"
)

const (
	// readyTimeout bounds how long one start attempt waits for PING.
	readyTimeout = 10 * time.Second
	// exitTimeout bounds waiting for the process to exit after SIGKILL.
	exitTimeout = 10 * time.Second
	// probeTimeout bounds a single readiness or health probe.
	probeTimeout = time.Second
	// pollInterval is the pause between two readiness or health probes.
	pollInterval = 20 * time.Millisecond
)

// errPortBusy marks a start attempt that failed because a port was in use.
var errPortBusy = errors.New("port already in use")

// process is one running redis-server.
type process struct {
	pid  int
	done chan struct{} // closed once the process has been reaped
	cmd  *exec.Cmd     // cmd.ProcessState is valid once done is closed
}

// args is the redis-server command line.
func (s *Server) args() []string {
	var a []string
	if s.cfg.sentinel {
		// The configuration file comes first; Sentinel rewrites it.
		a = append(a, s.confPath, "--sentinel")
	}
	if ca := s.cfg.tlsCA; ca != nil {
		a = append(a,
			"--port", "0",
			"--tls-port", strconv.Itoa(s.port),
			"--tls-cert-file", s.tlsCert,
			"--tls-key-file", s.tlsKey,
			"--tls-ca-cert-file", ca.CertFile(),
			"--tls-auth-clients", "no",
		)
	} else {
		a = append(a, "--port", strconv.Itoa(s.port))
	}
	a = append(a,
		"--bind", "127.0.0.1",
		"--dir", s.dir,
		"--logfile", s.logPath,
		"--daemonize", "no",
		"--protected-mode", "no",
		"--save", "",
	)
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
	cmd.Stdout, cmd.Stderr = out, out         // *os.File: no copying goroutines
	cmd.SysProcAttr = redisproc.SysProcAttr() // its own group, killed with the test binary on Linux
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
	var lastErr error
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
	r, err := s.do(ctx, []string{"PING"}, []string{"INFO", "server"})
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

// do sends cmds to the server on one fresh connection (over TLS for a
// server started WithTLS), bounded by probeTimeout.
func (s *Server) do(ctx context.Context, cmds ...[]string) ([]any, error) {
	var tc *tls.Config
	if s.cfg.tlsCA != nil {
		tc = s.cfg.tlsCA.ClientTLS()
	}
	return doTLS(ctx, s.Addr(), tc, probeTimeout, cmds...)
}

// kill SIGKILLs the process group and waits until the process is reaped.
func (p *process) kill() error {
	select {
	case <-p.done:
		return nil // exited and reaped already
	default:
	}
	// The whole group (redis-server and any fork children); SIGKILL also
	// ends a SIGSTOPped process.
	redisproc.KillGroup(p.cmd.Process)
	select {
	case <-p.done:
		return nil
	case <-time.After(exitTimeout):
		return fmt.Errorf("redistest: redis-server pid %d still running %v after SIGKILL", p.pid, exitTimeout)
	}
}
