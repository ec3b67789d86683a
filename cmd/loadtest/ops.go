package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/cmd/loadtest/internal/fleet"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/store"
	"github.com/sluicehq/sluice/cmd/loadtest/internal/traffic"
	"github.com/sluicehq/sluice/policy"
)

// opsAlias names every operations profile on -profile.
const opsAlias = "ops"

// auxRule is the reload profile's other rule, written before the load
// test's in the rules file: a prefix of the file that ends with it is a
// valid configuration without the load test's rule.
func auxRule(limit int64) policy.Rule {
	return policy.Rule{Name: "aux", Limit: limit, Window: time.Minute}
}

// rulesText returns the reload profile's rules file with the aux rule's
// limit, and the length of its first part: up to the load test's rule.
func rulesText(rule policy.Rule, aux int64) ([]byte, int, error) {
	var head, all bytes.Buffer
	if err := (policy.Config{Rules: []policy.Rule{auxRule(aux)}}).Encode(&head); err != nil {
		return nil, 0, err
	}
	if err := (policy.Config{Rules: []policy.Rule{auxRule(aux), rule}}).Encode(&all); err != nil {
		return nil, 0, err
	}
	if !bytes.HasPrefix(all.Bytes(), head.Bytes()) {
		return nil, 0, fmt.Errorf("reload: the rules file does not begin with its first rule")
	}
	return all.Bytes(), head.Len(), nil
}

// rewritePause is how long the reload profile's rewrite leaves the file
// truncated, and then holding its first part only: less than a poll of the
// watcher (fleet.WatchInterval), as a slow writer (a shell's > on a large
// file, a configuration tool writing as it renders) leaves it.
const rewritePause = 40 * time.Millisecond

// rewriteInPlace rewrites the file at path as a shell's > does: opened
// with truncation, then written in two parts, the first of n bytes, with a
// pause after the truncation and after the first part.
func rewriteInPlace(path string, data []byte, n int, pause time.Duration) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	time.Sleep(pause)
	if _, err := f.Write(data[:n]); err != nil {
		f.Close()
		return err
	}
	time.Sleep(pause)
	if _, err := f.Write(data[n:]); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// opsSetup prepares an operations profile's scenario: for reload, the rules
// file every instance watches and the rewrites; for store-loss, the
// FLUSHALL. It returns the hooks to run and a cleanup; the errors of the
// hooks are reported by the returned func once the run is over.
func opsSetup(cfg *fleet.Config, target store.Target) (hooks []fleet.Hooks, done func() []string, err error) {
	var mu sync.Mutex
	var notes []string
	note := func(s string) {
		mu.Lock()
		notes = append(notes, s)
		mu.Unlock()
	}
	collect := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return notes
	}
	tp := &cfg.Traffic
	switch tp.Profile {
	case traffic.Reload:
		dir, err := os.MkdirTemp("", "loadtest-reload-")
		if err != nil {
			return nil, nil, fmt.Errorf("reload: %w", err)
		}
		path := filepath.Join(dir, "rules.yaml")
		same, n, err := rulesText(cfg.Rule, 100)
		if err != nil {
			os.RemoveAll(dir)
			return nil, nil, err
		}
		changed, m, err := rulesText(cfg.Rule, 200)
		if err != nil {
			os.RemoveAll(dir)
			return nil, nil, err
		}
		if err := os.WriteFile(path, same, 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, nil, fmt.Errorf("reload: %w", err)
		}
		cfg.RulesFile = path
		ts := tp.ReloadTimes()
		// One chain of rewrites, in order: the middle one changes the
		// aux rule's limit, and the later ones keep it.
		var chain sync.Mutex
		rng := rand.New(rand.NewPCG(tp.Seed, 0x7e10ad))
		for i, at := range ts {
			data, k := same, n
			if i >= len(ts)/2 {
				data, k = changed, m
			}
			// Hooks run on a 100 ms tick, as the watchers poll: a
			// seeded delay within a poll varies the phase of each
			// rewrite against the polls.
			delay := time.Duration(rng.Int64N(int64(fleet.WatchInterval)))
			hooks = append(hooks, fleet.Hooks{At: time.Duration(at), Do: func() {
				chain.Lock()
				defer chain.Unlock()
				time.Sleep(delay)
				if err := rewriteInPlace(path, data, k, rewritePause); err != nil {
					note("reload: rewriting the rules file: " + err.Error())
				}
			}})
		}
		note(fmt.Sprintf("reload: every instance watches a rules file (polled every %v) holding an aux rule and this one; it was rewritten in place %d times, each at a random phase of a poll (truncated, %v later its first part up to this rule, %v later the rest), from the %s one with the aux rule's limit changed",
			fleet.WatchInterval, len(ts), rewritePause, rewritePause, ordinal(len(ts)/2+1)))
		return hooks, func() []string {
			chain.Lock() // a late rewrite has finished
			defer chain.Unlock()
			os.RemoveAll(dir)
			return collect()
		}, nil
	case traffic.StoreLoss:
		for _, t := range tp.StoreLossTimes() {
			at := time.Duration(t)
			hooks = append(hooks, fleet.Hooks{At: at, Do: func() {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				s := time.Now()
				if err := flushAll(ctx, target); err != nil {
					note("store-loss: FLUSHALL failed: " + err.Error())
					return
				}
				note(fmt.Sprintf("store-loss: FLUSHALL at %v of the run (took %v): the store's counts were lost", at.Round(time.Millisecond), time.Since(s).Round(time.Microsecond)))
			}})
		}
	}
	return hooks, collect, nil
}

// flushAll empties the store: FLUSHALL on it, or on every master of a
// cluster.
func flushAll(ctx context.Context, t store.Target) error {
	c := t.Client()
	defer c.Close()
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			return n.FlushAll(ctx).Err()
		})
	}
	return c.FlushAll(ctx).Err()
}

// ordinal says "1st", "2nd", "3rd", "4th".
func ordinal(n int) string {
	switch {
	case n%100 >= 11 && n%100 <= 13:
		return fmt.Sprintf("%dth", n)
	case n%10 == 1:
		return fmt.Sprintf("%dst", n)
	case n%10 == 2:
		return fmt.Sprintf("%dnd", n)
	case n%10 == 3:
		return fmt.Sprintf("%drd", n)
	}
	return fmt.Sprintf("%dth", n)
}
