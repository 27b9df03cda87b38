--- @include "counts"
--- @include "index"
--- @include "successor"
-- ack: claimed messages were published; forget them and remember their ids in the done
-- window.
--
-- KEYS[1] msg        HASH
-- KEYS[2] inflight   ZSET
-- KEYS[3] done       ZSET, layout 2's done window: trimmed, and an acked id's entry
--                    dropped, while it exists
-- KEYS[4] cancelled  HASH, layout 2's cancel routes (dropped with their done entries)
-- KEYS[5] counts     HASH per-route counts (counts.lua, put in front by lua.go)
-- KEYS[6] ix         HASH the id index's state (index.lua)
-- KEYS[7] dn         ZSET the done slices (index.lua)
-- KEYS[8] nx         HASH successors (successor.lua): an acked id's successor becomes
--                    pending instead of the id being remembered as delivered
-- KEYS[9] due        ZSET (successors are promoted into it)
-- ARGV[1] now (integer unix ms)
-- ARGV[2] remember: 1 to record acked ids in the done window, 0 when it is off
-- ARGV[3] trimBefore: done slices that ended at or before this are forgotten
--         (now - window)
-- ARGV[4] trimLimit: read at most this many remembered ids of old slices per call, so
--         one call stays short however large the window has grown
-- ARGV[5] 1 when each id is followed by its message's route (the caller has the
--         envelopes: no envelope is read here), 0 when only ids follow (their routes
--         are read from the envelopes, one HMGET)
-- ARGV[6] the done slice width (ms)
-- ARGV[7..] id, fp pairs (or id, route, fp triples); the caller bounds the batch (a few
--         hundred: they are unpacked at once)
-- Returns { acked, trimmed }.
--
-- Only an id still in inflight is acked: if it was recovered, cancelled or acked already,
-- it no longer belongs to this claim and must be left alone. An acked id's state becomes
-- delivered, replacing any tombstone another route's cancel left.
cstart(KEYS[5])
ixstart(KEYS[6], KEYS[7])
local acked, fps, vals, scores, routes = {}, {}, {}, {}, {}
local withRoutes = ARGV[5] == '1'
local step = withRoutes and 3 or 2
local now = ARGV[1]
for i = 7, #ARGV, step do
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
    fps[#acked] = ARGV[i + step - 1]
    vals[#acked] = doneAt(now)
  end
end
local legacy = redis.call('EXISTS', KEYS[3]) == 1
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
  redis.call('HDEL', KEYS[1], unpack(acked))
  fps, vals = nxacked(KEYS[8], KEYS[9], KEYS[1], acked, fps, vals)
  cflush()
  if legacy then
    redis.call('ZREM', KEYS[3], unpack(acked))
    redis.call('HDEL', KEYS[4], unpack(acked))
  end
  if ARGV[2] == '1' and #fps > 0 then
    ixset(fps, vals)
    dnrecord(fps, now, ARGV[6])
  end
end
local trimmed = dntrim(ARGV[3], ARGV[4])
if legacy then
  local old = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[3], 'LIMIT', 0, ARGV[4])
  if #old > 0 then
    redis.call('ZREM', KEYS[3], unpack(old))
    redis.call('HDEL', KEYS[4], unpack(old))
    trimmed = trimmed + #old
  end
end
ixflush()
return { #acked, trimmed }
