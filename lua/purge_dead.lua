-- purge_dead: delete dead letters of one shard, in bounded steps.
--
-- KEYS[1] dead      ZSET
-- KEYS[2] msg       HASH
-- ARGV[1] limit: delete at most this many per call
-- Returns { purged, more } with more = 1 when dead letters remain.
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
for i = 1, #ids do
  redis.call('ZREM', KEYS[1], ids[i])
  redis.call('HDEL', KEYS[2], ids[i])
end
return { #ids, redis.call('ZCARD', KEYS[1]) > 0 and 1 or 0 }
