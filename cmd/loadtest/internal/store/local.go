package store

import (
	"context"

	"github.com/sluicehq/sluice/internal/redisproc"
)

// StartLocal starts a throwaway redis-server for the run (redisproc.Start:
// a free 127.0.0.1 port, no persistence, killed with the load test on Linux
// and by Stop) and returns it with its Target.
func StartLocal(ctx context.Context) (*redisproc.Server, Target, error) {
	s, err := redisproc.Start(ctx)
	if err != nil {
		return nil, Target{}, err
	}
	return s, Target{Addrs: []string{s.Addr()}}, nil
}
