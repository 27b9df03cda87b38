--- @include "order"
--- @include "recover"
-- ordered_recover: recover (recover.lua) with strict per-key order (order.lua).
--
-- KEYS[1..5]  recover's keys
-- KEYS[6] ko  (order.lua)
-- KEYS[7] ki  (order.lua)
-- ARGV: recover's.
-- Returns { moved, more, woke }: recovered heads stay heads (marked claimed); then a
-- bounded sweep of the heads.
local o = ostart(KEYS[6], KEYS[7], KEYS[1], KEYS[3])
local page = {}
if o.on then
  page = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[3] or ARGV[1], 'LIMIT', '0', ARGV[2])
end
local r = recover(KEYS, ARGV)
for _, id in ipairs(page) do
  if redis.call('ZSCORE', KEYS[1], id) then
    oclaimed(o, id)
  end
end
osweep(o, 32)
r[3] = o.woke
return r
