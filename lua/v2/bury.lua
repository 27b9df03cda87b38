-- bury: store a batch of invalid messages straight into the dead letters of one shard,
-- idempotently by id (same rules as park), so bad input never blocks a partition or a
-- queue and is never silently dropped.
--
-- KEYS[1] due        ZSET
-- KEYS[2] msg        HASH id -> envelope (its Reason says why it is dead)
-- KEYS[3] inflight   ZSET
-- KEYS[4] dead       ZSET id -> time dead-lettered
-- KEYS[5] done       ZSET
-- KEYS[6] cancelled  HASH id -> routes whose cancel it was (as in park)
-- KEYS[7] counts     HASH per-route counts (counts.lua)
-- ARGV[1] now (integer unix ms): the dead-letter time
-- ARGV[2..] triples: id, envelope bytes, route; the caller bounds the batch.
-- Returns an array with one string per triple: "buried", or why it was refused (the
-- state the id is already in, as in park), so a replayed batch is neither counted nor
-- copied to the dead-letter target again.
-- hasRoute comes from routes.lua, cstart/cadd/cflush from counts.lua, which lua.go puts
-- in front of this script.
cstart(KEYS[7])
local out = {}
local n = 0
local now = ARGV[1]
for i = 2, #ARGV, 3 do
  local id = ARGV[i]
  local st
  n = n + 1
  if redis.call('ZSCORE', KEYS[5], id) then
    local routes = redis.call('HGET', KEYS[6], id)
    if not routes then
      st = 'delivered'
    elseif hasRoute(routes, ARGV[i + 2]) then
      st = 'cancelled'
    end
  end
  if not st then
    if redis.call('ZSCORE', KEYS[1], id) then
      st = 'pending'
    elseif redis.call('ZSCORE', KEYS[3], id) then
      st = 'inflight'
    elseif redis.call('ZSCORE', KEYS[4], id) then
      st = 'dead'
    else
      redis.call('HSET', KEYS[2], id, ARGV[i + 1])
      redis.call('ZADD', KEYS[4], now, id)
      cadd('dead', ARGV[i + 2], 1, now, id)
      st = 'buried'
    end
  end
  out[n] = st
end
cflush()
return out
