package engine

import (
	"context"
	"strings"

	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/internal/verdict"
	"github.com/sluicehq/sluice/localcache"
	"github.com/sluicehq/sluice/policy"
	"github.com/sluicehq/sluice/window"
)

// gcraEventual is a TokenBucket or GCRA rule without a WarmUp, Eventual: the
// store keeps each key's exact bucket, of capacity SplitBucket's store, and
// leases each instance a few units at a time, which it admits on its own
// (window.SplitBucket proves the fleet bound: Burst + ⌊ε·Burst⌋ + r·τ in
// any interval τ, in real time). Its paths:
//
//   - local: Check → localcache.LeaseTable.Allow: one compare-and-swap on the
//     units held → Result; the check that leaves less than half the lease
//     also starts refill, a lease request in the background;
//   - denied: … → Allow says Ask → Leases.Denied: the store's last TAT
//     denies it for sure → Result;
//   - store: … → Allow says ask → tableport.Leases.Ask (a lease to ask for, if no
//     other check of the key is asking) → syncport.GCRAStore (its lease): one script
//     call deciding the cost and taking the lease from the key's bucket,
//     waited for at most Timeout → Leases.Settle → window.GCRA's fields
//     on the store's answer → Result;
//   - fallback: the store fails, is down or does not answer in time →
//     strictKeyed.failed by the failure mode, as a Strict bucket's, except
//     that a timed-out check under FailLocal is decided on the share too,
//     not denied (the units held are still spent first: the store counted
//     them), and that the share starts from the store's bucket as this
//     instance last saw it (floored), not from a full one.
//
// Remaining is the units held plus what the store's bucket had left at its
// last answer, refilled since; ResetAfter is until that bucket is full;
// RetryAfter, on a denial, until the store admits the same cost if nothing
// else is taken, exact on the store's clock.
type gcraEventual struct {
	strictKeyed
	clock    keyClock
	g        window.GCRA // the store's bucket
	pool     int64       // the most units the fleet holds (window.SplitBucket)
	table    *localcache.LeaseTable
	fallback *localcache.GCRATable // the failure mode's (strictKeyed.table, floored)
	store    syncport.GCRAStore
}

// floored is the failure mode's table of an Eventual bucket: the full
// bucket, each unit costing N̂ (strictKeyed), on a TAT of at least the
// store's as the lease table last saw it, moved by the difference of the
// two capacities. So the share holds at most what the store's bucket held
// at its last answer, refilled since: without the floor, a store that fails
// right after the fleet drained a key's bucket would find every instance's
// share full, and the fleet would admit a whole Burst again at once (251 in
// half a second for Burst 100 at four instances, a Redis restarted empty
// on a loaded machine; Burst + ⌊ε·Burst⌋ + r·τ = 160).
type floored struct {
	*localcache.GCRATable
	leases *localcache.LeaseTable
	gap    int64 // the full bucket's tolerance less the store's, ns
}

// floor returns the least TAT of key's share: 0 (none) if the store has
// not answered a check of key.
func (f floored) floor(key string) int64 {
	if tat := f.leases.Leases().TAT(key); tat > 0 {
		return tat + f.gap
	}
	return 0
}

func (f floored) Allow(key string, now, n int64) verdict.Outcome {
	return f.AllowAbove(key, now, n, f.floor(key))
}

func (f floored) Peek(key string, now int64) verdict.Outcome {
	return f.PeekAbove(key, now, f.floor(key))
}

func newGCRAEventual(cfg Config) (Engine, error) {
	r := cfg.Rule
	s, err := strictStore(cfg)
	if err != nil {
		return nil, err
	}
	full := window.NewGCRA(r.Window, r.Limit, r.Burst)
	e := &gcraEventual{}
	capacity, pool := window.SplitBucket(full.Burst(), cfg.ErrorBudget)
	e.g, e.pool = window.NewGCRA(r.Window, r.Limit, capacity), pool
	if e.table, err = localcache.NewLeaseTable(e.g, cfg.Keys); err != nil {
		return nil, ruleError(r, err)
	}
	if e.fallback, err = localcache.NewGCRATable(full, cfg.Keys); err != nil {
		return nil, ruleError(r, err)
	}
	if e.store, err = s.AddGCRA(r.Name, full.Interval(), full.Burst(), capacity); err != nil {
		return nil, ruleError(r, err)
	}
	e.init(cfg, floored{GCRATable: e.fallback, leases: e.table, gap: full.Tolerance() - e.g.Tolerance()})
	e.eventual = true
	e.clock.init(cfg)
	e.SetFleet(1, false)
	return e, nil
}

// Check decides n for key: on the units held if it can (dated by the
// published time: the decision does not depend on it), else in the store.
func (g *gcraEventual) Check(ctx context.Context, key string, n int64) (Result, error) {
	if r, ok := g.held(key, n); ok {
		return r, nil
	}
	r, _, err := g.ask(ctx, key, n)
	return r, err
}

// held admits n for key on the units held, if there are enough (and asks
// for more in the background when they run low); ok is false if not.
func (g *gcraEventual) held(key string, n int64) (_ Result, ok bool) {
	o, step := g.table.Allow(key, g.clock.pub.Load(), n)
	switch step {
	case verdict.TakenLow:
		g.refill(key)
	case verdict.Ask:
		return Result{}, false
	}
	return result(o), true
}

// refill asks the store, in the background, for units to hold for key: the
// lease ran low, and the checks that follow should find units, not wait.
// It is the key's one ask for a lease until it is answered; what it gets
// is taken from the key's bucket at once, as any lease (the bound holds:
// an instance never holds more than its lease).
func (g *gcraEventual) refill(key string) {
	tk := g.table.Leases().Ask(key)
	if tk.Want == 0 {
		g.table.Leases().Settle(tk, verdict.NoAnswer, verdict.NoAnswer, 0)
		return
	}
	key = strings.Clone(key) // the caller's string may live in a reused buffer
	go func() {
		a, err := g.store.LeaseAbove(context.Background(), key, 0, tk.Want, tk.TAT, tk.Owed)
		if err != nil {
			g.table.Leases().Settle(tk, verdict.NoAnswer, verdict.NoAnswer, 0)
			return
		}
		g.table.Leases().Settle(tk, a.At, a.TAT, a.Leased)
	}()
}

// ask decides a check the units held do not cover: denied at once if the
// store's last TAT denies it, else in the store, with a lease request if no
// other check of the key is asking; stored reports that the store or that
// TAT decided it (not the failure mode).
func (g *gcraEventual) ask(ctx context.Context, key string, n int64) (_ Result, stored bool, _ error) {
	if o, ok := g.table.Leases().Denied(key, g.now(), n); ok {
		return result(o), true, nil
	}
	tk := g.table.Leases().Ask(key)
	a, err := g.store.LeaseAbove(ctx, key, n, tk.Want, tk.TAT, tk.Owed)
	if err != nil {
		g.table.Leases().Settle(tk, verdict.NoAnswer, verdict.NoAnswer, 0)
		r, err := g.failed(key, n, err)
		if r.Allowed && g.mode == policy.FailLocal {
			g.table.Leases().Owe(key, n) // the share admitted it: the store is charged later
		}
		return r, false, err
	}
	held := g.table.Leases().Settle(tk, a.At, a.TAT, a.Leased)
	res := Result{Allowed: a.Admitted, Remaining: held + g.g.Remaining(a.TAT, a.At), ResetAfter: g.g.ResetAfter(a.TAT, a.At)}
	if !a.Admitted {
		res.RetryAfter = retry(g.g.RetryAfter(a.TAT, a.At, n), res.ResetAfter)
	}
	g.counts.Add(PathUrgent, OutcomeOf(res.Allowed, nil))
	return res, true, nil
}

// Peek returns what a check of one unit would see, as this instance sees it.
func (g *gcraEventual) Peek(key string) Result { return result(g.table.Peek(key, g.now())) }

// Tick publishes now for the checks decided on the units held.
func (g *gcraEventual) Tick(now int64) { g.clock.Tick(now) }

// Sweep evicts the idle keys of the lease table and of the failure mode's.
func (g *gcraEventual) Sweep(now int64) int { return g.table.Sweep(now) + g.strictKeyed.Sweep(now) }

// SetFleet sizes the lease of each instance for instances live ones
// (window.Lease), and the failure mode's share.
func (g *gcraEventual) SetFleet(instances int64, down bool) {
	g.strictKeyed.SetFleet(instances, down)
	g.table.Leases().SetLease(window.Lease(g.pool, instances))
}

// Take decides n for key as Check does; the receipt says whether the store
// or a lease (Store) or the failure mode's table admitted it.
func (g *gcraEventual) Take(ctx context.Context, key string, n int64) (Result, Receipt, error) {
	if r, ok := g.held(key, n); ok {
		return r, Receipt{Store: true}, nil
	}
	r, stored, err := g.ask(ctx, key, n)
	return r, Receipt{Store: stored}, err
}

// Refund gives back an admission: the units go back to those held (the
// store counted them) or, if the failure mode admitted them, to its table.
func (g *gcraEventual) Refund(key string, n int64, rc Receipt) {
	if rc.Store {
		g.table.Refund(key, n)
		return
	}
	g.fallback.Refund(key, n*g.share.Load())
	if g.mode == policy.FailLocal {
		g.table.Leases().Owe(key, -n)
	}
}
