package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// runCheck makes one decision and prints it.
func runCheck(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	var c common
	fs := newFlagSet("check", stderr)
	c.register(fs)
	n := fs.Int64("n", 1, "the `COST` of the request, 1 or more")
	if err := fs.Parse(args); err != nil {
		return exitUsage
	}
	if fs.NArg() == 0 {
		fmt.Fprintln(stderr, "sluice check: no descriptor: KEY=VALUE... (envoy file) or RULE KEY (sluice file)")
		return exitUsage
	}
	if *n < 1 {
		// A look (cost 0) would show this new process's view, which has
		// counted nothing yet.
		fmt.Fprintln(stderr, "sluice check: -n must be 1 or more")
		return exitUsage
	}
	logger := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	cfg, l, rdb, err := c.open(logger, nil)
	if err != nil {
		fmt.Fprintln(stderr, "sluice check:", err)
		return exitError
	}
	defer func() {
		if rdb != nil {
			_ = rdb.Close()
		}
	}()
	code := check(ctx, cfg, l, rdb != nil, fs.Args(), *n, stdout, stderr)
	// Close pushes the count to the fleet's store.
	if err := l.Close(); err != nil {
		fmt.Fprintln(stderr, "sluice check:", err)
		return exitError
	}
	return code
}

// check decides args and prints the decision; with redis, the remaining
// and reset are the fleet's, read back from the store.
func check(ctx context.Context, cfg policy.Config, l *sluice.Limiter, redis bool, args []string, n int64, stdout, stderr io.Writer) int {
	var rule, key string
	var ok bool
	if cfg.Format == policy.FormatEnvoy {
		entries := make([]policy.Entry, len(args))
		for i, a := range args {
			k, v, found := strings.Cut(a, "=")
			if !found || k == "" {
				fmt.Fprintf(stderr, "sluice check: %q is not KEY=VALUE (an envoy file's descriptor entries)\n", a)
				return exitUsage
			}
			entries[i] = policy.Entry{Key: k, Value: v}
		}
		rule, key, ok = cfg.Match(entries...)
		if !ok {
			fmt.Fprintf(stdout, "domain=%s descriptor=%s: no limit applies\n", cfg.Domain, strings.Join(args, ","))
			return exitOK
		}
	} else {
		if len(args) != 2 {
			fmt.Fprintln(stderr, "sluice check: a sluice file takes RULE KEY")
			return exitUsage
		}
		rule, key = args[0], args[1]
	}
	d, err := l.AllowN(ctx, rule, key, n)
	if err != nil && !errors.Is(err, sluice.ErrStoreUnavailable) {
		fmt.Fprintln(stderr, "sluice check:", err)
		return exitError
	}
	if err == nil && redis {
		// A new process decides within its share of the error budget
		// without asking the store; what is left is the fleet's count:
		// push this one and pull the totals.
		if ferr := l.Flush(ctx); ferr != nil {
			fmt.Fprintln(stderr, "sluice check:", ferr)
			return exitError
		}
		if p, perr := l.Peek(rule, key); perr == nil {
			d.Remaining, d.ResetAfter = p.Remaining, p.ResetAfter
		}
	}
	fmt.Fprintf(stdout, "rule=%s key=%q allowed=%t limit=%d remaining=%d reset_after=%v retry_after=%v\n",
		rule, key, d.Allowed, d.Limit, d.Remaining, d.ResetAfter, d.RetryAfter)
	if err != nil {
		fmt.Fprintln(stderr, "sluice check:", err)
		return exitError
	}
	if !d.Allowed {
		return exitDenied
	}
	return exitOK
}
