--- @include "order"
--- @include "cancel"
-- ordered_cancel: cancel (cancel.lua) with strict per-key order (order.lua).
--
-- KEYS[1..8]  cancel's keys
-- KEYS[9] ko  (order.lua)
-- KEYS[10] ki  (order.lua)
-- ARGV: cancel's.
-- Returns cancel's reply; a cancelled head is replaced by the next of its key.
local o = ostart(KEYS[9], KEYS[10], KEYS[1], KEYS[2])
local pre = opre(o, { ARGV[1] })
local r = cancel(KEYS, ARGV)
ogoneIfLeft(o, pre)
return r
