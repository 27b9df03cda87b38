-- ack: a claimed message was published; forget it and remember its id in done.
--
-- KEYS[1] msg        HASH
-- KEYS[2] inflight   ZSET
-- KEYS[3] done       ZSET id -> time delivered or cancelled (dedup window)
-- KEYS[4] cancelled  HASH id -> routes whose cancel it was: an acked id is delivered,
--                    so any (other route's) tombstone field goes
-- KEYS[5] counts     HASH per-route counts (counts.lua, put in front by lua.go)
-- ARGV[1] now (integer unix ms)
-- ARGV[2] remember: 1 to record acked ids in done, 0 when the dedup window is off
-- ARGV[3] trimBefore: done entries with a score below this are forgotten (now - window)
-- ARGV[4] trimLimit: forget at most this many per call, so one call stays short however
--         large done has grown
-- ARGV[5] 1 when each id is followed by its message's route (the caller has the
--         envelopes: no envelope is read here), 0 when only ids follow (their routes
--         are read from the envelopes, one HMGET)
-- ARGV[6..] ids (or id, route pairs); the caller bounds the batch (a few hundred: they
--         are unpacked at once)
-- Returns { acked, trimmed }.
--
-- Only an id still in inflight is acked: if it was recovered, cancelled or acked already,
-- it no longer belongs to this claim and must be left alone.
cstart(KEYS[5])
local acked, zadd, scores, routes = {}, {}, {}, {}
local withRoutes = ARGV[5] == '1'
local step = withRoutes and 2 or 1
for i = 6, #ARGV, step do
  local id = ARGV[i]
  local score
  if not C.exact then
    score = redis.call('ZSCORE', KEYS[2], id) -- the backfill's cursor needs it
  end
  if redis.call('ZREM', KEYS[2], id) == 1 then
    acked[#acked + 1] = id
    scores[#acked] = score
    if withRoutes then
      routes[#acked] = ARGV[i + 1]
    end
    zadd[#zadd + 1] = ARGV[1]
    zadd[#zadd + 1] = id
  end
end
if #acked > 0 then
  if not withRoutes then
    local envs = redis.call('HMGET', KEYS[1], unpack(acked))
    for j = 1, #acked do
      routes[j] = routeOf(envs[j])
    end
  end
  for j = 1, #acked do
    cadd('inflight', routes[j], -1, scores[j], acked[j])
  end
  cflush()
  redis.call('HDEL', KEYS[1], unpack(acked))
  redis.call('HDEL', KEYS[4], unpack(acked))
  if ARGV[2] == '1' then
    redis.call('ZADD', KEYS[3], unpack(zadd))
  end
end
local old = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[3], 'LIMIT', 0, ARGV[4])
if #old > 0 then
  redis.call('ZREM', KEYS[3], unpack(old))
  redis.call('HDEL', KEYS[4], unpack(old))
end
return { #acked, #old }
