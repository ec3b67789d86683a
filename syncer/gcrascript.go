package syncer

import "github.com/redis/go-redis/v9"

// gcraScript decides one check of a Strict TokenBucket or GCRA rule on the
// store's clock, with the admission test of window.GCRA: cost n is admitted
// at t if and only if debt + n·T ≤ τ, where debt = max(TAT − t, 0), and
// then TAT becomes t + debt + n·T.
//
// The key is a string holding the TAT in ns since the Unix epoch, written
// as decimal seconds followed by exactly nine digits of nanoseconds, and
// kept until it has passed (a key whose TAT has passed is a full bucket, as
// a missing one). The arithmetic stays exact in Lua's doubles: the time is
// kept as (seconds, nanoseconds) and only the debt, at most τ + n·T ≤ 2^53
// ns (policy.MaxStrictTolerance), is ever one number. A value that does not parse
// is taken for a full bucket and overwritten by the next admission.
//
// An admitted check may also take a lease for an Eventual rule
// (window.SplitBucket): up to want more units, as many as the bucket holds
// after the check, taken from it in the same step (TAT moves by (n + g)·T).
//
// A caller may also give a floor: the key's TAT as the store last told it
// (seconds and nanoseconds). The store's TAT only grows, so a stored one
// below it, or none, means the store lost the key (a FLUSHALL, a Redis
// restarted empty): the check then decides on the floor, and records the
// TAT from it, so that the bucket a loss refilled is not spent twice.
//
// And a charge: units the caller's failure mode admitted while the store
// did not answer (an Eventual rule under FailLocal), taken from the bucket
// before the check is decided, and recorded whatever the decision (the
// debt may pass τ: the bucket is overdrawn until it refills), so that what
// the store refilled meanwhile is not spent twice either.
//
// KEYS[1] the key. ARGV: T ns, τ ns, n, "1" to peek (decide one unit,
// record nothing but the charge), want (the lease asked for; 0 for none),
// and optionally the floor's seconds and nanoseconds (0 0 for none) and
// the charge.
//
// Returns: 1 if admitted (0 if not), the store's TIME seconds and
// microseconds, the debt after the decision in ns (TAT − now, ≥ 0), and the
// units leased g.
var gcraScript = redis.NewScript(`
local t = redis.call('TIME')
local sec = tonumber(t[1])
local ns = tonumber(t[2]) * 1000
local iv = tonumber(ARGV[1])
local tau = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local debt = 0
local v = redis.call('GET', KEYS[1])
if v then
  local vs, vn = string.match(v, '^(%d+)(%d%d%d%d%d%d%d%d%d)$')
  if vs then
    debt = (tonumber(vs) - sec) * 1000000000 + (tonumber(vn) - ns)
    if debt < 0 then debt = 0 end
  end
end
if ARGV[7] then
  local floor = (tonumber(ARGV[6]) - sec) * 1000000000 + (tonumber(ARGV[7]) - ns)
  if floor > debt then debt = floor end
end
local function save()
  local x = ns + debt
  local carry = math.floor(x / 1000000000)
  redis.call('SET', KEYS[1], string.format('%.0f%09.0f', sec + carry, x - carry * 1000000000),
    'PX', string.format('%.0f', math.floor(debt / 1000000) + 1))
end
local charge = tonumber(ARGV[8]) or 0
if charge ~= 0 then
  debt = debt + charge * iv
  if debt < 0 then debt = 0 end
end
if debt + n * iv > tau or ARGV[4] == '1' then
  if charge ~= 0 then save() end
  return {debt + n * iv <= tau and 1 or 0, t[1], t[2], debt, 0}
end
debt = debt + n * iv
local g = math.floor((tau - debt) / iv)
local want = tonumber(ARGV[5]) or 0
if g > want then g = want end
if g < 0 then g = 0 end
debt = debt + g * iv
save()
return {1, t[1], t[2], debt, g}
`)
