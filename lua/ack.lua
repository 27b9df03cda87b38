--- @include "zset"
--- @include "counts"
--- @include "index"
--- @include "successor"
--- @include "kbruns"
--- @include "bucket"
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
-- ARGV[5] 1 when the routes of the batch's messages follow the ids, counted (the caller
--         has the envelopes: no envelope is read on the common path), 0 when they are
--         read from the envelopes (one HMGET)
-- ARGV[6] the done slice width (ms)
-- ARGV[7] R: how many of the next arguments are the done runs of the batch's Kafka
--         default ids (kbruns.lua), built by the caller: when every id of the call was
--         in flight and none has a successor (the steady case), these are written and
--         no fp of the ids they cover is read
-- ARGV[8+R] G, then G pairs of a due bucket (bucket.lua) and how many of the ids,
--         consecutive from the first, are its: the claimed bucket each id may be in, by
--         its DueAt (G = 0: found from the envelopes, where an id was not in inflight)
-- ARGV[9+R+2G] m, then ARGV[10+R+2G..9+R+2G+m] the ids. With ARGV[5] = 1 the routes follow: their
--         number, then pairs of a route and how many of the ids are its. Then pairs of
--         a position among the ids (1-based) and that id's fp, for every id whose fp
--         the runs do not stand for (none when ARGV[2] is 0); the fp of a Kafka
--         default id the runs cover is built here (kbackfp) when the runs are not
--         written. The caller bounds the batch (a few hundred: they are unpacked at
--         once).
-- Returns { acked, trimmed }.
--
-- Only an id still in inflight is acked: if it was recovered, cancelled or acked already,
-- it no longer belongs to this claim and must be left alone. An acked id's state becomes
-- delivered, replacing any tombstone another route's cancel left.
local cs = cstart(KEYS[3])
local ix = ixstart(KEYS[4], KEYS[5])
local now = ARGV[1]
local dat = doneAt(now) -- every id of the call is delivered at the same second
local runs = tonumber(ARGV[7])
local G = tonumber(ARGV[8 + runs])
local a = 10 + runs + 2 * G -- the ids
local m = tonumber(ARGV[a - 1])
local b = a + m -- after them: the routes (ARGV[5] = 1), then the fps
local given, sent = {}, {} -- position -> fp sent; the fps sent, in order
do
  local f = b
  if ARGV[5] == '1' then
    f = b + 1 + 2 * tonumber(ARGV[b])
  end
  for i = f, #ARGV, 2 do
    given[tonumber(ARGV[i])] = ARGV[i + 1]
    sent[#sent + 1] = ARGV[i + 1]
  end
end
-- fpOf is the fp of the id at position j.
local function fpOf(j)
  return given[j] or kbackfp(ARGV[a + j - 1])
end
-- One ZREM takes the batch out of inflight. Its count equal to the batch's says every
-- id was in flight (the common case), and no id is read alone: the routes come counted,
-- the runs stand for the Kafka ids' fps. Else (an id twice, one recovered, cancelled or
-- acked already) the ids it removed are those left with an envelope in neither due nor
-- dead (msg holds an envelope exactly for the ids in due, inflight or dead), and each
-- is taken alone.
local acked, fps, left = {}, {}, {} -- left: per route, one cadd per route
local base = hbase(KEYS[7])
local all = false
if m > 0 then
  local z = redis.call('ZREM', KEYS[2], unpack(ARGV, a, b - 1))
  if z < m then
    z = z + hbsrem(base, ARGV, 9 + runs, G, a, m, KEYS[1])
  end
  all = z == m
end
if all then
  if ARGV[5] == '1' then
    for i = b + 1, b + 2 * tonumber(ARGV[b]), 2 do
      left[ARGV[i]] = tonumber(ARGV[i + 1])
    end
  else
    local envs = redis.call('HMGET', KEYS[1], unpack(ARGV, a, b - 1))
    for j = 1, m do
      local route = routeOf(envs[j])
      left[route] = (left[route] or 0) + 1
    end
  end
  redis.call('HDEL', KEYS[1], unpack(ARGV, a, b - 1))
elseif m > 0 then
  local ids, at, seen = {}, {}, {}
  for j = 1, m do
    local id = ARGV[a + j - 1]
    if not seen[id] then
      seen[id] = true
      ids[#ids + 1], at[#at + 1] = id, j
    end
  end
  local envs = redis.call('HMGET', KEYS[1], unpack(ids))
  local due, dead = zpresent(KEYS[7], ids), zpresent(KEYS[10], ids)
  for j = 1, #ids do
    if envs[j] and not due[j] and not dead[j] and hbwhere(base, ids[j], envs[j]) ~= 'pending' then
      acked[#acked + 1] = ids[j]
      if ARGV[2] == '1' then
        fps[#acked] = fpOf(at[j])
      end
      local route = routeOf(envs[j])
      left[route] = (left[route] or 0) + 1
    end
  end
  if #acked > 0 then
    redis.call('HDEL', KEYS[1], unpack(acked))
  end
end
for route, c in pairs(left) do
  cadd(cs, 'inflight', route, -c)
end
if all and nxany(KEYS[6]) then
  -- Successors to promote: the ids are taken alone after all.
  for j = 1, m do
    acked[j] = ARGV[a + j - 1]
    if ARGV[2] == '1' then
      fps[j] = fpOf(j)
    end
  end
  all = false
end
local k = all and m or #acked
if not all and #acked > 0 then
  fps = nxacked(cs, KEYS[6], KEYS[7], KEYS[1], acked, fps)
end
cflush(cs)
if ARGV[2] == '1' and k > 0 then
  -- Kafka-form ids go to their blocks' slots, through the caller's runs when every id
  -- of the call is delivered (all were in flight, none had a successor); the others
  -- (all delivered at dat) to the index and the done slice.
  if all and runs > 0 then
    kbruns(ix, ARGV, 8, 7 + runs, now)
    fps = kbrest(sent)
  elseif all then
    fps = {}
    for j = 1, m do
      fps[j] = fpOf(j)
    end
    fps = kbdone(ix, fps, dat, now)
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
local trimmed = dntrim(ix, ARGV[3], ARGV[4])
kbtrim(ix, ARGV[3])
ixflush(ix)
return { k, trimmed }
