--- @include "counts"
--- @include "successor"
--- @include "bucket"
-- retry: a claimed message failed to publish; put it back in due for a later attempt,
-- or into the dead letters once attempts are exhausted. The caller computes the attempt
-- count, backoff and reason and passes the re-encoded envelope.
--
-- KEYS[1] due       ZSET
-- KEYS[2] msg       HASH
-- KEYS[3] inflight  ZSET
-- KEYS[4] dead      ZSET id -> time dead-lettered
-- KEYS[5] counts    HASH per-route counts (includes/counts.lua)
-- KEYS[6] nx        HASH successors (successor.lua): an id with one is not retried or
--                   dead-lettered; its successor becomes pending instead
-- (then the wrapper's keys and the shard's slotguard: an id in a claimed due bucket,
--  whose keys bucket.lua names, is in flight too)
-- ARGV[1] now (integer unix ms): the dead-letter time
-- ARGV[2..] quadruples: id, new due (unix ms), new envelope bytes, dead flag (1 or 0)
-- Returns { requeued, dead }.
--
-- Only an id still in inflight is touched, for the same reason as in ack.
-- The route is read from the new envelope (the same route as the stored one).
local cs = cstart(KEYS[5])
local requeued, dead = 0, 0
local succ = nxany(KEYS[6])
for i = 2, #ARGV, 4 do
  local id = ARGV[i]
  if redis.call('ZREM', KEYS[3], id) == 1 or hbtake(hbase(KEYS[1]), id, KEYS[2]) then
    local route = routeOf(ARGV[i + 2])
    cadd(cs, 'inflight', route, -1)
    if succ and nxpromote(cs, KEYS[6], KEYS[1], KEYS[2], id) then
      requeued = requeued + 1
    elseif ARGV[i + 3] == '1' then
      redis.call('HSET', KEYS[2], id, ARGV[i + 2])
      redis.call('ZADD', KEYS[4], ARGV[1], id)
      cadd(cs, 'dead', route, 1)
      dead = dead + 1
    else
      redis.call('HSET', KEYS[2], id, ARGV[i + 2])
      redis.call('ZADD', KEYS[1], ARGV[i + 1], id)
      cadd(cs, 'pending', route, 1)
      requeued = requeued + 1
    end
  end
end
cflush(cs)
return { requeued, dead }
