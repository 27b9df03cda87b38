--- @include "order"
--- @include "park"
-- ordered_park: park (park.lua) with strict per-key order (order.lua).
--
-- KEYS[1..7]  park's keys
-- KEYS[8] ko  (order.lua)
-- KEYS[9] ki  (order.lua)
-- KEYS[10..] ko:<queue>|ko  one key per quintuple of ARGV: its key's queue
--            (ko:<route>\0<key>), or ko itself for a message without a key
-- (the slot guard last: store/redisstore/slotguard.go)
-- ARGV: park's, with ARGV[6] 0 (a batch with ordered messages claims nothing).
-- Returns park's reply.
local o = ostart(KEYS[8], KEYS[9], KEYS[1], KEYS[2])
ARGV[2] = '-1' -- keyed messages never go to the cold tier (their key's queue holds them)
local out = park(KEYS, ARGV)
local refused = {}
for r = 1, #out, 2 do
  refused[out[r]] = true
end
local first = 7 + 3 * tonumber(ARGV[3])
for j = 1, (#ARGV - first + 1) / 5 do
  local kz = KEYS[9 + j]
  if kz ~= KEYS[8] and not refused[j] then
    local i = (j - 1) * 5 + first
    oadd(o, ARGV[i], tonumber(ARGV[i + 1]), kz)
  end
end
return out
