package sluice

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/sluicehq/sluice/policy"
)

// Defaults for Options fields left zero.
const (
	// DefaultPrefix is the Prefix of Options that leave it empty.
	DefaultPrefix = "sluice"
	// DefaultSyncInterval is the SyncInterval of Options that leave it zero.
	DefaultSyncInterval = 100 * time.Millisecond
	// DefaultErrorBudget is the ErrorBudget of Options that leave it zero.
	DefaultErrorBudget = 0.01
	// DefaultTimeout is the Timeout of Options that leave it zero.
	DefaultTimeout = 50 * time.Millisecond
	// DefaultMaxKeys is the MaxKeys of Options that leave it zero.
	DefaultMaxKeys = 1_000_000
	// DefaultMaxKeyLength is the MaxKeyLength of Options that leave it zero.
	DefaultMaxKeyLength = 256
	// DefaultMaxWaiters is the MaxWaiters of Options that leave it zero.
	DefaultMaxWaiters = 1024
)

// Bounds on Options that New refuses outside, because nothing sensible can
// come of them.
const (
	// MinErrorBudget is the smallest ErrorBudget: below 1/policy.MaxLimit no
	// rule could ever hold one unsynced unit (the cap ⌊ε·L/(N̂+1)⌋ is 0 for
	// every Limit), so every check would wait for the store. A rule that
	// needs that should say so: policy.Strict.
	MinErrorBudget = 1.0 / policy.MaxLimit
	// MinTimeout is the smallest Timeout: a check handed to the store waits
	// for a round trip and the syncer's queue; under 1ms it would time out
	// and fall back almost always, even on loopback.
	MinTimeout = time.Millisecond
	// MaxMinInstances is the largest MinInstances: far beyond any fleet
	// that shares one store, and small enough that N̂+1 and the caps never
	// overflow.
	MaxMinInstances = 1 << 20
)

// Options configures a Limiter. The zero value is valid: a Limiter that only
// limits within this process.
type Options struct {
	// Redis is the shared store; nil keeps every rule local to this process.
	Redis redis.UniversalClient
	// Prefix starts every Redis key; default DefaultPrefix. 1 to 64 bytes of
	// letters, digits, '_', '.', '-' and ':'.
	Prefix string
	// SyncInterval is how often counts are pushed and totals pulled; default
	// DefaultSyncInterval, at least 1ms. A key evenly loaded at its full rate
	// needs no urgent syncs when SyncInterval ≤ ErrorBudget · Window.
	SyncInterval time.Duration
	// ErrorBudget is the most the fleet may over-admit, as a fraction of a
	// rule's Limit per window, in (0, 1]; default DefaultErrorBudget.
	ErrorBudget float64

	// InstanceID names this instance in the registry; default host name,
	// process id and a random suffix. 1 to 64 bytes of letters, digits, '_',
	// '.' and '-'; unique across the fleet.
	InstanceID string
	// FailureMode decides checks that need the store while it fails; default
	// policy.FailLocal.
	FailureMode policy.FailureMode
	// Timeout bounds how long a check waits for the store (an urgent sync, a
	// Strict rule); default DefaultTimeout. A check never blocks longer than
	// Timeout or its context's deadline. A check the store does not answer
	// in time is decided by FailureMode as if the store were down, a key
	// without local state too (under [policy.FailLocal]: on the rule's sketch of
	// untracked keys, within the share Limit/N̂); under [policy.FailLocal], one of a
	// Strict rule is denied instead, with RetryAfter the sync interval. New
	// waits at most max(Timeout, 1s) for the store.
	Timeout time.Duration
	// Clock replaces the system clock (tests, simulation). Store time is
	// still aligned on Redis TIME when there is a store. With the system
	// clock, checks read a time published every millisecond (rules whose
	// sub-window is under 10ms read the clock on each check).
	Clock Clock
	// MaxKeys bounds the keys tracked locally, across rules; default
	// DefaultMaxKeys. Past half of it a new key is tracked only once it has
	// been seen a few times (2 to 15 as the cache fills), so a flood of keys
	// used once cannot fill it. A key that is not tracked is still limited
	// on its own: Eventual and Strict rules decide it in the store, exactly
	// (a round trip per check); Local rules, and shared rules while the store
	// is down under [policy.FailLocal], on a fixed-size sketch per rule that may deny
	// it early but never admits it past its limit (or share).
	MaxKeys int
	// MaxKeyLength bounds a key's length in bytes; default
	// DefaultMaxKeyLength. Longer keys are rejected with ErrKeyTooLong.
	MaxKeyLength int
	// MinInstances is a floor on N̂, the live-instance count; default 1.
	// Instances that start keep the bound without it (each admits nothing
	// the store has not counted until the others count it); set it to the
	// fleet size to keep the bound while an instance cut off from the store
	// longer than its registry entry lives still admits on [policy.FailLocal].
	MinInstances int
	// BatchSize is the number of keys per Redis pipeline; default 256.
	BatchSize int
	// RequireStore makes New return an error when the store cannot be
	// reached, or refuses writes, at start: ErrStoreUnavailable, wrapping
	// the cause. Without it New returns a limiter on its failure mode that
	// keeps trying. Either way a store that refuses this client
	// (credentials, ACL permissions, scripting disabled) is an error of New:
	// ErrStoreConfig.
	RequireStore bool
	// Logger receives the limiter's own log lines, once per change and never
	// per check: the store failing (unreachable, refusing writes, or
	// refusing this client, with the cause and what to change; at Warn, or
	// Error for a refusal of this client) or reachable again, and the
	// live-instance count N̂ changing. Default: slog.Default() as of New. To
	// silence it, pass slog.New(slog.DiscardHandler). go-redis logs on its
	// own (for example "failed to dial" while Redis is down): route or
	// silence it with redis.SetLogger (see the package
	// github.com/redis/go-redis/v9/logging).
	Logger *slog.Logger
	// MeterProvider receives the limiter's metrics (docs/observability.md
	// lists them): checks by rule, outcome and path, the syncer, the store,
	// the failure mode, the key cache and the achieved accuracy. Default:
	// the global one (otel.GetMeterProvider), which is a no-op until the
	// application sets one. Checks are counted on per-rule counters that
	// the metrics read when collected: a check never calls the provider.
	// With the no-op provider (go.opentelemetry.io/otel/metric/noop) they
	// are not counted at all; with the global one, not until the
	// application sets it (otel.SetMeterProvider, before or after New).
	MeterProvider metric.MeterProvider
	// TracerProvider receives a span per sync cycle and per round trip of
	// checks handed to the store (never one per check). Default: the global
	// one (otel.GetTracerProvider).
	TracerProvider trace.TracerProvider
	// MaxWaiters bounds the callers of Wait and WaitN queued on one key of
	// one rule on this instance; default DefaultMaxWaiters. The next one
	// gets ErrTooManyWaiters at once.
	MaxWaiters int
}

// fill sets the defaults of the fields left zero and says what is wrong
// with the others, and how to fix it.
func (o *Options) fill() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrInvalidOptions, fmt.Sprintf(format, args...))
	}
	if o.Prefix == "" {
		o.Prefix = DefaultPrefix
	}
	if len(o.Prefix) > 64 || strings.ContainsFunc(o.Prefix, func(c rune) bool { return !prefixRune(c) }) {
		return bad("Prefix %q: use 1 to 64 letters, digits, '_', '.', '-' or ':' (braces, spaces and other bytes would break the Redis key layout)", o.Prefix)
	}
	switch {
	case o.SyncInterval == 0:
		o.SyncInterval = DefaultSyncInterval
	case o.SyncInterval < time.Millisecond:
		return bad("SyncInterval %v: it must be at least 1ms (0 means %v)", o.SyncInterval, DefaultSyncInterval)
	}
	switch {
	case o.ErrorBudget == 0:
		o.ErrorBudget = DefaultErrorBudget
	case math.IsNaN(o.ErrorBudget) || o.ErrorBudget < 0 || o.ErrorBudget > 1:
		return bad("ErrorBudget %v: it must be in (0, 1], a fraction of each rule's Limit (0 means %v)", o.ErrorBudget, DefaultErrorBudget)
	case o.ErrorBudget < MinErrorBudget:
		return bad("ErrorBudget %v: below %.3g no rule can hold a single unsynced unit, so every check would wait for the store; use policy.Strict for rules that must be exact", o.ErrorBudget, MinErrorBudget)
	}
	if o.InstanceID == "" {
		o.InstanceID = defaultInstanceID()
	} else if err := policy.ValidateName(o.InstanceID); err != nil {
		return bad("InstanceID %q: use 1 to 64 letters, digits, '_', '.' or '-'", o.InstanceID)
	}
	if !o.FailureMode.Valid() {
		return bad("FailureMode %d: use policy.FailLocal, policy.FailOpen or policy.FailClosed", o.FailureMode)
	}
	switch {
	case o.Timeout == 0:
		o.Timeout = DefaultTimeout
	case o.Timeout < 0:
		return bad("Timeout %v: it must be positive (0 means %v)", o.Timeout, DefaultTimeout)
	case o.Timeout < MinTimeout:
		return bad("Timeout %v: a check handed to the store waits for a round trip; under %v it would time out and fall back almost always (0 means %v)", o.Timeout, MinTimeout, DefaultTimeout)
	}
	switch {
	case o.MaxKeys == 0:
		o.MaxKeys = DefaultMaxKeys
	case o.MaxKeys < 0:
		return bad("MaxKeys %d: it must be positive (0 means %d)", o.MaxKeys, DefaultMaxKeys)
	}
	switch {
	case o.MaxKeyLength == 0:
		o.MaxKeyLength = DefaultMaxKeyLength
	case o.MaxKeyLength < 0:
		return bad("MaxKeyLength %d: it must be positive (0 means %d)", o.MaxKeyLength, DefaultMaxKeyLength)
	}
	switch {
	case o.MaxWaiters == 0:
		o.MaxWaiters = DefaultMaxWaiters
	case o.MaxWaiters < 0:
		return bad("MaxWaiters %d: it must be positive (0 means %d)", o.MaxWaiters, DefaultMaxWaiters)
	}
	if o.MinInstances < 0 || o.MinInstances > MaxMinInstances {
		return bad("MinInstances %d: it must be between 0 and %d (set it to the fleet size)", o.MinInstances, MaxMinInstances)
	}
	if o.BatchSize < 0 {
		return bad("BatchSize %d: it must not be negative (0 means 256)", o.BatchSize)
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return nil
}

// prefixRune reports whether c may appear in a Prefix.
func prefixRune(c rune) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-' || c == ':'
}

// defaultInstanceID returns the host name, the process id and a random
// suffix.
func defaultInstanceID() string {
	host, _ := os.Hostname()
	host = strings.Map(func(c rune) rune {
		if c < 128 && prefixRune(c) && c != ':' {
			return c
		}
		return '-'
	}, host)
	if len(host) > 32 {
		host = host[:32]
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	id := strconv.Itoa(os.Getpid()) + "-" + hex.EncodeToString(b[:])
	if host != "" {
		id = host + "-" + id
	}
	return id
}
