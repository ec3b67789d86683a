package sluice

import (
	"time"

	"github.com/sluicehq/sluice/policy"
)

// Rule returns the limiter's rule named name, as New resolved it (its Mode
// is never ModeDefault), and whether there is one. Middleware reads it to
// describe a rule to clients (its Limit and Window), without a check. An
// InFlight rule is returned with its Name, Limit (in force), Mode and
// InFlight.
func (l *Limiter) Rule(name string) (policy.Rule, bool) {
	r := l.rule(name)
	if r == nil {
		if ir := l.inf.rule(name); ir != nil {
			mode := policy.Local
			if ir.fleet {
				mode = policy.Strict
			}
			return policy.Rule{Name: ir.name, Limit: ir.limit.Load(), Mode: mode, InFlight: true}, true
		}
		return policy.Rule{}, false
	}
	return r.pr, true
}

// MaxKeyLength returns the longest key the limiter accepts, in bytes
// (Options.MaxKeyLength, or DefaultMaxKeyLength): a longer key is rejected
// with ErrKeyTooLong.
func (l *Limiter) MaxKeyLength() int { return l.opts.MaxKeyLength }

// Window returns the Window in force of the rule named name, as the rules
// are now (after SetRules or a WatchFile reload; an override tier has its
// rule's), and whether there is such a rule. It costs a lookup and no
// allocation: middleware reads it for every response, to tell clients the
// window of the rule in force.
func (l *Limiter) Window(name string) (time.Duration, bool) {
	r := l.rule(name)
	if r == nil {
		return 0, false
	}
	return r.window, true
}
