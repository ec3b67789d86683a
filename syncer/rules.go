package syncer

import (
	"time"

	"github.com/sluicehq/sluice/internal/syncport"
)

// Rules returns the syncer's rule registration, through which the engines
// add their rules, before or after Start.
func (s *Syncer) Rules() syncport.Registry { return ruleSet{s} }

// ruleSet is the view Rules returns.
type ruleSet struct{ s *Syncer }

// AddRule adds a window rule (Syncer.addRule).
func (r ruleSet) AddRule(rc syncport.RuleConfig) (syncport.WindowStore, error) {
	return r.s.addRule(rc)
}

// AddGCRA adds a GCRA rule (Syncer.addGCRA).
func (r ruleSet) AddGCRA(name string, interval, burst, store int64) (syncport.GCRAStore, error) {
	g, err := r.s.addGCRA(name, interval, burst, store)
	if err != nil {
		return nil, err
	}
	return g, nil
}

// AddLog adds a sliding log rule (Syncer.addLog).
func (r ruleSet) AddLog(name string, window time.Duration, limit int64) (syncport.LogStore, error) {
	l, err := r.s.addLog(name, window, limit)
	if err != nil {
		return nil, err
	}
	return l, nil
}
