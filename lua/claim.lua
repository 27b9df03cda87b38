--- @include "counts"
--- @include "index"
--- @include "cold"
-- claim: move due messages of one shard into inflight, for the shard's lease holder only.
--
-- KEYS[1] due       ZSET id -> due time
-- KEYS[2] msg       HASH id -> envelope
-- KEYS[3] inflight  ZSET id -> lease deadline
-- KEYS[4] owner     STRING "instance|token"
-- KEYS[5] counts    HASH per-route counts (includes/counts.lua)
-- KEYS[6] ix        HASH the id index's state (index.lua): promoted messages' entries
--                   are deleted
-- KEYS[7] the shard's slotguard (never written; slotguard.go): the cold tier's buckets
--         are named in the script (cold.lua)
-- ARGV[1] owner value "instance|token" the caller believes it holds
-- ARGV[2] upTo: claim ids with due <= upTo (now + lookahead, unix ms)
-- ARGV[3] lease deadline (unix ms): inflight score; recover re-fires after it
-- ARGV[4] limit: at most this many ids
-- ARGV[5] promotion lead (ms): first the cold tier's buckets that start at or before
--         upTo + lead are promoted into due (cold.lua); -1: none is
-- ARGV[6] promotion budget: at most this many cold elements per call
-- ARGV[7] optional, "1": the lease deadline identifies this claim (see below)
-- Returns: error reply "FENCED ..." when the owner key is not ARGV[1] (lease lost or
-- taken over: a stale owner must not claim), else a flat array
--   { nextDue, dropped, id1, due1, env1, id2, due2, env2, ... }
-- in due order. nextDue: due time of the earliest message still pending after this
-- claim, in due or in the cold tier (there it may be earlier than the earliest left
-- after a cancel: cold.lua), 0 (claim again at once) when the promotion budget ran
-- out, -1 if none. dropped: ids found in due without an envelope (corruption); they
-- are removed rather than left to wedge the head of the shard, and reported so the
-- caller can count them. dueN is the ZSET score, which wins over the envelope's DueAt
-- because reschedule changes only the score.
--
-- With ARGV[7] "1" the caller gives every claim of the shard its own lease deadline,
-- so a claim sent again whose first run's reply was lost (a timeout, a reset
-- connection, a client re-sending a whole pipeline after one call of it met TRYAGAIN)
-- finds what that run claimed still in inflight under its deadline, and returns those
-- messages again instead of claiming more: { 0, -1, id1, upTo, env1, ... }. dropped -1 marks such a replay; nextDue 0 has
-- the caller claim again at once. The due scores that run read are gone (inflight
-- keeps the deadline), so each message is reported due at upTo, which none of them was
-- due after: never early, at most upTo - due late.
if redis.call('GET', KEYS[4]) ~= ARGV[1] then
  return redis.error_reply('FENCED shard lease is not held by ' .. ARGV[1])
end
local again = {}
if ARGV[7] == '1' then
  again = redis.call('ZRANGEBYSCORE', KEYS[3], ARGV[3], ARGV[3], 'LIMIT', 0, ARGV[4])
end
if #again > 0 then
  local out = { 0, -1 }
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
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[2], 'WITHSCORES', 'LIMIT', 0, ARGV[4])
local out = { -1, 0 }
local n = 2
local dropped = 0
-- Commands take many members at once, in steps small enough for unpack's stack limit.
local step = 500
for first = 1, #ids, 2 * step do
  local members, scores = {}, {}
  for i = first, math.min(first + 2 * step - 1, #ids), 2 do
    members[#members + 1] = ids[i]
    scores[#scores + 1] = ids[i + 1]
  end
  redis.call('ZREM', KEYS[1], unpack(members))
  local envs = redis.call('HMGET', KEYS[2], unpack(members))
  local zadd = {}
  for j = 1, #members do
    local route = routeOf(envs[j])
    cadd(cs, 'pending', route, -1)
    if envs[j] then
      cadd(cs, 'inflight', route, 1)
      zadd[#zadd + 1] = ARGV[3]
      zadd[#zadd + 1] = members[j]
      out[n + 1] = members[j]
      out[n + 2] = tonumber(scores[j])
      out[n + 3] = envs[j]
      n = n + 3
    else
      dropped = dropped + 1
    end
  end
  if #zadd > 0 then
    redis.call('ZADD', KEYS[3], unpack(zadd))
  end
end
local head = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if head[2] then
  out[1] = tonumber(head[2])
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
cflush(cs)
return out
