package redistest

import (
	"errors"
	"syscall"
	"time"
)

const (
	// restartAttempts is how many times Restart retries a busy port.
	restartAttempts = 10
	// restartBackoff is the pause between two Restart attempts.
	restartBackoff = 100 * time.Millisecond
	// stopTimeout bounds a graceful Stop before it falls back to SIGKILL.
	stopTimeout = 10 * time.Second
)

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
