package benchmarks

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/sluicehq/sluice/internal/redisproc"
)

// Redis is a throwaway redis-server on a free loopback port, without
// persistence, in its own temporary directory (redisproc.Server). It never
// uses port 6379, so a Redis the machine may run for other purposes is never
// touched.
type Redis struct {
	*redisproc.Server
}

// ErrNoRedis means redis-server is not installed.
var ErrNoRedis = redisproc.ErrNotFound

// StartRedis starts redis-server on a free 127.0.0.1 port and waits until it
// answers PING. Stop kills it; the process also dies with its parent on Linux.
func StartRedis() (*Redis, error) {
	s, err := redisproc.Start(context.Background())
	if err != nil {
		return nil, err
	}
	return &Redis{Server: s}, nil
}

// Stop kills the server and removes its directory; a nil Redis does nothing.
func (r *Redis) Stop() {
	if r != nil {
		r.Server.Stop()
	}
}

// Client returns a new client. poolSize 0 means go-redis's default.
func (r *Redis) Client(poolSize int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr:         r.Addr(),
		PoolSize:     poolSize,
		DialTimeout:  5 * time.Second,
		ReadTimeout:  30 * time.Second,
		WriteTimeout: 30 * time.Second,
		// Maintenance notifications are a Redis Cloud feature; the probe is
		// noise against a local server.
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
	})
}

// Version returns the server's version.
func (r *Redis) Version(ctx context.Context, c *redis.Client) string {
	info, err := Info(ctx, c, "server")
	if err != nil {
		return "?"
	}
	return info["redis_version"]
}

// Info returns the fields of INFO section.
func Info(ctx context.Context, c *redis.Client, section string) (map[string]string, error) {
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return nil, err
	}
	m := make(map[string]string)
	for _, line := range strings.Split(s, "\n") {
		line = strings.TrimSpace(line)
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			m[k] = v
		}
	}
	return m, nil
}

// InfoInt returns an integer field of INFO section.
func InfoInt(ctx context.Context, c *redis.Client, section, field string) (int64, error) {
	m, err := Info(ctx, c, section)
	if err != nil {
		return 0, err
	}
	v, ok := m[field]
	if !ok {
		return 0, fmt.Errorf("INFO %s has no %s", section, field)
	}
	return strconv.ParseInt(v, 10, 64)
}

// NetBytes returns the server's total_net_input_bytes + total_net_output_bytes.
func NetBytes(ctx context.Context, c *redis.Client) (int64, error) {
	m, err := Info(ctx, c, "stats")
	if err != nil {
		return 0, err
	}
	in, err1 := strconv.ParseInt(m["total_net_input_bytes"], 10, 64)
	out, err2 := strconv.ParseInt(m["total_net_output_bytes"], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return in + out, nil
}

// CPUSeconds returns the server's used_cpu_user + used_cpu_sys (INFO cpu):
// the CPU time Redis has spent, main thread and background threads.
func CPUSeconds(ctx context.Context, c *redis.Client) (float64, error) {
	m, err := Info(ctx, c, "cpu")
	if err != nil {
		return 0, err
	}
	u, err1 := strconv.ParseFloat(m["used_cpu_user"], 64)
	s, err2 := strconv.ParseFloat(m["used_cpu_sys"], 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return u + s, nil
}

// RedisBenchmark runs redis-benchmark against the server with the given
// extra arguments (-q is added) and returns the requests per second of the
// first test it reports.
func (r *Redis) RedisBenchmark(ctx context.Context, args ...string) (float64, string, error) {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		return 0, "", errors.New("redis-benchmark not found in PATH (apt-get install redis-tools)")
	}
	full := append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(r.Port), "-q"}, args...)
	out, err := exec.CommandContext(ctx, bin, full...).CombinedOutput()
	if err != nil {
		return 0, string(out), fmt.Errorf("redis-benchmark %v: %w: %s", full, err, out)
	}
	// Output (with -q) ends with lines like "INCR: 1234567.89 requests per
	// second, p50=0.311 msec"; progress lines end in '\r'.
	text := string(out)
	for _, line := range strings.Split(strings.ReplaceAll(text, "\r", "\n"), "\n") {
		_, rest, ok := strings.Cut(line, ": ")
		if !ok || !strings.Contains(rest, "requests per second") || strings.Contains(rest, "rps=") {
			continue
		}
		f := strings.Fields(rest)
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			return v, strings.TrimSpace(line), nil
		}
	}
	return 0, text, fmt.Errorf("redis-benchmark: no rate in output %q", text)
}

// CommandStat is one command's line of INFO commandstats: its calls and the
// microseconds Redis spent in it, commands a script called included (their
// time is also in the script's).
type CommandStat struct {
	Calls int64
	Usec  int64
}

// CommandStats returns INFO commandstats by lower-case command name
// ("evalsha", "hmget", "hincrby|…" for a subcommand as Redis names it).
func CommandStats(ctx context.Context, c *redis.Client) (map[string]CommandStat, error) {
	s, err := c.Info(ctx, "commandstats").Result()
	if err != nil {
		return nil, err
	}
	m := make(map[string]CommandStat)
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		var st CommandStat
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "calls":
				st.Calls, err = strconv.ParseInt(v, 10, 64)
			case "usec":
				st.Usec, err = strconv.ParseInt(v, 10, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("INFO commandstats %q: %w", line, err)
			}
		}
		m[strings.TrimPrefix(name, "cmdstat_")] = st
	}
	return m, nil
}
