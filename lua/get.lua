--- @include "counts"
--- @include "index"
--- @include "successor"
--- @include "cold"
--- @include "bucket"
-- get: look a message up by id wherever it is.
--
-- KEYS[1] due        ZSET id -> due time
-- KEYS[2] msg        HASH id -> envelope
-- KEYS[3] inflight   ZSET id -> lease deadline
-- KEYS[4] dead       ZSET id -> time dead-lettered
-- KEYS[5] ix         HASH the id index's state (index.lua)
-- KEYS[6] nx         HASH successors (successor.lua): an in-flight id with one reads as
--                    its successor, pending at the successor's due time
-- ARGV[1] id
-- ARGV[2] fp: 12 bytes of SHA-256(id)
-- Returns { state, score, envelope } with state "pending", "inflight", "dead",
-- "delivered" or "cancelled" and score the time in that state (due time, lease
-- deadline, time dead-lettered, delivered or cancelled; unix ms); "delivered" and
-- "cancelled" have no envelope; an unknown id returns { "" }.
-- ixstart/ixget/doneOf come from index.lua, cofind from cold.lua (a pending message
-- in the cold tier), which this script includes.
local id = ARGV[1]
-- found is the reply for id in state st at score: an in-flight id with a successor
-- reads as that successor, pending at its due time.
local function found(st, score, env)
  if st == 'inflight' then
    local due, nenv = nxget(KEYS[6], id)
    if due then
      return { 'pending', due, nenv }
    end
  end
  return { st, tonumber(score), env }
end
local states = { 'pending', 'inflight', 'dead' }
for i = 1, 3 do
  local k = KEYS[1]
  if i == 2 then k = KEYS[3] elseif i == 3 then k = KEYS[4] end
  local score = redis.call('ZSCORE', k, id)
  if score then
    return found(states[i], score, redis.call('HGET', KEYS[2], id) or nil)
  end
end
local env = redis.call('HGET', KEYS[2], id)
if env then
  local st, score = hbwhere(hbase(KEYS[1]), id, env) -- in a due bucket (bucket.lua)
  if st then
    return found(st, score, env)
  end
end
local ix = ixstart(KEYS[5], '')
local v = ixget(ix, { ARGV[2] })[1]
local co = costart(KEYS[1])
local b, _, due, env = cofind(co, v, id)
if b then
  return { 'pending', due, env }
end
local t, routes = doneOf(v)
if t then
  if routes then
    return { 'cancelled', t }
  end
  return { 'delivered', t }
end
return { '' }
