--- @include "counts"
--- @include "index"
--- @include "cold"
--- @include "bucket"
-- reschedule: give a pending message a new due time, or requeue a dead letter.
--
-- KEYS[1] due       ZSET
-- KEYS[2] msg       HASH
-- KEYS[3] inflight  ZSET
-- KEYS[4] dead      ZSET
-- KEYS[5] counts    HASH per-route counts (includes/counts.lua)
-- KEYS[6] ix        HASH the id index's state (index.lua), for the done window
-- ARGV[1] id
-- ARGV[2] new due (integer unix ms)
-- ARGV[3] fp: 12 bytes of SHA-256(id)
-- ARGV[4] optional: envelope to store (a pending message's with DueAt = the new due; a
--         dead letter's with reason and attempts cleared by the caller); without it the
--         envelope is kept
-- ARGV[5] optional with ARGV[4]: the score (due time or dead-letter time) the caller
--         read the envelope at; if it changed since, nothing is done and "stale" is
--         returned so the caller can read again instead of overwriting a newer envelope
-- ARGV[6] now (integer unix ms)
-- ARGV[7] the cold horizon (ms), as in park; -1: the message is put in due
-- (ARGV[4] and ARGV[5] are "" when not given.)
-- A pending message in the cold tier (cold.lua) is found through its index entry: its
-- element is emptied and the message put where its new due time belongs (its bucket,
-- or due).
-- Returns the state the id was in: "pending" (due time changed), "dead" (moved to
-- due), "inflight", "delivered", "cancelled" or "" (unchanged:
-- a message being published or already gone cannot be rescheduled), or "stale".
-- The route is read from the envelope stored (ARGV[4], else the one kept).
-- ixstart/ixget/doneOf come from index.lua, which this script includes.
local id = ARGV[1]
local newEnv, readAt = ARGV[4], ARGV[5]
if newEnv == '' then
  newEnv = nil
end
if readAt == '' then
  readAt = nil
end
local function route()
  return routeOf(newEnv or redis.call('HGET', KEYS[2], id))
end
hbout(hbase(KEYS[1]), id, redis.call('HGET', KEYS[2], id)) -- bucketed: rescheduled in due
local dueAt = redis.call('ZSCORE', KEYS[1], id)
if dueAt then
  if newEnv then
    if readAt and tonumber(dueAt) ~= tonumber(readAt) then
      return 'stale'
    end
    redis.call('HSET', KEYS[2], id, newEnv)
  end
  redis.call('ZADD', KEYS[1], ARGV[2], id) -- still pending, on the same route: counts stay
  return 'pending'
end
local ix = ixstart(KEYS[6], '')
local co = costart(KEYS[1])
local state = ixget(ix, { ARGV[3] })[1]
local b, pos, cdue, cenv = cofind(co, state, id)
if b then
  if newEnv and readAt and tonumber(readAt) ~= cdue then
    return 'stale'
  end
  local env = newEnv or cenv
  codrop(co, b, pos)
  local cs = cstart(KEYS[5])
  cadd(cs, 'pending', routeOf(env), -1)
  if cocold(co, ARGV[2], tonumber(ARGV[6]), tonumber(ARGV[7])) then
    ixset(ix, { ARGV[3] }, { coput(co, id, ARGV[2], env, ARGV[3]) })
  else
    ixdel(ix, { ARGV[3] })
    redis.call('HSET', KEYS[2], id, env)
    redis.call('ZADD', KEYS[1], ARGV[2], id)
  end
  cadd(cs, 'pending', routeOf(env), 1)
  cflush(cs)
  ixflush(ix)
  return 'pending'
end
local deadAt = redis.call('ZSCORE', KEYS[4], id)
if deadAt then
  if newEnv then
    if readAt and tonumber(deadAt) ~= tonumber(readAt) then
      return 'stale'
    end
    redis.call('HSET', KEYS[2], id, newEnv)
  end
  redis.call('ZREM', KEYS[4], id)
  redis.call('ZADD', KEYS[1], ARGV[2], id)
  local cs = cstart(KEYS[5])
  local r = route()
  cadd(cs, 'dead', r, -1)
  cadd(cs, 'pending', r, 1)
  cflush(cs)
  return 'dead'
end
if redis.call('ZSCORE', KEYS[3], id) then
  return 'inflight'
end
local t, routes = doneOf(state)
if t then
  if routes then
    return 'cancelled'
  end
  return 'delivered'
end
return ''
