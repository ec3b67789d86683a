package policy

import "errors"

// Bounds on configuration files: Load refuses anything larger or deeper
// with an error, before it holds more than MaxConfigSize bytes. A file in
// sluice's format also holds at most 10,000 rules.
const (
	// MaxConfigSize is the largest configuration file, in bytes (1 MiB):
	// far above any hand-written rule set, and small enough that a
	// runaway or hostile file cannot exhaust memory.
	MaxConfigSize = 1 << 20
	// MaxDescriptorDepth is the deepest nesting of envoy descriptors.
	MaxDescriptorDepth = 16
)

// ErrInvalidConfig is wrapped by every error Load and LoadFile return about
// the file's content (a *ConfigError).
var ErrInvalidConfig = errors.New("invalid configuration")

// Format is the format of a configuration file; Load detects it.
type Format uint8

const (
	// FormatSluice is sluice's own format: a top-level "rules" list (see
	// docs/configuration.md).
	FormatSluice Format = iota + 1
	// FormatEnvoy is an envoy ratelimit configuration: a top-level "domain"
	// and "descriptors".
	FormatEnvoy
)

// String returns the format's name.
func (f Format) String() string {
	switch f {
	case FormatSluice:
		return "sluice"
	case FormatEnvoy:
		return "envoy"
	}
	return "unknown"
}

// Config is a loaded configuration: the rules to give a Limiter (New or
// SetRules) and, for an envoy file, the descriptor tree that Match walks.
type Config struct {
	// Rules are the configuration's rules, validated, in file order (an
	// envoy file: depth first, one per descriptor with a limit).
	Rules []Rule
	// Format is the format the file was in.
	Format Format
	// Domain is an envoy file's domain; empty for sluice's format.
	Domain string
	// Descriptors is an envoy file's descriptor tree, as written, with the
	// rule each limit became.
	Descriptors []Descriptor

	root *node // Match's tree (envoy)
}

// Entry is one entry of a request's descriptor: a key and its value, as in
// envoy's RateLimitDescriptor.
type Entry struct {
	Key, Value string
}

// Descriptor is one descriptor of an envoy configuration.
type Descriptor struct {
	// Key is the descriptor's key; Value its value, "" for a default that
	// matches any value (each value then counted apart). A Value ending in
	// '*' matches every value with that prefix, each counted apart.
	Key, Value string
	// RateLimit is the descriptor's limit; nil if it has none (an entry
	// that only leads to nested descriptors, or an allow-listed value).
	RateLimit *RateLimit
	// ShadowMode, envoy's shadow_mode: the limit decides and counts, but
	// never denies (its rule has Shadow set).
	ShadowMode bool
	// DetailedMetric is envoy's detailed_metric: per-value metrics. sluice
	// keeps it for the caller's metrics; it changes no decision.
	DetailedMetric bool
	// Descriptors are the nested descriptors.
	Descriptors []Descriptor
	// Rule is the name of the rule the limit became; empty without a
	// limit or with an unlimited one.
	Rule string
}

// RateLimit is the rate_limit of an envoy descriptor.
type RateLimit struct {
	// Unit is the window as envoy names it: second, minute, hour, day,
	// week, month (30 days) or year (365 days).
	Unit string
	// UnitMultiplier multiplies the unit; 0 when not set (1).
	UnitMultiplier int64
	// RequestsPerUnit is the limit; 0 denies every request.
	RequestsPerUnit int64
	// Unlimited exempts matching requests from any limit.
	Unlimited bool
	// Name is the limit's name, which other limits' Replaces refer to.
	Name string
	// Replaces names the limits this one replaces when both apply to one
	// request.
	Replaces []string
}
