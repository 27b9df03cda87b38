--- @include "routes"
--- @include "counts"
--- @include "index"
--- @include "successor"
--- @include "cold"
--- @include "bucket"
-- cancel: remove a message by id wherever it is, and remember it in the done window as
-- cancelled, so that a replayed ingress record of its route cannot park it again.
--
-- KEYS[1] due        ZSET
-- KEYS[2] msg        HASH
-- KEYS[3] inflight   ZSET
-- KEYS[4] dead       ZSET
-- KEYS[5] counts     HASH per-route counts (counts.lua)
-- KEYS[6] ix         HASH the id index's state (index.lua)
-- KEYS[7] dn         ZSET the done slices (index.lua)
-- KEYS[8] nx         HASH successors (successor.lua): an in-flight id's successor is
--                    cancelled with it (and is the envelope ARGV[7] is checked against)
-- ARGV[1] id
-- ARGV[2] now (integer unix ms)
-- ARGV[3] remember: 1 to record the id in the done window, 0 when it is off
-- ARGV[4] trimBefore, ARGV[5] trimLimit: as in ack
-- ARGV[6] route: the cancelled message's route, or for a tombstone the cancel's route
-- ARGV[7] expected: SHA-1 (hex) of the envelope the caller read and checked the route
--         of, "" when it saw none (unknown, delivered or cancelled id). If the id's
--         envelope is not that one now, nothing changes and "stale" is returned: the
--         caller reads again. This makes "check the route in Go, then cancel" atomic
--         without the script parsing envelopes.
-- ARGV[8] tombstone: 1 to remember an unknown id as cancelled for ARGV[6] (a cancel that
--         arrives before its message, on the message's route), 0 to leave no trace
-- ARGV[9] fp: 12 bytes of SHA-256(id)
-- ARGV[10] the done slice width (ms)
-- Returns the state the id was in: "pending", "inflight", "dead" (now cancelled),
-- "delivered" or "cancelled" (already gone: nothing changes), "" (unknown: tombstoned
-- when asked) or "stale".
--
-- Cancelling an inflight message cannot recall a publish already under way; it only
-- makes its ack or retry a no-op.
-- A pending message in the cold tier (cold.lua) is found through its index entry; its
-- element is emptied and the entry becomes the tombstone (or is deleted).
-- hasRoute comes from routes.lua, cstart/cadd/cflush from counts.lua, the ix*/dn*
-- helpers from index.lua, co* from cold.lua, which this script includes.
local function entry(route)
  return string.format('%d:', #route) .. route
end
local id, now, route, expected, fp = ARGV[1], ARGV[2], ARGV[6], ARGV[7], ARGV[9]
local remember = ARGV[3] == '1'
local ix = ixstart(KEYS[6], KEYS[7])
-- done: whether the id is remembered, and the routes of its cancels (nil: delivered).
local state = ixget(ix, { fp })[1]
local done, doneRoutes = doneOf(state)
local function finish(routes)
  if remember then
    ixset(ix, { fp }, { cancelledAt(now, routes) })
    dnrecord(ix, { fp }, now, ARGV[10])
  end
  dntrim(ix, ARGV[4], ARGV[5])
  ixflush(ix)
end
local prior = ''
local set
hbout(hbase(KEYS[1]), id, redis.call('HGET', KEYS[2], id)) -- bucketed: cancelled from due or inflight
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
  if prior == 'inflight' then
    -- get.lua shows an in-flight id's successor, so that is what the caller checked.
    local _, nenv = nxget(KEYS[8], id)
    env = nenv or env
  end
  local sum = ''
  if env then
    sum = redis.sha1hex(env)
  end
  if sum ~= expected then
    return 'stale'
  end
  redis.call('ZREM', set, id)
  redis.call('HDEL', KEYS[2], id)
  if prior == 'inflight' then
    redis.call('HDEL', KEYS[8], id)
  end
  local cs = cstart(KEYS[5])
  cadd(cs, prior, routeOf(env), -1)
  cflush(cs)
  -- Keep another route's tombstone for this id (its message may still come).
  local routes = entry(route)
  if doneRoutes and not hasRoute(doneRoutes, route) then
    routes = doneRoutes .. routes
  end
  finish(routes)
  return prior
end
local co = costart(KEYS[1])
local b, pos, due, cenv = cofind(co, state, id)
if b then
  if redis.sha1hex(cenv) ~= expected then
    return 'stale'
  end
  codrop(co, b, pos)
  local cs = cstart(KEYS[5])
  cadd(cs, 'pending', routeOf(cenv), -1)
  cflush(cs)
  if not remember then
    ixdel(ix, { fp })
  end
  finish(entry(route))
  return 'pending'
end
if expected ~= '' then
  return 'stale' -- the envelope the caller checked is gone
end
if done then
  if not doneRoutes then
    return 'delivered'
  end
  if ARGV[8] ~= '1' or hasRoute(doneRoutes, route) then
    return 'cancelled'
  end
  -- Another route's tombstone: this route's cancel leaves its own beside it.
  finish(doneRoutes .. entry(route))
  return ''
end
if ARGV[8] == '1' then
  finish(entry(route))
end
return ''
