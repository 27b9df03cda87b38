-- bury: store a batch of invalid messages straight into the dead letters of one shard,
-- idempotently by id (same rules as park), so bad input never blocks a partition or a
-- queue and is never silently dropped.
--
-- KEYS[1] due       ZSET
-- KEYS[2] msg       HASH id -> envelope (its Reason says why it is dead)
-- KEYS[3] inflight  ZSET
-- KEYS[4] dead      ZSET id -> time dead-lettered
-- KEYS[5] done      ZSET
-- ARGV[1] now (integer unix ms): the dead-letter time
-- ARGV[2..] pairs: id, envelope bytes; the caller bounds the batch.
-- Returns an array with one integer per pair: 1 buried, 0 duplicate.
local out = {}
local n = 0
local now = ARGV[1]
for i = 2, #ARGV, 2 do
  local id = ARGV[i]
  n = n + 1
  if redis.call('ZSCORE', KEYS[1], id) or redis.call('ZSCORE', KEYS[3], id)
      or redis.call('ZSCORE', KEYS[4], id) or redis.call('ZSCORE', KEYS[5], id) then
    out[n] = 0
  else
    redis.call('ZADD', KEYS[4], now, id)
    redis.call('HSET', KEYS[2], id, ARGV[i + 1])
    out[n] = 1
  end
end
return out
