--- @include "order"
--- @include "replace"
-- ordered_replace: replace (replace.lua) with strict per-key order (order.lua).
--
-- KEYS[1..8]  replace's keys
-- KEYS[9] ko  (order.lua)
-- KEYS[10] ki  (order.lua)
-- KEYS[11..] ko:<queue>|ko  one key per quintuple of ARGV: its key's queue
--            (ko:<route>\0<key>), or ko itself for a message without a key
-- ARGV: replace's.
-- Returns replace's reply. A stored id whose key (or keylessness) differs from the one
-- given is refused before replace runs ("refused:<prior>"): never a second copy. A
-- replaced pending message leaves its key and joins it anew at its new due time (the
-- key's order is recomputed: it may become or stop being the unclaimed head); a newly
-- parked one (new, delivered, dead) joins its key; an in-flight one keeps its place
-- (its successor takes it when acked: the key stays blocked until it is delivered).
local o = ostart(KEYS[9], KEYS[10], KEYS[1], KEYS[2])
-- New versions go to due, never to the cold tier (a keyed one joins its key's queue).
local out, keep, argv = {}, {}, { ARGV[1], '-1' }
local j = 0
for i = 3, #ARGV, 5 do
  local id = ARGV[i]
  j = j + 1
  local kz, m = oinfo(o, id)
  local prior = nil
  if redis.call('HEXISTS', KEYS[2], id) == 1 and (kz or KEYS[9]) ~= KEYS[10 + j] then
    if redis.call('ZSCORE', KEYS[1], id) then
      prior = 'pending'
    elseif redis.call('ZSCORE', KEYS[3], id) then
      prior = 'inflight'
    end
  end
  if prior then
    out[j] = 'refused:' .. prior
  else
    keep[#keep + 1] = j
    for k = 0, 4 do
      argv[#argv + 1] = ARGV[i + k]
    end
  end
end
local r = replace(KEYS, argv)
for n, jj in ipairs(keep) do
  local i = (n - 1) * 5 + 3
  local id, d, kz = argv[i], tonumber(argv[i + 1]), KEYS[10 + jj]
  local res = r[n]
  out[jj] = res
  if res ~= 'replaced:inflight' and string.sub(res, 1, 8) ~= 'refused:' then
    -- read now, not before replace: the same id may come again in the batch
    local okz, om = oinfo(o, id)
    if okz then
      ogone(o, id, okz, om)
    end
    if kz ~= KEYS[9] then
      oadd(o, id, d, kz)
    end
  end
end
return out
