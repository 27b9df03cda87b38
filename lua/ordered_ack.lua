--- @include "order"
--- @include "ack"
-- ordered_ack: ack (ack.lua) with strict per-key order (order.lua).
--
-- KEYS[1..9]  ack's keys (the 9th is due)
-- KEYS[10] ko, KEYS[11] ki (order.lua)
-- ARGV: ack's.
-- Returns { acked, trimmed, woke }: woke is the earliest due time of a head promoted
-- now, -1 if none.
local o = ostart(KEYS[10], KEYS[11], KEYS[9], KEYS[1])
local ids = {}
local step = ARGV[5] == '1' and 3 or 2
for i = 7, #ARGV, step do
  ids[#ids + 1] = ARGV[i]
end
local pre = opre(o, ids)
local r = ack(KEYS, ARGV)
ogoneIfLeft(o, pre)
r[3] = o.woke
return r
