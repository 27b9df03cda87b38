--- @include "routes"
--- @include "counts"
--- @include "index"
--- @include "cold"
-- bury: store a batch of invalid messages straight into the dead letters of one shard,
-- idempotently by id (same rules as park), so bad input never blocks a partition or a
-- queue and is never silently dropped.
--
-- KEYS[1..7] park's keys: due, msg (id -> envelope; its Reason says why it is dead),
--            inflight, dead (ZSET id -> time dead-lettered), counts, ix, dn
-- ARGV[1] now (integer unix ms): the dead-letter time
-- ARGV[2..] quadruples: id, envelope bytes, route, fp; the caller bounds the batch.
-- Returns an array with one string per quadruple: "buried", or why it was refused (the
-- state the id is already in, as in park), so a replayed batch is neither counted nor
-- copied to the dead-letter target again.
-- hasRoute comes from routes.lua, cstart/cadd/cflush from counts.lua, ixstart/ixget/
-- doneOf from index.lua, cofind from cold.lua, which this script
-- includes.
local cs = cstart(KEYS[5])
local ix = ixstart(KEYS[6], KEYS[7])
local co = costart(KEYS[1])
local fps = {}
for i = 5, #ARGV, 4 do
  fps[#fps + 1] = ARGV[i]
end
local states = ixget(ix, fps)
local out = {}
local n = 0
local now = ARGV[1]
for i = 2, #ARGV, 4 do
  local id, route = ARGV[i], ARGV[i + 2]
  local st
  n = n + 1
  local t, routes = doneOf(states[n])
  if t then
    if not routes then
      st = 'delivered'
    elseif hasRoute(routes, route) then
      st = 'cancelled'
    end
  end
  if not st and cofind(co, states[n], id) then
    st = 'pending' -- in the cold tier
  end
  if not st then
    if redis.call('ZSCORE', KEYS[1], id) then
      st = 'pending'
    elseif redis.call('ZSCORE', KEYS[3], id) then
      st = 'inflight'
    elseif redis.call('ZSCORE', KEYS[4], id) then
      st = 'dead'
    else
      redis.call('HSET', KEYS[2], id, ARGV[i + 1])
      redis.call('ZADD', KEYS[4], now, id)
      cadd(cs, 'dead', route, 1)
      st = 'buried'
    end
  end
  out[n] = st
end
cflush(cs)
return out
