package syncer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/window"
)

// The bulk path: on a standalone store, the keys of a cycle that only push
// and pull travel as one bulkScript call per pipeline (the pushes, retry-safe
// per call) followed by one HGETALL per key (the pulls). Everything else (keys
// with an unanswered per-key batch or a correction, and reservations) takes
// the per-key path of syncScript. See bulkScript for the protocol.
//
// The pull reads the whole hash rather than the window's fields (HMGET): a
// hash this small is a listpack, which HMGET scans once per field asked for,
// while HGETALL reads it once. On a hash holding one bucket it costs the
// store about a third of what the HMGET of the window's fields did, on a
// full window about two thirds (BenchmarkSyncFloor). Only a hash that also
// holds eight or more instances' per-key bookkeeping fields is read faster
// by HMGET (benchmarks/HISTORY.md).

// bulkLanes is how many bulk calls a cycle keeps in flight at once, each on
// its own lane (and marker): two keep the store busy while the syncer settles
// one reply and builds the next call.
const bulkLanes = 2

// bulkCall is one bulkScript call and the pulls that follow it.
type bulkCall struct {
	seq   int64
	lane  int
	rules []*windowRule // the rules of keys, in ARGV order
	base  []int64       // per rule (as rules): its current bucket when the call was built
	keys  []bulkKey     // keys with counts first (in KEYS order: grouped by rule), then pull-only keys
	push  int           // len of the keys with counts
	sent  int           // times sent
	cmd   *redis.Cmd    // the script call of the last send
	epoch *redis.Cmd    // the store's epoch after the pulls (rebuild.go)
	ep    string        // the epoch the last send carried (startBulk)
	done  chan struct{} // closed when the last send has its reply
}

type bulkKey struct {
	it     item
	name   string
	boxed  any  // name as an interface value, boxed once for the script call and the pull
	rule   int  // index in bulkCall.rules
	drop   bool // remove this instance's reservation records of the key
	deltas []window.Bucket
	pull   *redis.MapStringStringCmd
}

// bulkable reports whether it can take the bulk path: a key with local state
// and nothing outstanding on the per-key path.
func (s *Syncer) bulkable(it item) bool {
	return s.bulk && it.ref != nil && len(it.ws) == 0 && !it.lease && !it.early && s.state[it.id] == nil
}

// newBulk prepares a call for items (all bulkable): their pending counts to
// push and their totals to pull.
func (s *Syncer) newBulk(items []item, now int64) *bulkCall {
	c := &bulkCall{keys: make([]bulkKey, 0, len(items))}
	ruleIdx := make(map[*windowRule]int, 1)
	var pullOnly []bulkKey
	// One backing array for every key's deltas: usually one bucket each.
	all := make([]window.Bucket, 0, len(items))
	for _, it := range items {
		r := it.id.rule
		ri, ok := ruleIdx[r]
		if !ok {
			ri = len(c.rules)
			ruleIdx[r] = ri
			c.rules = append(c.rules, r)
			c.base = append(c.base, r.geo.Index(now))
		}
		_, drop := s.recs[it.id]
		k := bulkKey{it: it, rule: ri, drop: drop}
		delete(s.recs, it.id)
		s.buf = r.keys.Pending(it.ref, now, s.buf[:0])
		if len(s.buf) == 0 && !k.drop {
			pullOnly = append(pullOnly, k)
			continue
		}
		start := len(all)
		all = append(all, s.buf...)
		k.deltas = all[start:len(all):len(all)]
		c.keys = append(c.keys, k)
	}
	c.push = len(c.keys)
	// bulkScript's order: by rule, and within a rule the keys with one
	// count in the base bucket first, in the order of their counts.
	slices.SortStableFunc(c.keys, func(a, b bulkKey) int {
		if a.rule != b.rule {
			return a.rule - b.rule
		}
		pa, pb := c.plain(&a), c.plain(&b)
		switch {
		case pa && pb:
			return cmp.Compare(a.deltas[0].Count, b.deltas[0].Count)
		case pa:
			return -1
		case pb:
			return 1
		}
		return 0
	})
	c.keys = append(c.keys, pullOnly...)
	c.names()
	c.seq = s.nextSeq(now)
	return c
}

// names sets the Redis key name of every key of c, all substrings of one
// string (built in a buffer, then copied once): a cycle builds a name for
// every dirty key, and one string each was the largest share of the
// syncer's allocations.
func (c *bulkCall) names() {
	ends := make([]int, len(c.keys))
	n := 0
	for _, k := range c.keys {
		r := c.rules[k.rule]
		n += len(r.prefix) + len(k.it.id.key) + len(r.suffix) // more if a key has bytes to encode
	}
	b := make([]byte, 0, n)
	for i := range c.keys {
		k := &c.keys[i]
		b = c.rules[k.rule].appendKeyName(b, k.it.id.key)
		ends[i] = len(b)
	}
	all := string(b)
	start := 0
	for i, end := range ends {
		c.keys[i].name = all[start:end]
		c.keys[i].boxed = c.keys[i].name
		start = end
	}
}

// bulkArgs returns the call's EVALSHA command, built here rather than by
// Script.EvalSha so that the key names go in as the values boxed once by
// names (EvalSha would box each again). Every argument is a value, not a
// pointer: go-redis writes *string and *int64 as their values, but its hooks
// and error messages (a tracing hook's statement) would print addresses.
// The keys with counts are in bulkScript's order (newBulk): a key with one
// count in its rule's base bucket has its count, or is in a run that shares
// one; any other key has one argument, its tokens, all in one string built
// here.
func (s *Syncer) bulkArgs(c *bulkCall) []any {
	args := make([]any, 0, 6+c.push+5+7*len(c.rules)+c.push)
	args = append(args, "evalsha", bulkScript.Hash(), 2+c.push, s.markers[c.lane])
	for _, k := range c.keys[:c.push] {
		args = append(args, k.boxed)
	}
	args = append(args, s.epochKey)
	args = append(args, strconv.FormatInt(c.seq, 10), s.markerTTL.Load(), s.cfg.InstanceID, len(c.rules), c.ep)
	// Per rule: its keys with one count in the base bucket, its others
	// (their tokens in b, each key's ending in a space).
	type part struct {
		plain, tokens int
	}
	parts := make([]part, len(c.rules))
	var b []byte
	var ends []int
	for i := range c.keys[:c.push] {
		k := &c.keys[i]
		p := &parts[k.rule]
		if c.plain(k) {
			p.plain++
			continue
		}
		p.tokens++
		if k.drop {
			b = append(b, "! "...)
		}
		for _, d := range k.deltas {
			b = strconv.AppendInt(b, d.Index, 10)
			b = append(b, ':')
			b = strconv.AppendInt(b, d.Count, 10)
			b = append(b, ' ')
		}
		ends = append(ends, len(b))
	}
	for i, r := range c.rules {
		args = append(args, r.subArg(r.geo.Start(c.base[i])), r.span, r.ttlMs, r.fieldBound(), c.base[i], parts[i].plain, parts[i].tokens)
	}
	toks := string(b)
	start := 0
	for i := 0; i < c.push; {
		k := &c.keys[i]
		if !c.plain(k) {
			args = append(args, toks[start:ends[0]])
			start, ends = ends[0], ends[1:]
			i++
			continue
		}
		j := i + 1
		for j < c.push && c.sameCount(k, &c.keys[j]) {
			j++
		}
		if j-i > 1 {
			args = append(args, i-j) // small numbers box without allocating
		}
		args = append(args, k.deltas[0].Count)
		i = j
	}
	return args
}

// sameCount reports whether plain key a and key b share a count in c's
// script call: b is plain too, of the same rule, with the same count.
func (c *bulkCall) sameCount(a, b *bulkKey) bool {
	return a.rule == b.rule && c.plain(b) && a.deltas[0].Count == b.deltas[0].Count
}

// plain reports whether k is passed by its count alone in c's script call:
// it has one count, positive, in its rule's base bucket, and nothing to
// clean.
func (c *bulkCall) plain(k *bulkKey) bool {
	return !k.drop && len(k.deltas) == 1 && k.deltas[0].Index == c.base[k.rule] && k.deltas[0].Count > 0
}

// sendBulk sends c in one pipeline, loading the script once if the store
// does not have it.
func (s *Syncer) sendBulk(ctx context.Context, c *bulkCall) {
	send := func() {
		pipe := s.cfg.Client.Pipeline()
		c.cmd = redis.NewCmd(ctx, s.bulkArgs(c)...)
		_ = pipe.Process(ctx, c.cmd)
		// The pulls' arguments in one array: NewMapStringStringCmd would
		// allocate each key's.
		all := make([]any, 0, 2*len(c.keys))
		for i := range c.keys {
			k := &c.keys[i]
			all = append(all, "hgetall", k.boxed)
			k.pull = redis.NewMapStringStringCmd(ctx, all[2*i:2*i+2:2*i+2]...)
			_ = pipe.Process(ctx, k.pull)
		}
		// The epoch once the pulls have run: a store that lost its data
		// between the script and them has none, or another (rebuild.go).
		c.epoch = redis.NewCmd(ctx, "get", s.epochKey)
		_ = pipe.Process(ctx, c.epoch)
		s.stats.roundTrips.Add(1)
		s.stats.commands.Add(int64(2 + len(c.keys)))
		if c.sent > 0 {
			s.stats.retried.Add(1)
		}
		c.sent++
		_, _ = pipe.Exec(ctx) // errors are per command
		s.heard(c.cmd.Err())
	}
	send()
	if isNoScript(c.cmd.Err()) {
		c.sent-- // not executed
		if err := bulkScript.Load(ctx, s.cfg.Client).Err(); err != nil {
			return // the NOSCRIPT error stands: the call is resent later
		}
		send()
	}
}

// syncBulk pushes and pulls items (all bulkable) on the bulk path and waits
// for the answer. On an error the call is kept, to be resent as it is by
// resendBulk before anything else is pushed.
func (s *Syncer) syncBulk(ctx context.Context, items []item) error {
	if len(items) == 0 {
		return nil
	}
	c := s.newBulk(items, s.Now())
	s.startBulk(ctx, c)
	if err := s.landBulk(c); err != nil {
		return err
	}
	return s.settleBulk(c)
}

// oldest returns the call of the smallest sequence number in cs, or nil.
func oldest(cs []*bulkCall) *bulkCall {
	var o *bulkCall
	for _, c := range cs {
		if c != nil && (o == nil || c.seq < o.seq) {
			o = c
		}
	}
	return o
}

// resendBulk resends the unanswered bulk calls, oldest first, and stops at
// the first that fails (it and the newer ones stay unanswered).
func (s *Syncer) resendBulk(ctx context.Context) error {
	for len(s.unacked) > 0 {
		c := s.unacked[0]
		s.unacked = s.unacked[1:]
		s.startBulk(ctx, c)
		if err := s.landBulk(c); err != nil {
			// landBulk queued c behind the rest: put it back in front.
			s.unacked = append([]*bulkCall{c}, s.unacked[:len(s.unacked)-1]...)
			return err
		}
		if err := s.settleBulk(c); err != nil {
			return err
		}
	}
	s.unacked = nil
	return nil
}

// startBulk sends c in the background; landBulk waits for its reply. The
// loop builds the next call and settles the previous one meanwhile, so the
// syncer's work overlaps the store's. Only the send runs in the background:
// c and the syncer's state are touched by the loop alone.
func (s *Syncer) startBulk(ctx context.Context, c *bulkCall) {
	c.done = make(chan struct{})
	c.ep = s.epoch // read by the loop alone
	go func() {
		defer close(c.done)
		ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
		defer cancel()
		s.sendBulk(ctx, c)
	}()
}

// landBulk waits for c's reply. If the call failed, c is queued to be resent
// (it may or may not have run) and the error returned; the store is marked
// unhealthy unless Redis itself answered the error.
func (s *Syncer) landBulk(c *bulkCall) error {
	<-c.done
	err := c.cmd.Err()
	if err == nil {
		return nil
	}
	s.unacked = append(s.unacked, c)
	err = fmt.Errorf("syncer: push: %w", err)
	s.failed(err)
	var rerr redis.Error
	if !errors.As(err, &rerr) {
		s.setHealth(false, err)
	}
	return err
}

// settleBulk applies a landed call's reply. A reply it cannot read leaves
// the call queued for a resend, which the store recognises as run.
func (s *Syncer) settleBulk(c *bulkCall) error {
	if err := s.applyBulk(c); err != nil {
		s.unacked = append(s.unacked, c)
		err = fmt.Errorf("syncer: push: %w", err)
		s.failed(err)
		return err
	}
	return nil
}

// applyBulk settles every key of an answered call: its counts are
// acknowledged (unless its writes failed) and its view refreshed from its
// pull.
func (s *Syncer) applyBulk(c *bulkCall) error {
	v, err := c.cmd.Slice()
	if err != nil {
		return err
	}
	if len(v) < 2 {
		return fmt.Errorf("unexpected reply of %d values", len(v))
	}
	nowUs, ok := v[0].(int64)
	if !ok {
		return fmt.Errorf("unexpected reply value %v", v[0])
	}
	if st, _ := v[1].(int64); st == 2 && len(v) == 3 {
		// Sent in another epoch than the store's: nothing ran, and the
		// pulls after it read a store that lost its data. The call is
		// resent once the instance has restored the store (rebuild.go).
		ep, _ := v[2].(string)
		s.lossSeen(ep)
		return s.lossErr(ep)
	}
	if c.ep != "" {
		// The store lost its data after the script ran (the pulls read
		// what was left, and the counts pushed are gone): the call is
		// resent once the instance has restored the store, nothing of it
		// taken. A missing epoch is learnt, and started, by a look.
		ep, err := c.epoch.Text()
		switch {
		case err == redis.Nil:
			if lerr := s.look(s.life); lerr != nil {
				return lerr
			}
			if s.lost == "" {
				return fmt.Errorf("the store's epoch went missing")
			}
			return s.lossErr(s.lost)
		case err != nil:
			return err
		case ep != c.ep:
			s.lossSeen(ep)
			return s.lossErr(ep)
		}
	}
	var failed map[int]bool
	for _, x := range v[2:] {
		i, ok := x.(int64)
		if !ok {
			return fmt.Errorf("unexpected reply value %v", x)
		}
		if failed == nil {
			failed = map[int]bool{}
		}
		failed[int(i)-1] = true
	}
	nowStore := nowUs * int64(time.Microsecond)
	totals := make([]int64, 0, 16)
	for i := range c.keys {
		k := &c.keys[i]
		r := c.rules[k.rule]
		oldest := r.geo.Index(nowStore) - int64(r.span) + 1
		acked := k.deltas
		if failed[i] {
			acked = nil
			r.keys.MarkDirty(k.it.ref) // still pending: try again next cycle
		}
		tot, ok := pulled(k.pull, oldest, r.span, totals[:0])
		if !ok {
			tot = nil
			r.keys.MarkDirty(k.it.ref) // pull again next cycle
		}
		s.pulledTotals(r, nowStore, oldest, tot)
		for _, o := range r.keys.Settle(k.it.ref, s.Now(), acked, oldest, tot, window.Bucket{}) {
			s.correct(k.it.id, k.it.ref, o.Index, -o.Count) // refunded after the push
		}
		if len(k.deltas) > 0 {
			s.prev = append(s.prev, k.it)
		}
		s.stats.keySyncs.Add(1)
	}
	return nil
}

// pulled reads the totals of the span buckets from oldest on from an
// HGETALL reply (buckets it lacks are 0; fields that are not buckets, the
// per-key path's bookkeeping, are skipped), the bucket after them (leases
// granted ahead: see syncScript) counted in the last; ok is false if the
// reply failed or a bucket does not hold an integer.
func pulled(cmd *redis.MapStringStringCmd, oldest int64, span int, dst []int64) ([]int64, bool) {
	h, err := cmd.Result()
	if err != nil {
		return dst, false
	}
	start := len(dst)
	for range span {
		dst = append(dst, 0)
	}
	for f, v := range h {
		if len(f) > 1 && f[0] == 'v' {
			f = f[1:] // a bucket's count restored after a loss (rebuild.go)
		}
		if f == "" || f[0] < '0' || f[0] > '9' {
			continue // "i:…", "r…": bookkeeping
		}
		j, err := strconv.ParseInt(f, 10, 64)
		if err != nil || j < oldest || j > oldest+int64(span) {
			continue // out of the window: the next push that starts a bucket cleans it
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return dst[:start], false
		}
		dst[start+min(int(j-oldest), span-1)] += n
	}
	return dst, true
}
