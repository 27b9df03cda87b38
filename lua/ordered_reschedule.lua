--- @include "order"
--- @include "reschedule"
-- ordered_reschedule: reschedule (reschedule.lua) with strict per-key order
-- (order.lua).
--
-- KEYS[1..6]  reschedule's keys
-- KEYS[7] ko  (order.lua)
-- KEYS[8] ki  (order.lua)
-- KEYS[9] ko:<queue>|ko  the key queue of the message's key (ko when none)
-- ARGV: reschedule's.
-- A message of an ordered key is not rescheduled: "ordered". A requeued dead letter of
-- an ordered key joins its key's queue.
local o = ostart(KEYS[7], KEYS[8], KEYS[1], KEYS[2])
if redis.call('HEXISTS', KEYS[8], ARGV[1]) == 1 then
  return 'ordered'
end
local r = reschedule(KEYS, ARGV)
if r == 'dead' and KEYS[9] ~= KEYS[7] then
  oadd(o, ARGV[1], tonumber(ARGV[2]), KEYS[9])
end
return r
