--- @include "zset"
--- @include "counts"
--- @include "index"
--- @include "successor"
--- @include "kbruns"
-- ack: claimed messages were published; forget them and remember their ids in the done
-- window.
--
-- KEYS[1] msg        HASH
-- KEYS[2] inflight   ZSET
-- KEYS[3] counts     HASH per-route counts (includes/counts.lua)
-- KEYS[4] ix         HASH the id index's state (index.lua)
-- KEYS[5] dn         ZSET the done slices (index.lua)
-- KEYS[6] nx         HASH successors (successor.lua): an acked id's successor becomes
--                    pending instead of the id being remembered as delivered
-- KEYS[7] due        ZSET (successors are promoted into it)
-- KEYS[8] ko         HASH (the wrapper's: ordered_ack.lua)
-- KEYS[9] ki         HASH (the wrapper's: ordered_ack.lua)
-- KEYS[10] dead      ZSET (read only when some id of the batch was not in flight)
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
-- ARGV[7] R: how many of the next arguments are the done runs of the batch's Kafka
--         default ids (kbruns.lua), built by the caller: when every id of the call was
--         in flight and none has a successor (the steady case), these are written and
--         the Kafka fps below are not read
-- ARGV[8+R..] id, fp pairs (or id, route, fp triples); the caller bounds the batch (a
--         few hundred: they are unpacked at once). A Kafka default id the runs cover
--         comes with an empty fp, built here (kbackfp) only when the runs are not
--         written
-- Returns { acked, trimmed }.
--
-- Only an id still in inflight is acked: if it was recovered, cancelled or acked already,
-- it no longer belongs to this claim and must be left alone. An acked id's state becomes
-- delivered, replacing any tombstone another route's cancel left.
local cs = cstart(KEYS[3])
local ix = ixstart(KEYS[4], KEYS[5])
local withRoutes = ARGV[5] == '1'
local step = withRoutes and 3 or 2
local now = ARGV[1]
local dat = doneAt(now) -- every id of the call is delivered at the same second
-- The batch's distinct ids (an id twice is acked once), looked up in inflight with one
-- command and removed with one.
local runs = tonumber(ARGV[7])
local ids, at, seen, m = {}, {}, {}, 0
for i = 8 + runs, #ARGV, step do
  local id = ARGV[i]
  if not seen[id] then
    seen[id] = true
    m = m + 1
    ids[m] = id
    at[m] = i
  end
end
-- One ZREM takes the batch out of inflight. Its count equal to the batch's says every
-- id was in flight (the common case: no score is read, none formatted as text). Else
-- the ids it removed are those left with an envelope in neither due nor dead: msg
-- holds an envelope exactly for the ids in due, inflight or dead.
local held = {}
if m > 0 and redis.call('ZREM', KEYS[2], unpack(ids)) < m then
  local envs = redis.call('HMGET', KEYS[1], unpack(ids))
  local due, dead = zpresent(KEYS[7], ids), zpresent(KEYS[10], ids)
  for j = 1, m do
    held[j] = envs[j] and not due[j] and not dead[j]
  end
else
  for j = 1, m do
    held[j] = true
  end
end
local acked, fps, left, k = {}, {}, {}, 0 -- left: per route, one cadd per route
for j = 1, m do
  if held[j] then
    local i = at[j]
    k = k + 1
    acked[k] = ids[j]
    fps[k] = ARGV[i + step - 1]
    if withRoutes then
      local route = ARGV[i + 1]
      left[route] = (left[route] or 0) + 1
    end
  end
end
if k > 0 then
  if not withRoutes then
    local envs = redis.call('HMGET', KEYS[1], unpack(acked))
    for j = 1, k do
      local route = routeOf(envs[j])
      left[route] = (left[route] or 0) + 1
    end
  end
  for route, c in pairs(left) do
    cadd(cs, 'inflight', route, -c)
  end
  redis.call('HDEL', KEYS[1], unpack(acked))
  if runs > 0 and (k < m or nxany(KEYS[6])) then
    -- The runs will not be written (below): the Kafka ids' fps they stood for are built.
    for j = 1, k do
      if fps[j] == '' then
        fps[j] = kbackfp(acked[j])
      end
    end
  end
  fps = nxacked(cs, KEYS[6], KEYS[7], KEYS[1], acked, fps)
  cflush(cs)
  if ARGV[2] == '1' and #fps > 0 then
    -- Kafka-form ids go to their blocks' slots, through the caller's runs when every id
    -- of the call is delivered (m fps left: all were in flight, none had a successor);
    -- the others (all delivered at dat) to the index and the done slice.
    if runs > 0 and #fps == m then
      kbruns(ix, ARGV, 8, 7 + runs, now)
      fps = kbrest(fps)
    else
      fps = kbdone(ix, fps, dat, now)
    end
    if #fps > 0 then
      local vals = {}
      for j = 1, #fps do
        vals[j] = dat
      end
      ixset(ix, fps, vals)
      dnrecord(ix, fps, now, ARGV[6])
    end
  end
end
local trimmed = dntrim(ix, ARGV[3], ARGV[4])
kbtrim(ix, ARGV[3])
ixflush(ix)
return { k, trimmed }
