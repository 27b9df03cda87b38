--- @include "counts"
--- @include "successor"
--- @include "bucket"
-- recover: move inflight messages back to due so they fire again (at-least-once): those
-- whose lease deadline has passed (a claim that was never acked or retried), or, when a
-- new owner takes a shard over, everything its previous owner left in flight.
--
-- KEYS[1] due       ZSET
-- KEYS[2] inflight  ZSET id -> lease deadline
-- KEYS[3] msg       HASH (read for the routes)
-- KEYS[4] counts    HASH per-route counts (includes/counts.lua)
-- KEYS[5] nx        HASH successors (successor.lua): an id with one is not fired again;
--                   its successor becomes pending instead
-- (then the wrapper's keys and the shard's slotguard: claimed due buckets past the
--  cutoff, whose keys bucket.lua names, join inflight first)
-- ARGV[1] now (integer unix ms): the new due time
-- ARGV[2] limit: move at most this many per call
-- ARGV[3] optional cutoff: move entries with deadline <= cutoff; default now; "+inf"
--         moves every entry
-- Returns { moved, more } with more = 1 when entries up to the cutoff remain.
--
-- They are due at now, not at their original due time (inflight keeps only the
-- deadline), which puts them at the head of the shard.
local cs = cstart(KEYS[4])
local cutoff = ARGV[3] or ARGV[1]
-- Claimed buckets past their deadline join inflight first (bucket.lua), under it.
hbunclaim(hbase(KEYS[1]), '-inf', cutoff, 16)
local page = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', cutoff, 'WITHSCORES', 'LIMIT', '0', ARGV[2])
local ids = {}
for i = 1, #page, 2 do
  ids[#ids + 1] = page[i]
end
if #ids > 0 then
  local envs = redis.call('HMGET', KEYS[3], unpack(ids))
  local succ = nxany(KEYS[5])
  for i = 1, #ids do
    redis.call('ZREM', KEYS[2], ids[i])
    local route = routeOf(envs[i])
    cadd(cs, 'inflight', route, -1)
    if not (succ and nxpromote(cs, KEYS[5], KEYS[1], KEYS[3], ids[i])) then
      redis.call('ZADD', KEYS[1], ARGV[1], ids[i])
      cadd(cs, 'pending', route, 1)
    end
  end
  cflush(cs)
end
local more = 0
if redis.call('ZCOUNT', KEYS[2], '-inf', cutoff) > 0 or redis.call('ZCOUNT', hbase(KEYS[1]) .. 'hf', '-inf', cutoff) > 0 then
  more = 1
end
return { #ids, more }
