package store

import (
	"context"

	"github.com/sluicehq/sluice/internal/redisproc"
)

// ErrNoServer is StartLocal's error when no redis-server is in PATH.
var ErrNoServer = redisproc.ErrNotFound

// Local is a throwaway redis-server the load test started for its run
// (redisproc.Server): on a free 127.0.0.1 port, without persistence, in a
// temporary directory, killed with the load test on Linux and by Close.
type Local struct {
	s *redisproc.Server
}

// LocalAvailable reports whether StartLocal can find a redis-server.
func LocalAvailable() bool { return redisproc.Available() }

// StartLocal starts a throwaway redis-server and waits until it answers
// PING. Without one in PATH it returns ErrNoServer.
func StartLocal(ctx context.Context) (*Local, Target, error) {
	s, err := redisproc.Start(ctx)
	if err != nil {
		return nil, Target{}, err
	}
	return &Local{s: s}, Target{Addrs: []string{s.Addr()}}, nil
}

// Close stops the server and removes its directory.
func (l *Local) Close() { l.s.Stop() }
