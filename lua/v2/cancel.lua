-- cancel: remove a message by id wherever it is, and remember it in done as cancelled,
-- so that a replayed ingress record of its route cannot park it again.
--
-- KEYS[1] due        ZSET
-- KEYS[2] msg        HASH
-- KEYS[3] inflight   ZSET
-- KEYS[4] dead       ZSET
-- KEYS[5] done       ZSET id -> time delivered or cancelled
-- KEYS[6] cancelled  HASH id -> routes whose cancel it was, "<length>:<route>" each
-- KEYS[7] counts     HASH per-route counts (counts.lua)
-- ARGV[1] id
-- ARGV[2] now (integer unix ms)
-- ARGV[3] remember: 1 to record the id in done, 0 when the dedup window is off
-- ARGV[4] trimBefore, ARGV[5] trimLimit: as in ack
-- ARGV[6] route: the cancelled message's route, or for a tombstone the cancel's route
-- ARGV[7] expected: SHA-1 (hex) of the envelope the caller read and checked the route
--         of, "" when it saw none (unknown, delivered or cancelled id). If the id's
--         envelope is not that one now, nothing changes and "stale" is returned: the
--         caller reads again. This makes "check the route in Go, then cancel" atomic
--         without the script parsing envelopes.
-- ARGV[8] tombstone: 1 to remember an unknown id as cancelled for ARGV[6] (a cancel that
--         arrives before its message, on the message's route), 0 to leave no trace
-- Returns the state the id was in: "pending", "inflight", "dead" (now cancelled),
-- "delivered" or "cancelled" (already gone: nothing changes), "" (unknown: tombstoned
-- when asked) or "stale".
--
-- Cancelling an inflight message cannot recall a publish already under way; it only
-- makes its ack or retry a no-op.
-- hasRoute comes from routes.lua, cstart/cadd/cflush from counts.lua, which lua.go puts
-- in front of this script.
local function entry(route)
  return string.format('%d:', #route) .. route
end
local function trim()
  local old = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', '(' .. ARGV[4], 'LIMIT', 0, ARGV[5])
  if #old > 0 then
    redis.call('ZREM', KEYS[5], unpack(old))
    redis.call('HDEL', KEYS[6], unpack(old))
  end
end
local id, route, expected = ARGV[1], ARGV[6], ARGV[7]
local remember = ARGV[3] == '1'
local prior = ''
local set
local score = redis.call('ZSCORE', KEYS[1], id)
if score then
  prior, set = 'pending', KEYS[1]
else
  score = redis.call('ZSCORE', KEYS[3], id)
  if score then
    prior, set = 'inflight', KEYS[3]
  else
    score = redis.call('ZSCORE', KEYS[4], id)
    if score then
      prior, set = 'dead', KEYS[4]
    end
  end
end
if prior ~= '' then
  local env = redis.call('HGET', KEYS[2], id)
  local sum = ''
  if env then
    sum = redis.sha1hex(env)
  end
  if sum ~= expected then
    return 'stale'
  end
  redis.call('ZREM', set, id)
  redis.call('HDEL', KEYS[2], id)
  cstart(KEYS[7])
  cadd(prior, routeOf(env), -1, score, id)
  cflush()
  if remember then
    -- Keep another route's tombstone for this id (its message may still come).
    local routes = entry(route)
    if redis.call('ZSCORE', KEYS[5], id) then
      local old = redis.call('HGET', KEYS[6], id)
      if old and not hasRoute(old, route) then
        routes = old .. routes
      end
    end
    redis.call('ZADD', KEYS[5], ARGV[2], id)
    redis.call('HSET', KEYS[6], id, routes)
  end
  trim()
  return prior
end
if expected ~= '' then
  return 'stale' -- the envelope the caller checked is gone
end
if redis.call('ZSCORE', KEYS[5], id) then
  local routes = redis.call('HGET', KEYS[6], id)
  if not routes then
    return 'delivered'
  end
  if ARGV[8] ~= '1' or hasRoute(routes, route) then
    return 'cancelled'
  end
  -- Another route's tombstone: this route's cancel leaves its own beside it.
  if remember then
    redis.call('ZADD', KEYS[5], ARGV[2], id)
    redis.call('HSET', KEYS[6], id, routes .. entry(route))
  end
  trim()
  return ''
end
if ARGV[8] == '1' and remember then
  redis.call('ZADD', KEYS[5], ARGV[2], id)
  redis.call('HSET', KEYS[6], id, entry(route))
  trim()
end
return ''
