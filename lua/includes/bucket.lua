--- @include "envelope"
--- @include "num"
-- bucket: the due buckets of a shard, included by the scripts that park, claim, ack,
-- recover or find pending messages. docs/ARCHITECTURE.md "Due buckets" gives the
-- reasons and the figures.
--
-- A message park's quick path takes (a fetch's Kafka default ids, not claimed at park,
-- due at least two bucket widths ahead) may be parked as a member of its due time's
-- bucket instead of the shard's `due` sorted set: its envelope is in `msg` as for every
-- pending message, so every lookup by id finds it there, and the bucket is a plain SET
-- of ids. A claim renames a whole bucket into flight (no id or envelope enters Lua
-- one by one) and an ack takes the ids out of it with one SREM.
--
-- Keys (shard n, prefix P; built from the shard's `due` key, KEYS[1] or the key the
-- caller passes, so they carry its hash tag {C:n}; the callers declare the shard's
-- slotguard, as for the cold tier):
--   P:{C:n}:hb        ZSET  b -> b*W + W/2, the middle of bucket b: the pending buckets,
--                           each claimed whole once its middle is due by a claim's upTo
--   P:{C:n}:hb:<b>    SET   the ids pending in bucket b (due in [b*W, (b+1)*W))
--   P:{C:n}:hc:<b>    HASH  route -> its ids in pending bucket b; "\0b" their
--                           envelopes' bytes (a claim's byte budget)
--   P:{C:n}:hf        ZSET  b -> lease deadline: the claimed buckets (an entry whose
--                           set is gone, acked whole, goes at its deadline: hbunclaim)
--   P:{C:n}:hf:<b>    SET   the ids of claimed bucket b still in flight
--   P:{C:n}:hs        HASH  w: the highest bucket ever claimed (park adds no id to a
--                           bucket at or below it, so a bucket is claimed once); p, f:
--                           the ids in pending and in claimed buckets (shard stats)
--
-- An id is in at most one of due, inflight, dead, a pending and a claimed bucket, and
-- msg holds an envelope exactly for the ids in any of them. A bucketed message's due
-- time is its envelope's DueAt (dueOf), so its bucket is found from its envelope.
local HB_W = 1024 -- bucket width in ms: storeapi's claimers keep their lookahead above it
local HB_CAP = 1024 -- at most this many ids a bucket: a claim takes a bucket whole

-- hbase is the shard's key prefix P:{C:n}: from its due key.
local function hbase(dueKey)
  return string.sub(dueKey, 1, #dueKey - 3)
end

local function hbkey(base, kind, b)
  return base .. kind .. ':' .. string.format('%d', b)
end

-- dueOf is an envelope's DueAt (unix ms), or nil for one of another version: after
-- the route, the source broker's name (for a broker the flags do not name), the
-- source, the target (flag 4), a zigzag varint (internal/envelope codec_v2.go).
local function dueOf(env)
  if not env or string.byte(env, 1) ~= 2 then
    return nil
  end
  local flags = string.byte(env, 2)
  local pos = 3
  local skip = 2 -- route, source
  if math.floor(flags / 64) % 4 == 0 then
    skip = 3 -- a broker named as text
  end
  if math.floor(flags / 4) % 2 == 1 then
    skip = skip + 1 -- target
  end
  for _ = 1, skip do
    local n, p = uvarint(env, pos)
    if not n then
      return nil
    end
    pos = p + n
  end
  local z = uvarint(env, pos)
  if not z then
    return nil
  end
  if z % 2 == 1 then
    return -(z + 1) / 2
  end
  return z / 2
end

-- hbwhere says where a message with envelope env is bucketed: 'pending' and its due
-- time, 'inflight' and its bucket's lease deadline, or nil (not in a bucket), and its
-- bucket.
local function hbwhere(base, id, env)
  local due = dueOf(env)
  if not due then
    return nil
  end
  local b = math.floor(due / HB_W)
  if redis.call('SISMEMBER', hbkey(base, 'hb', b), id) == 1 then
    return 'pending', due, b
  end
  if redis.call('SISMEMBER', hbkey(base, 'hf', b), id) == 1 then
    return 'inflight', tonumber(redis.call('ZSCORE', base .. 'hf', string.format('%d', b))), b
  end
  return nil
end

-- hbout takes id out of its bucket, if it is in one, into the sorted set its state
-- keeps outside buckets (due at its due time, inflight at its bucket's deadline), so
-- the caller treats it as any message; returns the state it was in, or nil.
local function hbout(base, id, env)
  local st, score, b = hbwhere(base, id, env)
  if st == 'pending' then
    redis.call('SREM', hbkey(base, 'hb', b), id)
    local hc = hbkey(base, 'hc', b)
    redis.call('HINCRBY', hc, routeOf(env), '-1')
    redis.call('HINCRBY', hc, '\0b', itoa(-#env))
    redis.call('ZADD', base .. 'due', itoa(score), id)
    redis.call('HINCRBY', base .. 'hs', 'p', '-1')
  elseif st == 'inflight' then
    redis.call('HINCRBY', base .. 'hs', 'f', '-1')
    redis.call('SREM', hbkey(base, 'hf', b), id)
    redis.call('ZADD', base .. 'inflight', itoa(score), id)
  end
  return st
end

-- hbunclaim moves the claimed buckets whose deadline is in [lo, hi] (scores as
-- ZRANGEBYSCORE takes them: "-inf", "+inf"), at most limit of them, into inflight
-- under their deadline, and drops the entries of those acked whole; returns how many
-- ids it moved.
local function hbunclaim(base, lo, hi, limit)
  local page = redis.call('ZRANGEBYSCORE', base .. 'hf', lo, hi, 'WITHSCORES', 'LIMIT', '0', itoa(limit))
  local moved = 0
  for i = 1, #page, 2 do
    local key = base .. 'hf:' .. page[i]
    local ids = redis.call('SMEMBERS', key)
    for first = 1, #ids, 500 do
      local z = {}
      for j = first, math.min(first + 499, #ids) do
        z[#z + 1] = page[i + 1]
        z[#z + 1] = ids[j]
      end
      redis.call('ZADD', base .. 'inflight', unpack(z))
    end
    moved = moved + #ids
    redis.call('DEL', key)
    redis.call('ZREM', base .. 'hf', page[i])
  end
  if moved > 0 then
    redis.call('HINCRBY', base .. 'hs', 'f', itoa(-moved))
  end
  return moved
end

-- hbflush moves up to limit pending buckets of the shard into due (at each message's
-- due time) and up to limit claimed ones into inflight, so that the readers that range
-- over due or inflight by score (browse, counts, edges) see those messages there;
-- returns how many buckets of either kind are left.
local function hbflush(base, limit)
  local bs = redis.call('ZRANGE', base .. 'hb', '0', itoa(limit - 1))
  for _, b in ipairs(bs) do
    local key = base .. 'hb:' .. b
    local ids = redis.call('SMEMBERS', key)
    for first = 1, #ids, 500 do
      local part = { unpack(ids, first, math.min(first + 499, #ids)) }
      local envs = redis.call('HMGET', base .. 'msg', unpack(part))
      local z = {}
      for j = 1, #part do
        z[#z + 1] = itoa(dueOf(envs[j]) or 0)
        z[#z + 1] = part[j]
      end
      redis.call('ZADD', base .. 'due', unpack(z))
    end
    redis.call('DEL', key, base .. 'hc:' .. b)
    redis.call('HINCRBY', base .. 'hs', 'p', itoa(-#ids))
  end
  if #bs > 0 then
    redis.call('ZREM', base .. 'hb', unpack(bs))
  end
  hbunclaim(base, '-inf', '+inf', limit)
  return redis.call('ZCARD', base .. 'hb') + redis.call('ZCARD', base .. 'hf')
end

-- hbnext is the start of the earliest pending bucket (the earliest due time it may
-- hold), or nil.
local function hbnext(base)
  local h = redis.call('ZRANGE', base .. 'hb', '0', '0', 'WITHSCORES')
  if #h == 0 then
    return nil
  end
  return tonumber(h[2]) - HB_W / 2
end

-- hbsrem takes acked ids out of their claimed buckets and returns how many were in
-- one: a[from..] holds g pairs of a bucket and how many of the ids, consecutive from
-- a[at], are its (g = 0: each id's bucket is read from its envelope in msgKey; m ids).
local function hbsrem(base, a, from, g, at, m, msgKey)
  local n = 0
  local function srem(b, ids)
    n = n + redis.call('SREM', base .. 'hf:' .. b, unpack(ids))
  end
  local function done()
    if n > 0 then
      redis.call('HINCRBY', base .. 'hs', 'f', itoa(-n))
    end
    return n
  end
  if g > 0 then
    local p = at
    for i = from, from + 2 * g - 1, 2 do
      local c = tonumber(a[i + 1])
      srem(a[i], { unpack(a, p, p + c - 1) })
      p = p + c
    end
    return done()
  end
  local ids = { unpack(a, at, at + m - 1) }
  local envs = redis.call('HMGET', msgKey, unpack(ids))
  for j = 1, m do
    local due = dueOf(envs[j])
    if due then
      srem(string.format('%d', math.floor(due / HB_W)), { ids[j] })
    end
  end
  return done()
end

-- hbtake takes id out of its claimed bucket (its envelope read from msgKey): whether
-- it was in one.
local function hbtake(base, id, msgKey)
  local env = redis.call('HGET', msgKey, id)
  if hbwhere(base, id, env) ~= 'inflight' then
    return false
  end
  local b = string.format('%d', math.floor(dueOf(env) / HB_W))
  local key = base .. 'hf:' .. b
  redis.call('SREM', key, id)
  redis.call('HINCRBY', base .. 'hs', 'f', '-1')
  return true
end
