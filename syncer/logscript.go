package syncer

import "github.com/redis/go-redis/v9"

// logScript decides one check of a Strict SlidingLog rule on the store's
// clock, with the test of reference.Log: cost n is admitted at t if the units
// admitted in (t − W, t] plus n are at most the limit.
//
// The key is a list of timestamps in µs, one per admitted unit, oldest
// first, kept for a window after the newest. A check drops the units that
// left the window (found by binary search, cut with one LTRIM), then
// appends n copies of its time if they fit. A store clock that reads
// earlier than the newest unit (a clock step) decides at the newest unit's
// time, so that the list stays in order. The list holds at most the limit's
// units (policy.MaxLogLimit).
//
// KEYS[1] the key. ARGV: W µs, limit, n, "1" to peek (decide one unit,
// record nothing).
//
// Returns: 1 if admitted (0 if not), the time decided at in µs, the units
// in the window after the decision, the newest unit's time (-1 if none),
// and for a denial of n ≤ limit the time of the unit whose leaving makes
// room for n (-1 otherwise).
var logScript = redis.NewScript(`
local key = KEYS[1]
local w = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local n = tonumber(ARGV[3])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local size = redis.call('LLEN', key)
local function at(i)
  return tonumber(redis.call('LINDEX', key, i)) or 0
end
if size > 0 then
  local last = at(size - 1)
  if last > now then now = last end
end
local cut = now - w
local lo, hi = 0, size
while lo < hi do
  local mid = math.floor((lo + hi) / 2)
  if at(mid) <= cut then lo = mid + 1 else hi = mid end
end
if lo > 0 then
  redis.call('LTRIM', key, lo, -1)
  size = size - lo
end
local newest = -1
if size > 0 then newest = at(size - 1) end
if n < 1 or size + n > limit then
  local retry = -1
  if n >= 1 and n <= limit then retry = at(size + n - limit - 1) end
  return {0, now, size, newest, retry}
end
if ARGV[4] == '1' then
  return {1, now, size, newest, -1}
end
local add = {}
for i = 1, n do add[i] = now end
redis.call('RPUSH', key, unpack(add))
redis.call('PEXPIRE', key, math.floor(w / 1000) + 1)
return {1, now, size + n, now, -1}
`)
