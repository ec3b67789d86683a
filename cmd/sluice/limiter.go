package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// maxKeyLength is the limiter's Options.MaxKeyLength: a descriptor's key
// is its variable values joined (see policy.Config.Match), each at most
// maxValue bytes.
const maxKeyLength = 4096

// common are the flags serve and check share.
type common struct {
	config, redisURL, prefix string
	cluster                  bool // redisURL is a Redis Cluster
	syncInterval             time.Duration
	// clock is the limiter's clock (Options.Clock); nil: the system
	// clock. Not a flag: tests set a virtual one, so that a decision
	// does not depend on where the real time falls in a window.
	clock sluice.Clock
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.config, "config", "", "the configuration `FILE` (envoy's format or sluice's)")
	fs.StringVar(&c.redisURL, "redis", "", "the shared Redis `URL` (redis://host:port or host:port); none: limits of this process only")
	fs.BoolVar(&c.cluster, "redis-cluster", false, "-redis names a Redis Cluster node (more nodes: redis://host:port?addr=host2:port2)")
	fs.StringVar(&c.prefix, "prefix", "", "the Redis key prefix the fleet shares (default "+sluice.DefaultPrefix+")")
	fs.DurationVar(&c.syncInterval, "sync-interval", sluice.DefaultSyncInterval, "how often counts are pushed to Redis and totals pulled")
}

// newFlagSet is a FlagSet that prints its errors and the usage to stderr.
func newFlagSet(name string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("sluice "+name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage) }
	return fs
}

// open loads the configuration and builds a limiter on it, with the Redis
// client it made (nil without -redis): Close both. mp receives the
// limiter's metrics; nil: none.
func (c *common) open(logger *slog.Logger, mp metric.MeterProvider) (policy.Config, *sluice.Limiter, redis.UniversalClient, error) {
	if c.config == "" {
		return policy.Config{}, nil, nil, fmt.Errorf("-config FILE is required")
	}
	cfg, err := policy.LoadFile(c.config)
	if err != nil {
		return policy.Config{}, nil, nil, err
	}
	l, rdb, err := c.limiter(cfg.Rules, logger, mp)
	if err != nil {
		return policy.Config{}, nil, nil, err
	}
	return cfg, l, rdb, nil
}

// limiter builds a limiter of rules, with the Redis client it made (nil
// without -redis): Close both. mp receives the limiter's metrics; nil:
// none.
func (c *common) limiter(rules []policy.Rule, logger *slog.Logger, mp metric.MeterProvider) (*sluice.Limiter, redis.UniversalClient, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	opts := sluice.Options{Prefix: c.prefix, SyncInterval: c.syncInterval, MaxKeyLength: maxKeyLength, Logger: logger, MeterProvider: mp, Clock: c.clock}
	var rdb redis.UniversalClient
	if c.redisURL != "" {
		var err error
		if rdb, err = newRedis(c.redisURL, c.cluster); err != nil {
			return nil, nil, err
		}
		opts.Redis = rdb
	}
	l, err := sluice.New(opts, rules...)
	if err != nil {
		if rdb != nil {
			_ = rdb.Close()
		}
		return nil, nil, err
	}
	return l, rdb, nil
}

// newRedis is a client of the Redis at url (redis://... or host:port), a
// Redis Cluster if cluster is set.
func newRedis(url string, cluster bool) (redis.UniversalClient, error) {
	u := url
	if !strings.Contains(u, "://") {
		u = "redis://" + u
	}
	if cluster {
		co, err := redis.ParseClusterURL(u)
		if err != nil {
			return nil, fmt.Errorf("-redis %q: %w", url, err)
		}
		return redis.NewClusterClient(co), nil
	}
	ro, err := redis.ParseURL(u)
	if err != nil {
		return nil, fmt.Errorf("-redis %q: %w", url, err)
	}
	return redis.NewClient(ro), nil
}
