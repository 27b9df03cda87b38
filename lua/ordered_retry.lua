--- @include "order"
--- @include "retry"
-- ordered_retry: retry (retry.lua) with strict per-key order (order.lua).
--
-- KEYS[1..6]  retry's keys
-- KEYS[7] ko  (order.lua)
-- KEYS[8] ki  (order.lua)
-- ARGV: retry's.
-- Returns { requeued, dead, woke }: a dead-lettered head unblocks its key; a retried
-- one stays its head.
local o = ostart(KEYS[7], KEYS[8], KEYS[1], KEYS[2])
local ids = {}
for i = 2, #ARGV, 4 do
  ids[#ids + 1] = ARGV[i]
end
local pre = opre(o, ids)
local r = retry(KEYS, ARGV)
for _, p in ipairs(pre) do
  if redis.call('ZSCORE', KEYS[4], p[1]) then
    ogone(o, p[1], p[2], p[3])
  elseif redis.call('ZSCORE', KEYS[1], p[1]) then
    oclaimed(o, p[1])
  end
end
r[3] = o.woke
return r
