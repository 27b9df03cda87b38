-- reschedule: give a pending message a new due time, or requeue a dead letter.
--
-- KEYS[1] due       ZSET
-- KEYS[2] msg       HASH
-- KEYS[3] inflight  ZSET
-- KEYS[4] dead      ZSET
-- KEYS[5] done      ZSET
-- KEYS[6] cancelled HASH (done ids that were cancelled)
-- KEYS[7] counts    HASH per-route counts (counts.lua, put in front by lua.go)
-- ARGV[1] id
-- ARGV[2] new due (integer unix ms)
-- ARGV[3] optional: envelope to store (a pending message's with DueAt = the new due; a
--         dead letter's with reason and attempts cleared by the caller); without it the
--         envelope is kept
-- ARGV[4] optional with ARGV[3]: the score (due time or dead-letter time) the caller
--         read the envelope at; if it changed since, nothing is done and "stale" is
--         returned so the caller can read again instead of overwriting a newer envelope
-- Returns the state the id was in: "pending" (due time changed), "dead" (moved to
-- due), "inflight", "delivered", "cancelled" or "" (unchanged:
-- a message being published or already gone cannot be rescheduled), or "stale".
-- The route is read from the envelope stored (ARGV[3], else the one kept).
local id = ARGV[1]
local function route()
  return routeOf(ARGV[3] or redis.call('HGET', KEYS[2], id))
end
local dueAt = redis.call('ZSCORE', KEYS[1], id)
if dueAt then
  if ARGV[3] then
    if ARGV[4] and tonumber(dueAt) ~= tonumber(ARGV[4]) then
      return 'stale'
    end
    redis.call('HSET', KEYS[2], id, ARGV[3])
  end
  redis.call('ZADD', KEYS[1], ARGV[2], id)
  cstart(KEYS[7])
  -- once exact both positions count and nothing changes; while the backfill runs the
  -- move may cross its cursor
  if counted('pending', dueAt, id) ~= counted('pending', ARGV[2], id) then
    local r = route()
    cadd('pending', r, -1, dueAt, id)
    cadd('pending', r, 1, ARGV[2], id)
    cflush()
  end
  return 'pending'
end
local deadAt = redis.call('ZSCORE', KEYS[4], id)
if deadAt then
  if ARGV[3] then
    if ARGV[4] and tonumber(deadAt) ~= tonumber(ARGV[4]) then
      return 'stale'
    end
    redis.call('HSET', KEYS[2], id, ARGV[3])
  end
  redis.call('ZREM', KEYS[4], id)
  redis.call('ZADD', KEYS[1], ARGV[2], id)
  cstart(KEYS[7])
  local r = route()
  cadd('dead', r, -1, deadAt, id)
  cadd('pending', r, 1, ARGV[2], id)
  cflush()
  return 'dead'
end
if redis.call('ZSCORE', KEYS[3], id) then
  return 'inflight'
end
if redis.call('ZSCORE', KEYS[5], id) then
  if redis.call('HEXISTS', KEYS[6], id) == 1 then
    return 'cancelled'
  end
  return 'delivered'
end
return ''
