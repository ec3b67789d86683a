package syncer

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/window"
)

// Rebuild after a store loses its data (a FLUSHALL, a Redis restarted empty).
//
// The store holds an epoch: a key beside the registry, in its slot, without
// a TTL, that the first script to find it missing starts anew
// (registryScript, and on a standalone store syncScript and bulkScript too,
// which read it before anything else: one GET inside the script, no round
// trip). An instance knows the epoch its view of the fleet belongs to; a
// reply with another one means the store lost what it held. A store that
// went back in time (a failover to a replica that lagged) keeps its epoch,
// but not the instances' last heartbeats: the heartbeat that finds its own
// gone starts an epoch marked partial ("p…", registryScript). On a standalone
// store every call carries the caller's epoch and a call of another epoch
// runs nothing, so no instance decides on, or pulls, what is left of a store
// that lost its data before it has restored it; on a cluster only the
// heartbeat reads the epoch (a script may not touch a key of another slot),
// once a cycle.
//
// An instance that sees a new epoch stops the cycle under way, and the
// loop's next round trip restores every key it holds a view of before
// anything else (the next cycle, which the loop runs at once, or an urgent
// sync: restoring goes before any call the store would refuse), then pushes
// and pulls as usual; the cycle heartbeats after it: the instance joins the
// new registry once it has restored. Meanwhile its checks are decided on the
// view it holds, which the loss did not touch; a check whose call was in
// flight at the loss gets errStoreLost and is decided by the failure mode.
// (Sending the checks queued meanwhile to the failure mode rather than
// restoring first let a fixed window hold 112–122 for L = 100 in 3 of 15
// runs, a loss right after the window started: each instance's part of the
// room ignored the others' leases granted ahead.)
// N̂ stays at its value before the loss for an InstanceTTL (the registry
// went with the data).
//
// The restore raises each bucket still inside the window to at least the
// count the instance last pulled, through a field of its own ("v<bucket>",
// restoreScript) that every reader adds to the bucket's own. The instances'
// views overlap (each holds every count pulled before the loss), so the
// store keeps the largest, not their sum: restores are idempotent, two
// instances restoring the same key, or one restoring twice, leave the
// largest view. The counts pushed since the loss, which no view holds, add
// to it. (After a partial loss, and on a cluster, where the other masters
// may have kept their keys, a restore only makes up what a bucket lacks of
// the view: see restoreScript.)

// errStoreLost means the store lost the data it held (its epoch changed):
// the call ran nothing, and is decided by the failure mode (a check) or sent
// again once the instance has restored what it saw (a push).
var errStoreLost = errors.New("syncer: the store lost its data")

// epochKey returns the epoch's key under prefix: it starts with the prefix,
// as every key does, and its hash tag is the registry's name, so that it is
// in the registry's slot and a cluster runs registryScript on both (a
// Prefix holds no braces: Options validates it).
func epochKey(prefix string) string {
	return prefix + ":epoch{" + prefix + ":instances}"
}

// lossSeen handles the store's epoch ep as a reply carried it, and reports
// whether it reveals a loss this instance did not know of: an epoch other
// than the one its view belongs to and the one it is rebuilding into. It
// records it (s.lost), for the cycle to restore at once, and holds N̂ at
// its value before the loss for an InstanceTTL, while the instances
// heartbeat into the new registry. The first epoch an instance sees is its
// own. The caller counts the failure (Stats.Failures), once: a push by the
// lossErr it returns, a heartbeat itself.
func (s *Syncer) lossSeen(ep string) bool {
	switch {
	case ep == "" || ep == s.epoch || ep == s.lost:
		return false
	case s.epoch == "":
		s.epoch = ep
		return false
	}
	s.lost = ep
	s.beatAt = 0 // the registry went with the data: nothing to check there
	s.stats.rebuilds.Add(1)
	s.held = max(s.held, s.instances.Load())
	s.holdUntil = s.localNow() + int64(s.cfg.InstanceTTL)
	return true
}

// lossErr is the error of a loss that made the epoch ep.
func (s *Syncer) lossErr(ep string) error {
	return fmt.Errorf("%w: epoch %s, the instance saw %s", errStoreLost, ep, s.epoch)
}

// epochArg returns the caller's epoch for a sync script call: "" on a
// cluster, where the call carries no epoch key and checks nothing.
func (s *Syncer) epochArg() string {
	if !s.standalone {
		return ""
	}
	return s.epoch
}

// restore rebuilds the store after a loss (s.lost), once per new epoch: for
// every key of every rule it holds a view of, it raises the store's count of
// each bucket still in the window to at least the view's (restoreScript), in
// pipelines of Batch calls. Then the instance's view belongs to the new
// epoch. An error leaves the restore to the next cycle, which does it again:
// a view's restore is idempotent (the store keeps the largest), but a lease
// that a call of a failed pipeline restored already is added again (its
// bucket's own field, HINCRBY), so that the store counts it twice: more
// than was admitted, never less, until the bucket leaves the window.
func (s *Syncer) restore(ctx context.Context) error {
	if s.lost == "" {
		return nil
	}
	now := s.Now()
	var refs []handle
	var buf []window.Bucket
	for _, r := range s.ruleList() {
		refs = r.keys.Viewed(refs[:0], now)
		for i := 0; i < len(refs); i += s.cfg.Batch {
			part := refs[i:min(i+s.cfg.Batch, len(refs))]
			if err := s.restoreBatch(ctx, r, part, now, &buf); err != nil {
				return err
			}
		}
	}
	s.epoch, s.lost = s.lost, ""
	return nil
}

// restoreBatch sends one pipeline of restoreScript calls, loading the
// script once if the store does not have it.
func (s *Syncer) restoreBatch(ctx context.Context, r *windowRule, refs []handle, now int64, buf *[]window.Bucket) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.OpTimeout)
	defer cancel()
	whole := "0"
	if s.standalone && !strings.HasPrefix(s.lost, "p") {
		whole = "1" // one server, not a partial loss: it took every key
	}
	send := func() ([]*redis.Cmd, error) {
		pipe := s.cfg.Client.Pipeline()
		cmds := make([]*redis.Cmd, 0, len(refs))
		for _, h := range refs {
			*buf = r.keys.View(h, now, (*buf)[:0])
			nv := len(*buf)
			*buf = r.keys.Leased(h, now, *buf)
			if len(*buf) == 0 {
				continue
			}
			args := make([]any, 0, 9+2*len(*buf))
			args = append(args, "evalsha", restoreScript.Hash(), 1, r.keyName(r.keys.Key(h)), r.subArg(now), r.span, r.ttlMs, whole, nv)
			for _, b := range *buf {
				args = append(args, b.Index, b.Count)
			}
			c := redis.NewCmd(ctx, args...)
			c.SetFirstKeyPos(3)
			_ = pipe.Process(ctx, c)
			cmds = append(cmds, c)
		}
		if len(cmds) == 0 {
			return nil, nil
		}
		s.stats.roundTrips.Add(1)
		s.stats.commands.Add(int64(len(cmds)))
		_, _ = pipe.Exec(ctx)
		s.heard(cmds[0].Err())
		for _, c := range cmds {
			if err := c.Err(); err != nil {
				return cmds, err
			}
		}
		return cmds, nil
	}
	_, err := send()
	if isNoScript(err) {
		if lerr := restoreScript.Load(ctx, s.cfg.Client).Err(); lerr != nil {
			err = lerr
		} else {
			_, err = send()
		}
	}
	if err != nil {
		err = fmt.Errorf("syncer: restore after a loss: %w", err)
		s.failed(err)
		return err
	}
	return nil
}

// restoreScript raises a limiter key's count of buckets to at least the
// counts given, through the field "v<bucket>" (which the sync script, the
// bulk path's pull and both cleanups read as part of the bucket).
//
// When the store lost everything (a standalone Redis whose epoch was lost:
// the epoch and every key are one server's), "v<bucket>" holds the largest
// count any restore gave; the bucket's own field holds only what was pushed
// since the loss, which no view holds, and adds to it. When the store may
// have kept the key (a partial loss; any loss on a cluster, where the
// master that held the epoch may be the only one that lost its data),
// "v<bucket>" holds the largest count any restore found missing from the
// bucket's own field, so that a bucket that lost nothing is left as it is;
// a count pushed since the loss and before a restore is then taken for a
// restored one (the store may count less than was admitted, by what was
// pushed in between).
//
// The caller's own leases that no view holds (granted for a bucket no pull
// has seen as started: the next bucket's, or the current one's right after
// it started) are added to their buckets' own fields, as their grants had
// counted them: each instance knows its own only, and restores it.
//
// It refreshes the key's TTL if it wrote. A bucket out of the window is
// skipped; a view's past the current bucket is counted in it, a lease's
// past the next one in the next one.
//
// KEYS[1] the hash. ARGV: sub-window µs (or period: luaBucket), span, ttl ms, "1" if the store lost
// everything or "0" if it may have kept the key, the number of view pairs,
// then (bucket, count) pairs: the view's, then the leases'. Returns the
// number of buckets written.
var restoreScript = redis.NewScript(luaBucket + `
local key = KEYS[1]
local span = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local k = bucket_of(now, ARGV[1])
local oldest = k - span + 1
local raised = 0
local whole = ARGV[4] == '1'
local views = 6 + 2 * tonumber(ARGV[5])
for i = 6, #ARGV - 1, 2 do
  local j = tonumber(ARGV[i])
  local c = tonumber(ARGV[i + 1])
  if i >= views then
    -- The caller's own lease, which no view holds: added to the bucket's
    -- own field, as its grant had counted it.
    if j > k + 1 then j = k + 1 end
    if j >= oldest and c > 0 then
      redis.call('HINCRBY', key, string.format('%.0f', j), c)
      raised = raised + 1
    end
  else
    if j > k then j = k end
    if j >= oldest and c > 0 then
      local js = string.format('%.0f', j)
      local f = 'v' .. js
      local cur = tonumber(redis.call('HGET', key, f) or '0') or 0
      local own = 0
      if not whole then own = tonumber(redis.call('HGET', key, js) or '0') or 0 end
      if c - own > cur then
        redis.call('HSET', key, f, string.format('%.0f', c - own))
        raised = raised + 1
      end
    end
  end
end
if raised > 0 then
  redis.call('PEXPIRE', key, ARGV[3])
end
return raised
`)
