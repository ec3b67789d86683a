package redistest

// config collects what the Options set.
type config struct {
	persistence bool
	args        []string
	// serverBinary overrides the redis-server executable name (tests use
	// it to simulate a machine without Redis).
	serverBinary string
	// cluster makes the server a cluster node (StartCluster only).
	cluster bool
	// tlsCA makes the server listen for TLS only, with a certificate
	// issued by it (WithTLS).
	tlsCA *CA
	// sentinel makes the process a Redis Sentinel (StartSentinel only):
	// sentinelConf is its configuration file's content.
	sentinel     bool
	sentinelConf string
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
