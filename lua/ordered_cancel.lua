--- @include "order"
--- @include "cancel"
-- ordered_cancel: cancel (cancel.lua) with strict per-key order (order.lua).
--
-- KEYS[1..10] cancel's keys
-- KEYS[11] ko, KEYS[12] ki (order.lua)
-- ARGV: cancel's.
-- Returns cancel's reply; a cancelled head is replaced by the next of its key.
local o = ostart(KEYS[11], KEYS[12], KEYS[1], KEYS[2])
local pre = opre(o, { ARGV[1] })
local r = cancel(KEYS, ARGV)
ogoneIfLeft(o, pre)
return r
