package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sluicehq/sluice"
	"github.com/sluicehq/sluice/policy"
)

// DefaultRuntimeRoot is envoyproxy/ratelimit's default RUNTIME_ROOT, used
// when only RUNTIME_SUBDIRECTORY (or -runtime-subdirectory) is given.
const DefaultRuntimeRoot = "/srv/runtime_data/current"

// runtimeDir is envoyproxy/ratelimit's file layout: the configuration is
// every YAML file of root/sub/app, one domain per file.
type runtimeDir struct {
	root, sub, app string
	ignoreDot      bool // skip files whose name starts with '.'
	// watchRoot is RUNTIME_WATCH_ROOT: envoyproxy/ratelimit then reloads
	// when root (a symbolic link) is swapped, and otherwise when a file of
	// the directory changes. serve polls the directory through the link,
	// so it follows both.
	watchRoot bool
	interval  time.Duration // how often the directory is polled
}

// runtimeFlags are serve's flags of the runtime layout; each defaults to
// its environment variable, as envoyproxy/ratelimit names it.
type runtimeFlags struct {
	root, sub, app, ignoreDot, watchRoot *string
}

func registerRuntime(fs *flag.FlagSet, env func(string) (string, bool)) runtimeFlags {
	get := func(name, def string) string {
		if v, ok := env(name); ok {
			return v
		}
		return def
	}
	return runtimeFlags{
		root:      fs.String("runtime-root", get("RUNTIME_ROOT", ""), "envoyproxy/ratelimit's runtime `DIR`: the configuration is DIR/SUB/APP/*.yaml (env RUNTIME_ROOT)"),
		sub:       fs.String("runtime-subdirectory", get("RUNTIME_SUBDIRECTORY", ""), "the runtime `SUB`directory (env RUNTIME_SUBDIRECTORY)"),
		app:       fs.String("runtime-appdirectory", get("RUNTIME_APPDIRECTORY", "config"), "the runtime `APP` directory (env RUNTIME_APPDIRECTORY)"),
		ignoreDot: fs.String("runtime-ignoredotfiles", get("RUNTIME_IGNOREDOTFILES", "false"), "`BOOL`: skip files whose name starts with '.' (env RUNTIME_IGNOREDOTFILES)"),
		watchRoot: fs.String("runtime-watch-root", get("RUNTIME_WATCH_ROOT", "true"), "`BOOL`: DIR is a symbolic link swapped to reload (env RUNTIME_WATCH_ROOT); both ways are followed"),
	}
}

// dir returns the runtime layout the flags name, and whether they name
// one: a root or a subdirectory is given.
func (f runtimeFlags) dir() (runtimeDir, bool, error) {
	if *f.root == "" && *f.sub == "" {
		return runtimeDir{}, false, nil
	}
	d := runtimeDir{root: *f.root, sub: *f.sub, app: *f.app, interval: sluice.DefaultWatchInterval}
	if d.root == "" {
		d.root = DefaultRuntimeRoot
	}
	var err error
	if d.ignoreDot, err = strconv.ParseBool(*f.ignoreDot); err != nil {
		return d, true, fmt.Errorf("-runtime-ignoredotfiles (RUNTIME_IGNOREDOTFILES) %q: not true or false", *f.ignoreDot)
	}
	if d.watchRoot, err = strconv.ParseBool(*f.watchRoot); err != nil {
		return d, true, fmt.Errorf("-runtime-watch-root (RUNTIME_WATCH_ROOT) %q: not true or false", *f.watchRoot)
	}
	return d, true, nil
}

// path is the directory of the configuration files.
func (d runtimeDir) path() string { return filepath.Join(d.root, d.sub, d.app) }

// state is what a poll of the directory found: its configuration files,
// each with what tells a change (the file, its size and modification
// time), and the directory the root's link points to.
type state struct {
	target string
	files  []fileState
}

type fileState struct {
	name string
	fi   os.FileInfo
}

func (a state) same(b state) bool {
	return a.target == b.target && slices.EqualFunc(a.files, b.files, func(x, y fileState) bool {
		return x.name == y.name && os.SameFile(x.fi, y.fi) && x.fi.Size() == y.fi.Size() && x.fi.ModTime().Equal(y.fi.ModTime())
	})
}

// poll lists the configuration files: the regular files (or links to
// them) of the directory ending in .yaml or .yml, in name order, without
// those starting with '.' if ignoreDot.
func (d runtimeDir) poll() (state, error) {
	var st state
	target, err := filepath.EvalSymlinks(d.path())
	if err != nil {
		return st, fmt.Errorf("runtime directory: %w", err)
	}
	st.target = target
	entries, err := os.ReadDir(target)
	if err != nil {
		return st, fmt.Errorf("runtime directory: %w", err)
	}
	for _, e := range entries {
		name := e.Name()
		if d.ignoreDot && strings.HasPrefix(name, ".") {
			continue
		}
		if ext := filepath.Ext(name); ext != ".yaml" && ext != ".yml" {
			continue
		}
		fi, err := os.Stat(filepath.Join(target, name))
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				continue // removed since the listing
			}
			return st, fmt.Errorf("runtime directory: %w", err)
		}
		if fi.Mode().IsRegular() {
			st.files = append(st.files, fileState{name: name, fi: fi})
		}
	}
	return st, nil
}

// load loads every file of st: the domains and the rules of them all. Two
// files of one domain are an error, as in envoyproxy/ratelimit (without
// its MERGE_DOMAIN_CONFIG).
func (d runtimeDir) load(st state) (*domains, []policy.Rule, error) {
	if len(st.files) == 0 {
		return nil, nil, fmt.Errorf("no configuration file (*.yaml, *.yml) in %s", d.path())
	}
	var cfgs []policy.Config
	var names []string
	for _, f := range st.files {
		path := filepath.Join(st.target, f.name)
		cfg, err := policy.LoadFile(path)
		if err != nil {
			return nil, nil, err
		}
		cfgs, names = append(cfgs, cfg), append(names, path)
	}
	return newDomains(cfgs, names)
}

// domains are the configurations in force: an envoy file's by its domain,
// and sluice's format's rules, which answer every other domain.
type domains struct {
	byDomain map[string]*ruleSet
	any      *ruleSet // nil without a sluice-format file
}

// noRules answers a domain no file names: no limit applies.
var noRules = newRuleSet(policy.Config{Format: policy.FormatEnvoy})

// newDomains indexes configurations loaded from the files names.
func newDomains(cfgs []policy.Config, names []string) (*domains, []policy.Rule, error) {
	d := &domains{byDomain: map[string]*ruleSet{}}
	from := map[string]string{}
	var rules []policy.Rule
	var sluiceRules []policy.Rule
	for i, cfg := range cfgs {
		rules = append(rules, cfg.Rules...)
		if cfg.Format != policy.FormatEnvoy {
			sluiceRules = append(sluiceRules, cfg.Rules...)
			continue
		}
		if other, ok := from[cfg.Domain]; ok {
			return nil, nil, fmt.Errorf("%s: domain %q is also %s's: one file per domain", names[i], cfg.Domain, other)
		}
		from[cfg.Domain] = names[i]
		d.byDomain[cfg.Domain] = newRuleSet(cfg)
	}
	switch {
	case len(cfgs) == 1 && cfgs[0].Format != policy.FormatEnvoy:
		d.any = newRuleSet(cfgs[0])
	case sluiceRules != nil:
		d.any = newRuleSet(policy.Config{Format: policy.FormatSluice, Rules: sluiceRules})
	}
	return d, rules, nil
}

// lookup returns the rules that answer domain.
func (d *domains) lookup(domain string) *ruleSet {
	if rs, ok := d.byDomain[domain]; ok {
		return rs
	}
	if d.any != nil {
		return d.any
	}
	return noRules
}

// watcher applies the directory's changes to a limiter and the domains
// in force: a change once it has settled (the same files, sizes and times
// at two polls in a row); a change that does not load, or that the
// limiter refuses, keeps the rules in force and is logged.
type watcher struct {
	dir     runtimeDir
	applied state // the state in force
	l       *sluice.Limiter
	store   func(*domains) // makes domains the ones in force
	logger  *slog.Logger

	seen      *state // a change seen at the last poll, not yet settled
	complaint string // the last error logged, not repeated
}

// run polls the directory every interval until ctx ends.
func (w *watcher) run(ctx context.Context) {
	t := time.NewTicker(w.dir.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.poll()
	}
}

// poll reads the directory once, and applies its files if a change has
// settled since the last poll.
func (w *watcher) poll() {
	d := w.dir
	st, err := d.poll()
	if err != nil {
		if msg := err.Error(); msg != w.complaint {
			w.complaint = msg
			w.logger.Warn("sluice serve: runtime directory unreadable; the rules in force stay", "dir", d.path(), "err", err)
		}
		w.seen = nil
		return
	}
	w.complaint = ""
	if st.same(w.applied) {
		w.seen = nil
		return
	}
	if w.seen == nil || !st.same(*w.seen) {
		w.seen = &st // changed: wait for it to settle
		return
	}
	w.seen, w.applied = nil, st
	doms, rules, err := d.load(st)
	if err == nil {
		err = w.l.SetRules(rules...)
	}
	if err != nil {
		w.logger.Error("sluice serve: configuration not applied; the rules in force stay", "dir", d.path(), "err", err)
		return
	}
	w.store(doms)
	w.logger.Info("sluice serve: configuration applied", "dir", d.path(), "files", len(st.files), "rules", len(rules))
}
