--- @include "counts"
--- @include "index"
--- @include "cold"
--- @include "bucket"
-- claim: move due messages of one shard into inflight, for the shard's lease holder only.
--
-- KEYS[1] due       ZSET id -> due time
-- KEYS[2] msg       HASH id -> envelope
-- KEYS[3] inflight  ZSET id -> lease deadline
-- KEYS[4] owner     STRING "instance|token"
-- KEYS[5] counts    HASH per-route counts (includes/counts.lua)
-- KEYS[6] ix        HASH the id index's state (index.lua): promoted messages' entries
--                   are deleted
-- (then the shard's slotguard, never written: slotguard.go; the cold tier's buckets
--  are named in the script, cold.lua)
-- ARGV[1] owner value "instance|token" the caller believes it holds
-- ARGV[2] upTo: claim ids with due <= upTo (now + lookahead, unix ms)
-- ARGV[3] lease deadline (unix ms): inflight score; recover re-fires after it
-- ARGV[4] limit: at most this many ids
-- ARGV[5] promotion lead (ms): first the cold tier's buckets that start at or before
--         upTo + lead are promoted into due (cold.lua); -1: none is
-- ARGV[6] promotion budget: at most this many cold elements per call
-- ARGV[7] byte budget (optional, 0 or absent: none): the claimed envelopes' lengths,
--         each plus ARGV[8], add up to at most this much; the first message that would
--         pass it stays due (in due order: nothing behind it is taken)
-- ARGV[8] bytes counted per message beyond its envelope's length
-- ARGV[9] 1: the first message is taken whatever its size (the caller holds nothing
--         else, so a message larger than the whole budget still goes through, alone)
-- ARGV[10] optional, "1": the lease deadline identifies this claim (see below)
-- ARGV[11] optional, now (unix ms, the caller's clock; 0 or absent: not given): the ids
--          due at or before it are read without their scores (see dueN below)
-- Returns: error reply "FENCED ..." when the owner key is not ARGV[1] (lease lost or
-- taken over: a stale owner must not claim), else a flat array
--   { nextDue, dropped, need, k, id1, due1, env1, id2, due2, env2, ..., b1 .. bk }
-- the triples in due order, then the k ids of the due buckets claimed whole after them
-- (bucket.lua: the caller reads their envelopes from msg; each fires at its DueAt).
-- nextDue: due time of the earliest message still pending after this claim, in due or
-- in the cold tier (there it may be earlier than the earliest left after a cancel:
-- cold.lua), or the start of the earliest pending bucket (bucket.lua: claimed whole
-- once its middle is due by upTo, so a claim hands over messages due up to half a
-- bucket's width after upTo; a claimer whose lookahead covers a bucket's width, asking
-- half a lookahead before nextDue, takes each bucket before its first message), 0 (claim again at once) when the promotion budget ran
-- out, -1 if none. dropped: ids found in due without an envelope (corruption); they
-- are removed rather than left to wedge the head of the shard, and reported so the
-- caller can count them. need: the bytes (length + ARGV[8]) of the first due message
-- the byte budget left due, 0 if none did. dueN is the ZSET score, which wins over the
-- envelope's DueAt where it is later (a retry's backoff); it is the score as
-- ZRANGEBYSCORE wrote it (a string, not a number: no conversion per message, the caller
-- parses it). For an id due at or before ARGV[11], dueN is 0, "not read": the message
-- is due at the claim whatever its score, so the caller fires it at its envelope's DueAt
-- (at once, unless DueAt is later); reading the scores is most of what ZRANGEBYSCORE
-- costs (Redis 7.0 prints each with %.17g), which a drain would pay on every message.
--
-- With ARGV[10] "1" the caller gives every claim of the shard its own lease deadline,
-- so a claim sent again whose first run's reply was lost (a timeout, a reset
-- connection, a client re-sending a whole pipeline after one call of it met TRYAGAIN)
-- finds what that run claimed still in inflight under its deadline, and returns those
-- messages again instead of claiming more: { 0, -1, 0, 0, id1, upTo, env1, ... }. dropped -1 marks such a replay; nextDue 0 has
-- the caller claim again at once. The due scores that run read are gone (inflight
-- keeps the deadline), so each message is reported due at upTo, which none of them was
-- due after: never early, at most upTo - due late.
if redis.call('GET', KEYS[4]) ~= ARGV[1] then
  return redis.error_reply('FENCED shard lease is not held by ' .. ARGV[1])
end
local base = hbase(KEYS[1])
local again = {}
if ARGV[10] == '1' then
  hbunclaim(base, ARGV[3], ARGV[3], 64) -- buckets that run claimed: answered from inflight
  again = redis.call('ZRANGEBYSCORE', KEYS[3], ARGV[3], ARGV[3], 'LIMIT', '0', ARGV[4])
end
if #again > 0 then
  local out = { 0, -1, 0, 0 }
  for first = 1, #again, 500 do
    local ids = { unpack(again, first, math.min(first + 499, #again)) }
    local envs = redis.call('HMGET', KEYS[2], unpack(ids))
    for j = 1, #ids do
      if envs[j] then
        out[#out + 1] = ids[j]
        out[#out + 1] = tonumber(ARGV[2])
        out[#out + 1] = envs[j]
      end
    end
  end
  return out
end
local cs = cstart(KEYS[5])
local co = costart(KEYS[1])
local lead = tonumber(ARGV[5] or '-1')
local promoting = false
if lead >= 0 then
  local _, _, more = copromote(co, cs, KEYS[1], KEYS[2], KEYS[6], tonumber(ARGV[2]) + lead, tonumber(ARGV[6]))
  promoting = more
end
-- lists: the ids to take, in due order: those due by now (ARGV[11]) without their
-- scores, then the rest up to upTo with them; strides: 1 or 2 array slots per id.
local limit = tonumber(ARGV[4])
local now = tonumber(ARGV[11] or '0')
local lists, strides = {}, {}
if now > 0 then
  local ahead = now < tonumber(ARGV[2])
  lists[1] = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ahead and ARGV[11] or ARGV[2], 'LIMIT', '0', ARGV[4])
  strides[1] = 1
  if ahead and #lists[1] < limit then
    lists[2] = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. ARGV[11], ARGV[2], 'WITHSCORES', 'LIMIT', '0', itoa(limit - #lists[1]))
    strides[2] = 2
  end
else
  lists[1] = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[2], 'WITHSCORES', 'LIMIT', '0', ARGV[4])
  strides[1] = 2
end
local out = { -1, 0, 0, 0 }
local n = 4
local dropped = 0
local budget = tonumber(ARGV[7] or '0')
local per = tonumber(ARGV[8] or '0')
local alone = ARGV[9] == '1'
if budget <= 0 then
  budget = math.huge
end
local used = 0
local moved, lost = {}, {} -- per route: messages claimed, ids dropped (counted once per route)
local avg = 0 -- mean bytes of the envelopes read so far (0: none yet)
local taken = 0
-- Envelopes are read in steps small enough for unpack's stack limit, and under a byte
-- budget no larger than what the budget can still take at the sizes seen so far, so
-- the script does not read (and Redis does not buffer) far more than it claims.
local step = 500
local byte, sub = string.byte, string.sub
local full = false
-- First the whole buckets whose middle is due by upTo, while they fit (bucket.lua). One
-- that does not fit ends the claim, its size the need: the next claim, sized for it,
-- takes it before anything else (taken after the due entries, each claim's new ones
-- would use the budget first and leave the bucket behind for as long as they came).
local bids = {}
local bn = nil -- the start of the earliest bucket left pending, -1 none, nil unread
do
  -- the head of the pending buckets, claimed while due by upTo; the first one left is
  -- the next due (bn)
  local bs = redis.call('ZRANGE', base .. 'hb', '0', '15', 'WITHSCORES')
  local hw = nil
  bn = #bs > 0 and tonumber(bs[2]) - HB_W / 2 or -1
  for i = 1, #bs, 2 do
    local b = bs[i]
    if tonumber(bs[i + 1]) > tonumber(ARGV[2]) then
      break
    end
    local key = base .. 'hb:' .. b
    local hc = redis.call('HGETALL', base .. 'hc:' .. b)
    local k, size, routes = redis.call('SCARD', key), 0, {}
    for j = 1, #hc, 2 do
      if hc[j] == '\0b' then
        size = tonumber(hc[j + 1])
      else
        routes[hc[j]] = tonumber(hc[j + 1])
      end
    end
    size = size + k * per
    -- a bucket goes whole: the byte budget holds, the count may pass limit by a bucket
    if k > 0 and used + size > budget and not (alone and taken == 0) then
      out[3] = size
      full = true
      break
    end
    if k > 0 then
      local fk = base .. 'hf:' .. b
      redis.call('RENAME', key, fk)
      redis.call('ZADD', base .. 'hf', ARGV[3], b)
      for _, id in ipairs(redis.call('SMEMBERS', fk)) do
        bids[#bids + 1] = id
      end
      for route, c in pairs(routes) do
        if c ~= 0 then
          moved[route] = (moved[route] or 0) + c
        end
      end
      taken, used = taken + k, used + size
    end
    redis.call('DEL', key, base .. 'hc:' .. b)
    redis.call('ZREM', base .. 'hb', b)
    hw = b
    if bs[i + 3] then
      bn = tonumber(bs[i + 3]) - HB_W / 2
    elseif #bs == 32 then
      bn = 0 -- the head read is used up: claim again at once
    else
      bn = -1
    end
  end
  if hw then
    redis.call('HSET', base .. 'hs', 'w', hw)
  end
  if #bids > 0 then
    redis.call('HINCRBY', base .. 'hs', 'p', itoa(-#bids))
    redis.call('HINCRBY', base .. 'hs', 'f', itoa(#bids))
  end
end
for li = 1, #lists do
  local ids, st = lists[li], strides[li]
  local first = 1
  while first <= #ids and not full do
    local want = step
    if budget < math.huge then
      if avg == 0 then
        avg = redis.call('HSTRLEN', KEYS[2], ids[first]) + per
      end
      want = math.max(1, math.min(step, math.floor((budget - used) / avg) + 1))
    end
    -- members: this step's ids; zadd: their ZADD arguments into inflight, built in the
    -- same pass and cut short below (a dropped id, the byte budget) only when needed.
    local members, zadd, m = {}, {}, 0
    local deadline = ARGV[3]
    for i = first, math.min(first + st * want - 1, #ids), st do
      m = m + 1
      members[m] = ids[i]
      zadd[2 * m - 1] = deadline
      zadd[2 * m] = ids[i]
    end
    local base = first
    first = first + st * m
    local envs = redis.call('HMGET', KEYS[2], unpack(members))
    local took, sizes, lostHere = 0, 0, false
    for j = 1, m do
      local env = envs[j]
      local size = 0
      if env then
        size = #env + per
        if used + size > budget and not (alone and taken == 0) then
          out[3] = size
          full = true
          break
        end
      end
      used = used + size
      sizes = sizes + size
      taken = taken + 1
      took = j
      -- routeOf inlined for the common envelope: version 2 and a route shorter than 128
      -- bytes (a one-byte length)
      local route
      local v, _, len = byte(env or '', 1, 3)
      if v == 2 and len and len < 128 then
        route = sub(env, 4, 3 + len)
      else
        route = routeOf(env)
      end
      if env then
        moved[route] = (moved[route] or 0) + 1
        out[n + 1] = members[j]
        if st == 2 then
          out[n + 2] = ids[base + 2 * j - 1]
        else
          out[n + 2] = 0
        end
        out[n + 3] = env
        n = n + 3
      else
        lost[route] = (lost[route] or 0) + 1
        dropped = dropped + 1
        lostHere = true
      end
    end
    if took > 0 then
      -- The ids taken are the head of due (read from -inf in rank order, each step
      -- after the last removed its own): one range removal, no search per id.
      redis.call('ZREMRANGEBYRANK', KEYS[1], '0', itoa(took - 1))
      avg = math.max(1, math.floor(sizes / took))
      if lostHere then
        zadd = {}
        for j = 1, took do
          if envs[j] then
            zadd[#zadd + 1] = deadline
            zadd[#zadd + 1] = members[j]
          end
        end
      end
      if #zadd > 0 then
        redis.call('ZADD', KEYS[3], unpack(zadd, 1, math.min(#zadd, 2 * took)))
      end
    end
  end
end
-- the buckets' ids go last: { nextDue, dropped, need, k, triples, id1 .. idk }
out[4] = #bids
for i = 1, #bids do
  out[n + i] = bids[i]
end
local head = redis.call('ZRANGE', KEYS[1], '0', '0', 'WITHSCORES')
if head[2] then
  out[1] = tonumber(head[2])
end
if bn == nil then
  bn = hbnext(base) or -1
end
if bn >= 0 and (out[1] < 0 or bn < out[1]) then
  out[1] = bn
end
if promoting then
  out[1] = 0
elseif lead >= 0 then
  local nb = conext(co)
  if nb and (out[1] < 0 or nb < out[1]) then
    out[1] = nb
  end
end
out[2] = dropped
for route, k in pairs(moved) do
  cadd(cs, 'pending', route, -k)
  cadd(cs, 'inflight', route, k)
end
for route, k in pairs(lost) do
  cadd(cs, 'pending', route, -k)
end
cflush(cs)
return out
