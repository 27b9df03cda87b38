--- @include "order"
--- @include "park"
-- ordered_park: park (park.lua) with strict per-key order (order.lua).
--
-- KEYS[1..9]  park's keys
-- KEYS[10] ko, KEYS[11] ki (order.lua)
-- KEYS[12..] one key per quintuple of ARGV: its key's queue, or ko itself for a
--            message without a key
-- (the slot guard last: scheduler/store/slotguard.go)
-- ARGV: park's.
-- Returns park's reply.
local o = ostart(KEYS[10], KEYS[11], KEYS[1], KEYS[2])
ARGV[2] = '-1' -- keyed messages never go to the cold tier (their key's queue holds them)
local out = park(KEYS, ARGV)
for j = 1, #out do
  local kz = KEYS[11 + j]
  if kz ~= KEYS[10] and out[j] == 'parked' then
    local i = (j - 1) * 5 + 3
    oadd(o, ARGV[i], tonumber(ARGV[i + 1]), kz)
  end
end
return out
