package syncer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/syncport"
	"github.com/sluicehq/sluice/window"
)

type batch struct {
	seq    int64
	deltas []window.Bucket // from pend: acknowledged on success
	forced []window.Bucket // corrections: not in pend
	costs  []int64         // reservations (decided only on the first send)
	ws     []*waiter       // their waiters
	sent   int             // times sent
}

// call is one key's script call within a pipeline.
type call struct {
	it      item
	batches []*batch
	cmd     *redis.Cmd
}

// nextSeq returns a sequence number larger than every earlier one: the store
// time in µs, or one more than the last if the clock has not moved.
func (s *Syncer) nextSeq(now int64) int64 {
	s.seq = max(s.seq+1, now/int64(time.Microsecond))
	return s.seq
}

// build prepares a key's call: its unanswered batches, resent as they were,
// and a new batch with what it admitted since, its corrections and its
// reservations. ok is false if there is nothing to send.
func (s *Syncer) build(it item, now int64) (c call, ok bool) {
	r := it.id.rule
	ks := s.state[it.id]
	if it.ref == nil && ks != nil {
		it.ref = ks.ref
	}
	var pend []window.Bucket
	if it.ref != nil {
		s.buf = r.keys.Pending(it.ref, now, s.buf[:0])
		pend = s.buf
	}
	nb := s.newBatch()
	for _, p := range pend {
		count := p.Count
		if ks != nil {
			for _, b := range ks.batches {
				for _, d := range b.deltas {
					if d.Index == p.Index {
						count -= d.Count
					}
				}
			}
		}
		if count > 0 {
			nb.deltas = append(nb.deltas, window.Bucket{Index: p.Index, Count: count})
		}
	}
	if ks != nil {
		nb.forced, ks.corr = ks.corr, nil
		c.batches = append(c.batches, ks.batches...)
	}
	for _, w := range it.ws {
		if w.state.CompareAndSwap(wQueued, wSent) {
			nb.costs = append(nb.costs, w.n)
			nb.ws = append(nb.ws, w)
		}
		// A waiter that gave up before this send decided (and counted)
		// by its failure mode: nothing to send for it.
	}
	// A lease goes with a batch (so that a resend finds it recorded): a
	// key asking for one sends a batch even with nothing else in it.
	if len(nb.deltas) > 0 || len(nb.forced) > 0 || len(nb.costs) > 0 || (it.lease && it.ref != nil) {
		nb.seq = s.nextSeq(now)
		c.batches = append(c.batches, nb)
	} else {
		s.freeBatch(nb)
	}
	c.it = it
	// With nothing to push the call still pulls the key's totals.
	return c, len(c.batches) > 0 || it.ref != nil
}

// syncHash is syncScript's SHA1, boxed once.
var syncHash any = syncScript.Hash()

// args appends c's EVALSHA command to dst: built here rather than by
// Script.EvalSha, which copies the arguments into an array of its own, so
// that a pipeline's calls share one array (exec) and the rule's constant
// arguments go in boxed once (windowRule.head). Like bulkArgs, every argument is a
// value, not a pointer.
func (s *Syncer) args(dst []any, c *call) []any {
	r := c.it.id.rule
	now := s.Now()
	var lease, want int64 // N̂ and the units wanted: ask for a lease; 0: do not
	next := "0"
	if c.it.lease && c.it.ref != nil {
		lease = max(s.instances.Load(), 1)
		if c.it.next {
			want, next = c.it.want, "1"
		} else {
			want = r.keys.Want(c.it.ref, now, s.peak(c.it.id, r.geo.Index(now)))
		}
	}
	var args []any
	if s.standalone {
		args = append(dst, "evalsha", syncHash, 2, r.keyName(c.it.id.key), s.epochKey)
	} else {
		args = append(dst, "evalsha", syncHash, 1, r.keyName(c.it.id.key))
	}
	args = append(args, r.subArg(now), r.head[1], r.limitValue(), r.head[2], r.head[3], len(c.batches), r.weigh, lease, want, next, s.epochArg())
	for _, b := range c.batches {
		costs := b.costs
		if b.sent > 0 {
			costs = nil // decided on the first send, or by the caller's fallback
			s.stats.retried.Add(1)
		}
		b.sent++
		args = append(args, b.seq, len(b.deltas)+len(b.forced), len(costs)) // go-redis writes it in decimal
		for _, d := range b.deltas {
			args = append(args, d.Index, d.Count)
		}
		for _, d := range b.forced {
			args = append(args, d.Index, d.Count)
		}
		for _, n := range costs {
			args = append(args, n)
		}
	}
	return args
}

// syncPerKey sends one pipeline of per-key calls for items and applies the
// replies. It returns the first store error.
func (s *Syncer) syncPerKey(ctx context.Context, items []item) error {
	now := s.Now()
	calls := s.calls[:0]
	defer func() {
		clear(calls) // no reply or batch kept past the pipeline
		s.calls = calls[:0]
	}()
	for _, it := range items {
		if c, ok := s.build(it, now); ok {
			calls = append(calls, c)
		} else if ks := s.state[it.id]; ks != nil && len(ks.batches) == 0 && len(ks.corr) == 0 {
			delete(s.state, it.id)
		}
	}
	if len(calls) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	s.exec(ctx, calls)
	var first error
	for i := range calls {
		c := &calls[i]
		err := c.cmd.Err()
		if err == nil {
			err = s.apply(c)
		}
		if err != nil {
			s.fail(c, err)
			if first == nil {
				first = fmt.Errorf("syncer: push: %w", err)
			}
		}
	}
	if first != nil {
		s.failed(first)
		var rerr redis.Error
		if !errors.As(first, &rerr) && !errors.Is(first, errStoreLost) {
			s.setHealth(false, first)
		}
	}
	return first
}

// exec sends the calls in one pipeline; calls the store answers NOSCRIPT to
// (a new or restarted node) are sent again after loading the script, on every
// shard of a cluster.
func (s *Syncer) exec(ctx context.Context, calls []call) {
	send := func(idx []int) {
		pipe := s.cfg.Client.Pipeline()
		// One array for every call's arguments: about 20 values a call.
		all := make([]any, 0, 20*len(idx))
		for _, i := range idx {
			c := &calls[i]
			start := len(all)
			all = s.args(all, c)
			c.cmd = redis.NewCmd(ctx, all[start:len(all):len(all)]...)
			c.cmd.SetFirstKeyPos(3) // the key's slot, on a cluster
			_ = pipe.Process(ctx, c.cmd)
		}
		s.stats.roundTrips.Add(1)
		s.stats.commands.Add(int64(len(idx)))
		_, _ = pipe.Exec(ctx) // errors are per command
		s.heard(calls[idx[0]].cmd.Err())
	}
	all := make([]int, len(calls))
	for i := range all {
		all[i] = i
	}
	send(all)
	var redo []int
	for i := range calls {
		if isNoScript(calls[i].cmd.Err()) {
			redo = append(redo, i)
			// Not executed: this send does not count.
			for _, b := range calls[i].batches {
				b.sent--
			}
		}
	}
	if len(redo) == 0 {
		return
	}
	if err := syncScript.Load(ctx, s.cfg.Client).Err(); err != nil {
		return // the NOSCRIPT errors stand; the calls are retried next cycle
	}
	send(redo)
}

func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}

// apply handles a successful reply: answers the waiters, turns store
// admissions nobody counted on into corrections, and settles the key.
func (s *Syncer) apply(c *call) error {
	r := c.it.id.rule
	v, err := c.cmd.Slice()
	if err != nil {
		return err
	}
	if st, _ := v[0].(int64); st == -1 && len(v) == 2 {
		// Sent in another epoch than the store's: nothing ran (rebuild.go).
		ep, _ := v[1].(string)
		s.lossSeen(ep)
		return s.lossErr(ep)
	}
	if len(v) != 4+r.span+2*len(c.batches) {
		return fmt.Errorf("unexpected reply of %d values", len(v))
	}
	grant, _ := v[len(v)-2].(int64)
	grantAt, _ := v[len(v)-1].(int64)
	// The totals outlive the call only in its waiters' Answers: without
	// waiters they go in the syncer's scratch array.
	var ints []int64
	if slices.ContainsFunc(c.batches, func(b *batch) bool { return len(b.ws) > 0 }) {
		ints = make([]int64, 2+r.span)
	} else {
		s.totals = slices.Grow(s.totals[:0], 2+r.span)[:2+r.span]
		ints = s.totals
	}
	for i := range ints {
		n, ok := v[i].(int64)
		if !ok {
			return fmt.Errorf("unexpected reply value %v", v[i])
		}
		ints[i] = n
	}
	nowStore, oldest, totals := ints[0]*int64(time.Microsecond), ints[1], ints[2:]
	s.pulledTotals(r, nowStore, oldest, totals)
	lease := window.Bucket{Index: grantAt, Count: grant}
	res := syncport.Answer{At: nowStore, First: oldest, Totals: totals, Lease: grant}
	type answer struct {
		w   *waiter
		res syncport.Answer
		k   int64 // bucket the store counted an admission in
	}
	acked := s.acked[:0] // Settle reads it; nothing keeps it
	defer func() { s.acked = acked[:0] }()
	var answers []answer
	for bi, b := range c.batches {
		status, _ := v[2+r.span+2*bi].(int64)
		bits, _ := v[2+r.span+2*bi+1].(string)
		acked = append(acked, b.deltas...)
		if status == 2 {
			continue
		}
		k := r.geo.Index(nowStore)
		if status == 1 {
			// Applied by an earlier send (a go-redis retry, or ours after
			// a lost reply): the store returns the results it recorded,
			// the bucket it counted the admissions in, and the lease it
			// granted and its bucket (that of the admissions in a record
			// that names none), which this instance never learned of:
			// give it back.
			var rest, kb, gb, lbs string
			bits, rest, _ = strings.Cut(bits, ":")
			kb, rest, _ = strings.Cut(rest, ":")
			gb, lbs, _ = strings.Cut(rest, ":")
			if kk, err := strconv.ParseInt(kb, 10, 64); err == nil {
				k = kk
			}
			if g, err := strconv.ParseInt(gb, 10, 64); err == nil && g > 0 {
				lb := k
				if b, err := strconv.ParseInt(lbs, 10, 64); err == nil {
					lb = b
				}
				s.correct(c.it.id, c.it.ref, lb, -g)
			}
		}
		if len(b.costs) == 0 {
			continue
		}
		if s.bulk && c.it.ref != nil {
			// Only a key with local state can take the bulk path, which
			// drops the record; an untracked key's record expires with its
			// hash, and recs must not grow with every such key (a flood).
			s.recs[c.it.id] = s.localNow()
		}
		if b.ws == nil {
			// The callers were answered with an error when a send
			// failed, and decided by their failure mode: undo what the
			// store admitted for them.
			for i, n := range b.costs {
				if i < len(bits) && bits[i] == '1' {
					s.correct(c.it.id, c.it.ref, k, -n)
				}
			}
			continue
		}
		for i, w := range b.ws {
			a := answer{w: w, res: res, k: k}
			a.res.Admitted = i < len(bits) && bits[i] == '1'
			answers = append(answers, a)
		}
		b.ws = nil
	}
	if ks := s.state[c.it.id]; ks != nil {
		ks.batches = nil
		if len(ks.corr) == 0 {
			delete(s.state, c.it.id)
		}
	}
	if c.it.ref != nil {
		if lease.Count > 0 && !s.holdLease(c.it.id, c.it.ref, lease.Index, lease.Count) {
			// A grant no check can use (holdLease): give it back.
			s.correct(c.it.id, c.it.ref, lease.Index, -lease.Count)
			lease.Count = 0
		}
		for _, o := range r.keys.Settle(c.it.ref, s.Now(), acked, oldest, totals, lease) {
			s.correct(c.it.id, c.it.ref, o.Index, -o.Count) // refunded after the push
		}
		if len(c.batches) > 0 {
			s.prev = append(s.prev, c.it)
		}
	}
	// Answer the waiters after Settle, so a caller sees its key's fresh view.
	for _, a := range answers {
		s.stats.reservations.Add(1)
		if s.finish(a.w, a.res, nil) && a.res.Admitted {
			// The caller gave up waiting: it decided by its failure mode.
			s.correct(c.it.id, c.it.ref, a.k, -a.w.n)
		}
	}
	// Every batch of the call is applied: none is resent, so none is held.
	for _, b := range c.batches {
		s.freeBatch(b)
	}
	s.stats.keySyncs.Add(1)
	return nil
}

// freeBatches bounds the batches kept for reuse: a pipeline's worth.
const freeBatches = 256

// newBatch returns an empty batch, a recycled one if there is one: a
// per-key call allocated one for every key-sync.
func (s *Syncer) newBatch() *batch {
	if n := len(s.free); n > 0 {
		b := s.free[n-1]
		s.free[n-1] = nil
		s.free = s.free[:n-1]
		return b
	}
	return &batch{}
}

// freeBatch recycles b, which no call and no key state holds any more (its
// call was applied, or it was never sent), keeping its arrays of deltas and
// costs. The corrections it carried are dropped with their array: they came
// from a key's state and go back to none.
func (s *Syncer) freeBatch(b *batch) {
	if len(s.free) >= freeBatches {
		return
	}
	*b = batch{deltas: b.deltas[:0], costs: b.costs[:0]}
	s.free = append(s.free, b)
}

// fail handles a call without a usable reply. Its batches may or may not
// have been applied: they are kept, to be resent as they are. Its waiters get
// syncport.ErrUnavailable and decide by their failure mode.
func (s *Syncer) fail(c *call, err error) {
	ks := s.keyState(c.it.id, c.it.ref)
	ks.batches = c.batches
	for _, b := range c.batches {
		for _, w := range b.ws {
			s.finish(w, syncport.Answer{}, syncport.ErrUnavailable)
		}
		b.ws = nil
		// The waiters now decide by their failure mode, so the store must
		// never decide these reservations: resend without the costs even
		// if this send was not executed (NOSCRIPT, then the load failed).
		b.sent = max(b.sent, 1)
	}
}
