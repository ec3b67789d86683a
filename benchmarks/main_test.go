package benchmarks

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
)

var (
	redisOnce sync.Once
	redisSrv  *Redis
	redisErr  error
	prefixes  atomic.Int64
)

// sharedRedis returns the process's throwaway redis-server, starting it on
// first use; TestMain stops it. Every benchmark that needs Redis uses this
// one server, so that sync rates and redis-benchmark are measured against the
// same server in the same run.
func sharedRedis(tb testing.TB) *Redis {
	tb.Helper()
	redisOnce.Do(func() { redisSrv, redisErr = StartRedis() })
	if redisErr != nil {
		if errors.Is(redisErr, ErrNoRedis) && os.Getenv("CI") != "true" {
			tb.Skip(redisErr)
		}
		tb.Fatal(redisErr)
	}
	return redisSrv
}

// newPrefix returns a Redis key prefix no other limiter in this process uses.
func newPrefix() string { return fmt.Sprintf("b%d", prefixes.Add(1)) }

func TestMain(m *testing.M) {
	code := m.Run()
	redisSrv.Stop()
	os.Exit(code)
}
