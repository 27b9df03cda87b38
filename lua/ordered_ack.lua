--- @include "order"
--- @include "ack"
-- ordered_ack: ack (ack.lua) with strict per-key order (order.lua).
--
-- KEYS[1..10] ack's keys (the 7th is due, the 8th ko and the 9th ki: order.lua)
-- ARGV: ack's.
-- Returns { acked, trimmed, woke }: woke is the earliest due time of a head promoted
-- now, -1 if none.
local o = ostart(KEYS[8], KEYS[9], KEYS[7], KEYS[1])
local ids = {}
if o.on then -- a shard without keyed messages needs no list of the ids
  local r = tonumber(ARGV[7])
  local a = 10 + r + 2 * tonumber(ARGV[8 + r])
  for i = a, a + tonumber(ARGV[a - 1]) - 1 do
    ids[#ids + 1] = ARGV[i]
  end
end
local pre = opre(o, ids)
local r = ack(KEYS, ARGV)
ogoneIfLeft(o, pre)
r[3] = o.woke
return r
