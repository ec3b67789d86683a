package syncer

import (
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/window"
)

// luaBucket defines bucket_of(now, arg), the scripts' bucket of the
// store's time now (µs) and its phase: arg is the rule's sub-window in µs
// (the bucket is ⌊now/sub⌋), or for a calendar quota "c<k>,<start>,<end>",
// the period the caller's clock is in and its bounds in µs (windowRule.subArg):
// the store's clock, a few milliseconds off the caller's at most, is in
// that period, or in the one after it past its end, or before it before
// its start. The period index is the bucket; the caller computes the
// calendar, which Lua has no time zones for.
const luaBucket = `
local function bucket_of(now, arg)
  local sub = tonumber(arg)
  if sub then
    local k = math.floor(now / sub)
    return k, (now - k * sub) / sub
  end
  local ks, ss, es = string.match(arg, '^c(-?%d+),(-?%d+),(-?%d+)$')
  local k, s, e = tonumber(ks), tonumber(ss), tonumber(es)
  if now >= e then return k + 1, 0 end
  if now < s then return k - 1, 0 end
  return k, (now - s) / (e - s)
end
`

// syncScript pushes one instance's batches for one limiter key, decides its
// reservations, and returns the key's per-bucket totals, all in one atomic
// step. The key is a hash: field "<bucket index>" holds a bucket's fleet-wide
// count; field "i:<instance>" the last batch sequence number applied from that
// instance, so a resent batch (go-redis retries, or our own retry after an
// ambiguous failure) is recognised and never counted twice; and for every
// applied batch that carried reservations or a lease, field
// "r<seq>:<instance>" holds "<seq>:<bits>:<bucket>:<lease>", its reservation
// results, the bucket they were counted in and the lease granted with it, until a later call of that instance shows it has the reply (its
// first batch is newer: the syncer resends every unanswered batch, oldest
// first) or the TTL passes. Keeping one record per batch matters when replies
// are lost several times in a row: each resend carries a newer batch too, and
// the results of the oldest must survive it.
//
// Cleanup. A call reads only its own instance's bookkeeping (its "i:" field
// and its records). When one of its writes starts a bucket (HINCRBY returns
// the count it added) or the hash is new, it also removes the buckets that
// left the window and the other instances' bookkeeping past its TTL, and
// refreshes the key's TTL, as bulkScript does: the TTL counts from the
// newest bucket's start, so the hash outlives every bucket and sequence
// number it holds. A pull writes nothing.
//
// Leases. A caller that asks for one (N̂ > 0 below) is granted, after its
// batches and reservations, a lease: units of the window's room counted at
// once, as if admitted, in the bucket the lease is for — the current one, or
// with "next" the one after it — the units it wants, at most
// floor((room − ⌊L/10⌋) / (N̂+1)): a share of what is left that leaves the
// other instances theirs, and never the last tenth of the limit, so that
// units leased but not yet used or given back cannot make a key offered
// below 0.9·L look full. The caller may then admit them on its own,
// unsynced, in that bucket only, and returns what it did not use with a
// negative correction once the bucket is over. The grant goes with the
// call's newest batch, only if that batch is applied now, and is kept in
// the batch's record like reservation results: a resent call grants nothing
// new and returns the recorded grant, which the caller, not having used it,
// gives back. A call without a batch asks for no lease.
//
// A lease of the next bucket is counted there before that bucket starts.
// Every pull returns the grants whole inside the current bucket's total, so
// that the other instances' views, which admit on their caps, count them
// too: a view cannot tell them from the current bucket's count, and must
// still count them once the next bucket has started and the oldest bucket
// has left. A lease is granted on the same count, the window's buckets and
// the next one's, so that no grant makes a view count more than the limit.
// A reservation, a count in the current bucket k, is in the windows that
// end in k and in k+1: the first holds the oldest bucket, which leaves the
// window as k+1 starts, the second the next bucket's grants instead (and no
// later window holds more: no bucket past the next one holds a count). So a
// reservation counts the window's buckets with the next bucket's grants in
// place of the oldest bucket's part where they are more: the larger of the
// two windows' estimates.
// No other count is ever in a bucket past the current one: a delta for a
// later bucket (the caller's clock runs ahead) is counted in the current
// one, except the return of unused units of a lease of the next bucket (a
// negative delta that bucket holds), which leaves it.
//
// KEYS[1] the hash.
// ARGV: sub-window µs (or a calendar period: luaBucket), span (buckets in a window), limit, ttl ms, instance id,
// batch count, "1" if the oldest bucket is weighted by its overlap with the
// window (window.NewWeighted) or "0" if it counts whole, N̂ to ask for a
// lease or 0, the units wanted, "1" to ask for the lease in the next bucket
// or "0" in the current one, then per batch: seq, delta count, reservation
// count, deltas as (bucket, count) pairs, reservation costs.
//
// Returns: now µs, oldest bucket, span totals from the oldest bucket to the
// current one (the current one's with the next one's, grants included),
// then per batch: status (0 applied now, 1 applied before with reservation
// results stored, 2 applied before without) and, for status 0, the
// reservation results as a string of '0'/'1'; for status 1
// "<bits>:<bucket>:<lease>:<lease bucket>"; then the lease granted now (0 if
// none) and the bucket it is counted in.
//
// Reservations are decided by the admit test of package window (LuaRoom,
// generated from window.Estimate.Room), on the estimate in its two parts:
// the buckets counted whole (and the next one), and the weighted oldest one.
//
// Numbers written to Redis are formatted with %.0f: Lua's default number
// formatting (%.14g) would round bucket indices and sequence numbers.
var syncScript = redis.NewScript(window.LuaRoom + luaBucket + `
local key = KEYS[1]
local span = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
local inst = ARGV[5]
local ifield = 'i:' .. inst
local nb = tonumber(ARGV[6])
local weigh_oldest = ARGV[7] == '1'
local lease_n = tonumber(ARGV[8])
local lease_want = tonumber(ARGV[9])
local lease_next = ARGV[10] == '1'
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
-- The store's epoch (epochKey, rebuild.go): a call made in another epoch than
-- the store's runs nothing, so that nothing is decided on, or pulled from,
-- a store that lost its data before the caller has rebuilt it.
if #KEYS > 1 and ARGV[11] ~= '' then
  local ep = redis.call('GET', KEYS[2])
  if ep ~= ARGV[11] then
    if not ep then
      ep = t[1] .. '.' .. t[2]
      redis.call('SET', KEYS[2], ep)
    end
    return {-1, ep}
  end
end
local k, phase = bucket_of(now, ARGV[1])
local oldest = k - span + 1
local expire_before = now - ttl * 1000
local last = 0
local recs = {}
local counts = {}
local all = redis.call('HGETALL', key)
-- Only this instance's bookkeeping is read on every call; the rest (other
-- instances' fields, buckets out of the window) is removed by clean, when
-- this call starts a bucket (below).
local mine = ':' .. inst
for f = 1, #all, 2 do
  local name = all[f]
  local c1 = string.byte(name, 1)
  if c1 == 105 then
    if name == ifield then
      local ts = tonumber(all[f + 1])
      if ts == nil or ts < expire_before then
        redis.call('HDEL', key, name)
      else
        last = ts
      end
    end
  elseif c1 == 114 then
    if string.sub(name, -#mine) == mine then
      local s = string.match(name, '^r(%d+):')
      if s and #name == 1 + #s + #mine then
        local v = all[f + 1]
        local ts = tonumber(string.match(v, '^%d+'))
        if ts == nil or ts < expire_before then
          redis.call('HDEL', key, name)
        else
          recs[s] = {name, string.sub(v, #s + 2)}
        end
      end
    end
  else
    -- A bucket's field, or its base restored after a loss ("v<bucket>").
    local j
    if c1 == 118 then j = tonumber(string.sub(name, 2)) else j = tonumber(name) end
    if j ~= nil and j >= oldest then
      counts[j] = (counts[j] or 0) + (tonumber(all[f + 1]) or 0)
    end
  end
end
-- clean removes the buckets before the window and the bookkeeping of other
-- instances past its TTL (or unreadable).
local function clean()
  local drop = {}
  for f = 1, #all, 2 do
    local name = all[f]
    local c1 = string.byte(name, 1)
    if c1 == 105 or c1 == 114 then
      local ts = tonumber(string.match(all[f + 1], '^%d+'))
      if ts == nil or ts < expire_before then
        drop[#drop + 1] = name
      end
    else
      local j
      if c1 == 118 then j = tonumber(string.sub(name, 2)) else j = tonumber(name) end
      if j == nil or j < oldest then
        drop[#drop + 1] = name
      end
    end
  end
  if #drop > 0 then
    redis.call('HDEL', key, unpack(drop))
  end
end
-- grew: a write of this call started a field of a bucket (HINCRBY returned
-- the count it added), or the hash is new.
local grew = #all == 0
local function incr(j, d)
  if redis.call('HINCRBY', key, string.format('%.0f', j), d) == d then
    grew = true
  end
end
-- estimate returns the window's estimate in its two parts, with the next
-- bucket's grants on top (for a lease), or in place of the oldest bucket's
-- part where they are more (for a reservation, placed) (see "Leases ahead"
-- above).
local function estimate(placed)
  local whole = 0
  for j = oldest + 1, k do
    whole = whole + (counts[j] or 0)
  end
  local old, ahead = counts[oldest] or 0, counts[k + 1] or 0
  local weighted = span > 1 and weigh_oldest
  if weighted then
    old = old * (1 - phase)
  end
  if placed then
    old, ahead = math.max(old, ahead), 0
  end
  if weighted then
    return whole + ahead, old
  end
  return whole + old + ahead, 0
end
local status = {}
local sets = {}
local lasts
local grant = 0
local lb = k
if lease_next then lb = k + 1 end
local i = 12
for b = 1, nb do
  local seqs = ARGV[i]
  local seq = tonumber(seqs)
  local np = tonumber(ARGV[i + 1])
  local nr = tonumber(ARGV[i + 2])
  i = i + 3
  if seq > last then
    for p = 1, np do
      local j = tonumber(ARGV[i])
      local d = tonumber(ARGV[i + 1])
      i = i + 2
      -- A count past the current bucket (clock skew) is counted in the
      -- current one, except a lease of the next bucket given back: it
      -- leaves the bucket that holds it.
      if j > k and not (j == k + 1 and d < 0 and (counts[j] or 0) >= -d) then j = k end
      if j >= oldest and d ~= 0 then
        counts[j] = (counts[j] or 0) + d
        incr(j, d)
      end
    end
    local bits = ''
    if nr > 0 then
      local whole, weighted = estimate(true)
      for r = 1, nr do
        local c = tonumber(ARGV[i])
        i = i + 1
        if c <= room(whole, weighted, limit) then
          whole = whole + c
          counts[k] = (counts[k] or 0) + c
          incr(k, c)
          bits = bits .. '1'
        else
          bits = bits .. '0'
        end
      end
    end
    last = seq
    lasts = seqs
    local g = 0
    if b == nb and lease_n > 0 then
      -- The lease goes with the call's newest batch, applied now: a
      -- resend of the call finds it in the batch's record below.
      local whole, weighted = estimate(false)
      g = math.min(lease_want, math.floor(math.max(0, room(whole, weighted, limit) - math.floor(limit / 10)) / (lease_n + 1)))
      if g > 0 then
        counts[lb] = (counts[lb] or 0) + g
        incr(lb, g)
        grant = g
      end
    end
    if nr > 0 or g > 0 then
      local rec = bits .. ':' .. string.format('%.0f', k) .. ':' .. string.format('%.0f', g) .. ':' .. string.format('%.0f', lb)
      local name = 'r' .. seqs .. ':' .. inst
      sets[#sets + 1] = name
      sets[#sets + 1] = seqs .. ':' .. rec
      recs[seqs] = {name, rec}
    end
    status[#status + 1] = 0
    status[#status + 1] = bits
  else
    i = i + 2 * np + nr
    local rec = recs[seqs]
    if rec then
      status[#status + 1] = 1
      status[#status + 1] = rec[2]
    else
      status[#status + 1] = 2
      status[#status + 1] = ''
    end
  end
end
if lasts then
  sets[#sets + 1] = ifield
  sets[#sets + 1] = lasts
  redis.call('HSET', key, unpack(sets))
end
if nb > 0 then
  local first = tonumber(ARGV[12])
  local old = {}
  for s, rec in pairs(recs) do
    if tonumber(s) < first then
      old[#old + 1] = rec[1]
    end
  end
  if #old > 0 then
    redis.call('HDEL', key, unpack(old))
  end
end
if grew then
  clean()
  redis.call('PEXPIRE', key, ttl)
end
local out = {now, oldest}
for j = oldest, k do
  out[#out + 1] = counts[j] or 0
end
out[#out] = out[#out] + (counts[k + 1] or 0)
for s = 1, #status do
  out[#out + 1] = status[s]
end
out[#out + 1] = grant
out[#out + 1] = lb
return out
`)

// registryScript heartbeats (or removes) an instance in the registry sorted
// set, whose scores are expiry times in ms, drops expired members, and returns
// the store's TIME, the number of live instances, the earliest expiry
// among them (ms; the oldest heartbeat plus its TTL) and 1 if the instance
// had no live entry (a heartbeat then registers it: its first, or one after
// its entry expired or the registry was lost), else 0. It can also only
// look: the same reply without touching the instance's entry.
//
// The script's first write is the heartbeat's ZADD (or, after a loss, the
// new epoch's SET): at maxmemory (noeviction) the store refuses it, and so
// the heartbeat, only while the script has written nothing.
//
// It also reads the store's epoch, KEYS[2] (see epochKey), and starts a new
// one if it is missing (not when removing): a store that lost its data lost
// it too, and the instances learn of the loss from the new epoch. It is kept
// without a TTL, so that only a loss removes it.
//
// An instance that has not rebuilt the store after a loss (its epoch, if it
// has one, is not the store's) only looks: it heartbeats once it has. A
// caller of the store's epoch also gives the expiry its last heartbeat
// wrote: if that has not passed and the registry holds an older one for
// it, or none, the store lost writes it had acknowledged while keeping the
// epoch (a failover to a replica that lagged), and the script starts a new
// epoch marked partial ("p…"): only some of the keys lost data.
//
// KEYS[1] the registry, KEYS[2] the epoch; ARGV: instance id, ttl ms, "0" to
// heartbeat, "1" to remove, "2" to look, the caller's epoch ("" if none yet),
// the expiry (ms) its last heartbeat wrote ("" if none).
//
// Returns: TIME's seconds and microseconds, the number of live instances,
// the earliest expiry, 1 if the caller had no live entry before this call
// (0 otherwise, and when removing), and the epoch.
var registryScript = redis.NewScript(`
local t = redis.call('TIME')
local nowms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[2])
local absent = 0
local ep = redis.call('GET', KEYS[2])
if ARGV[3] ~= '1' then
  local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
  if not score or tonumber(score) <= nowms then
    absent = 1
  end
  if not ep then
    ep = t[1] .. '.' .. t[2]
    redis.call('SET', KEYS[2], ep)
  elseif ARGV[4] == ep and ARGV[5] and ARGV[5] ~= '' and tonumber(ARGV[5]) > nowms and
      tonumber(score or '0') < tonumber(ARGV[5]) then
    -- The caller's last heartbeat, not expired yet, is gone: the store
    -- went back in time (a failover to a replica that lacked the last
    -- writes). A partial loss: its epoch says so.
    ep = 'p' .. t[1] .. '.' .. t[2]
    redis.call('SET', KEYS[2], ep)
  end
end
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[1], ARGV[1])
elseif ARGV[3] == '0' and (ARGV[4] == '' or ARGV[4] == ep) then
  redis.call('ZADD', KEYS[1], string.format('%.0f', nowms + ttl), ARGV[1])
end
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', string.format('%.0f', nowms))
redis.call('PEXPIRE', KEYS[1], ttl * 2)
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {t[1], t[2], redis.call('ZCARD', KEYS[1]), first[2] or '0', absent, ep or ''}
`)

// bulkScript pushes one instance's counts for many keys, of any rules, in
// one call, on a standalone store (a cluster would refuse keys of different
// slots in one call). It serves the cycle's common case: keys with counts to
// push and nothing else outstanding (no unanswered per-key batch, no
// correction, no reservation). The pulls travel as plain commands after it in
// the same pipeline, which the store runs in order.
//
// Retry safety is per call, not per key: KEYS[1] is the instance's marker,
// holding the sequence number of the last bulk call applied (and, after a
// colon, the keys of it that failed). A call whose number is not above it ran
// before (its reply was lost, or go-redis retried the pipeline) and is
// skipped whole; if it is that last call, the reply repeats its failed keys.
// The syncer sends at most one bulk call per pipeline and resends an
// unanswered one, with its number, before it pushes anything else: calls run
// in the order of their numbers, so a skipped call is always one that ran.
//
// Per key it adds the counts (a bucket past the store's current one is
// counted in the current one; one already out of the window is dropped, as
// in syncScript). When a push starts a bucket (HINCRBY returns the count it
// added), it refreshes the key's TTL and, if the hash has grown past its
// rule's field bound, removes buckets out of the window and per-key
// bookkeeping past its TTL (syncScript's rules), and the calling instance's
// reservation records (it has their replies, or it would not push the key on
// the bulk path; its "i:" field stays, to recognise a late per-key call).
// Refreshing only then is enough: the TTL is a window and a sub-window (plus
// a second) from the moment the newest bucket was started, so the key
// outlives every bucket it holds; and the hash only grows when a field is
// added. For a rule whose sub-window spans many sync intervals this saves two
// of the four calls per key. A key's writes run under pcall: a key that is
// not a hash (written by something else) fails alone, before anything of it
// is written, and its index is returned, so its counts stay pending and are
// never taken for pushed. (A bucket field holding a non-integer fails alone
// too, and its count is dropped.)
//
// The arguments are few per key, because each one costs the store: read from
// the connection, made a Lua string, and turned back into a command argument.
// Keys come grouped by rule. A rule's keys whose only count is in the rule's
// base bucket (the syncer's current one: nearly every key) come first, in
// the order of their counts: a key whose count no other shares has one
// argument, the count (always positive); a run of n keys with the same count
// has two for all of them, -n and the count, and each key no argument but
// its name. The
// count goes on to HINCRBY as the string it came as (a Lua number would be
// formatted again). Any other key has one argument, its tokens.
//
// KEYS: the marker, then the limiter keys, rule by rule: first its keys with
// one count in the base bucket, then the others. ARGV: seq, marker TTL ms,
// instance id, rule count, then per rule: sub-window µs (or period: luaBucket), span, key TTL ms,
// field bound, base bucket, its number of keys with one count in the base
// bucket, its number of other keys; then, for each rule in turn, the counts
// of the first (a count, or -n and a count), then the tokens of the others,
// one argument per key: space-separated "<bucket>:<count>" pairs, and "!" to
// clean the key now (the instance left a reservation record there).
//
// Returns: now µs, 1 if applied now or 0 if applied before, then the 1-based
// indices (counting the limiter keys only) of keys whose writes failed (for a
// call applied before: as recorded in the marker).
var bulkScript = redis.NewScript(luaBucket + `
local tonumber, type, pcall = tonumber, type, redis.pcall
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local ekey = KEYS[#KEYS]
local ep = redis.call('GET', ekey)
if ARGV[5] ~= '' and ep ~= ARGV[5] then
  if not ep then
    ep = t[1] .. '.' .. t[2]
    redis.call('SET', ekey, ep)
  end
  return {now, 2, ep}
end
local seq = tonumber(ARGV[1])
local mark = redis.call('GET', KEYS[1]) or ''
local last = tonumber(string.match(mark, '^%d+') or '0')
if seq <= last then
  local out = {now, 0}
  if seq == last then
    for x in string.gmatch(string.match(mark, ':(.*)$') or '', '%d+') do
      out[#out + 1] = tonumber(x)
    end
  end
  return out
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local mine = ':' .. ARGV[3]
local out = {now, 1}
local failed = {}
-- clean removes from key the buckets before oldest, bookkeeping older than
-- expire_before, and this instance's reservation records.
local function clean(key, oldest, expire_before)
  local names = redis.call('HKEYS', key)
  for f = 1, #names do
    local name = names[f]
    local c1 = string.byte(name, 1)
    if c1 == 114 and string.sub(name, -#mine) == mine then
      -- This instance's reservation records: it has their replies,
      -- or it would not push this key on the bulk path.
      redis.call('HDEL', key, name)
    elseif c1 == 105 or c1 == 114 then
      local ts = tonumber(string.match(redis.call('HGET', key, name) or '', '^%d+'))
      if ts == nil or ts < expire_before then
        redis.call('HDEL', key, name)
      end
    else
      local j
      if c1 == 118 then j = tonumber(string.sub(name, 2)) else j = tonumber(name) end
      if j == nil or j < oldest then
        redis.call('HDEL', key, name)
      end
    end
  end
end
-- rule: the current rule's store-side bounds.
local k, ks, oldest, ttl, expire_before, bound
-- after settles key x (KEYS index) once its writes are done: ok false if
-- they failed, grew if one started a bucket, drop to clean it anyway.
local function after(x, key, ok, grew, drop)
  if not ok then
    out[#out + 1] = x - 1
    failed[#failed + 1] = x - 1
    return
  end
  if grew then
    redis.call('PEXPIRE', key, ttl)
  end
  if drop or redis.call('HLEN', key) > bound then
    clean(key, oldest, expire_before)
  end
end
local nr = tonumber(ARGV[4])
local i = 6 + 7 * nr
local x = 2
for r = 1, nr do
  local h = 6 + 7 * (r - 1)
  local span = tonumber(ARGV[h + 1])
  ttl = ARGV[h + 2]
  bound = tonumber(ARGV[h + 3])
  local base = tonumber(ARGV[h + 4])
  k = bucket_of(now, ARGV[h])
  ks = string.format('%.0f', k)
  oldest = k - span + 1
  expire_before = now - tonumber(ttl) * 1000
  -- The field of a count in the base bucket, and whether it is counted.
  local bf, bin = ARGV[h + 4], base >= oldest
  if base > k then bf = ks end
  -- The keys with one count in the base bucket: a count alone is one key's,
  -- a negative number -n starts a group of n keys with the count after it.
  local e, np = x, x + tonumber(ARGV[h + 5])
  while e < np do
    local ds = ARGV[i]
    local d = tonumber(ds)
    i = i + 1
    if d > 0 then
      if bin then
        local n = pcall('HINCRBY', KEYS[e], bf, ds)
        if n == d then
          after(e, KEYS[e], true, true, false)
        elseif type(n) == 'table' then
          after(e, KEYS[e], false)
        end
      end
      e = e + 1
    else
      local last = e - d - 1
      ds = ARGV[i]
      d = tonumber(ds)
      i = i + 1
      if bin then
        for y = e, last do
          local n = pcall('HINCRBY', KEYS[y], bf, ds)
          if n == d then
            after(y, KEYS[y], true, true, false)
          elseif type(n) == 'table' then
            after(y, KEYS[y], false)
          end
        end
      end
      e = last + 1
    end
  end
  x = np
  -- Keys with their own tokens.
  local ns = tonumber(ARGV[h + 6])
  for e = x, x + ns - 1 do
    local key = KEYS[e]
    local ok, wrote, grew, drop = true, false, false, false
    for tok in string.gmatch(ARGV[i], '%S+') do
      if tok == '!' then
        drop = true
      else
        local js, ds = string.match(tok, '^(%d+):(-?%d+)$')
        local j = tonumber(js)
        if j > k then j, js = k, ks end
        if ok and j >= oldest then
          local n = pcall('HINCRBY', key, js, ds)
          if type(n) == 'table' then
            if not wrote then ok = false end
          else
            wrote = true
            if n == tonumber(ds) then grew = true end
          end
        end
      end
    end
    i = i + 1
    if grew or drop or not ok then
      after(e, key, ok, grew, drop)
    end
  end
  x = x + ns
end
if #failed > 0 then
  redis.call('SET', KEYS[1], ARGV[1] .. ':' .. table.concat(failed, ','), 'PX', ARGV[2])
end
return out
`)
