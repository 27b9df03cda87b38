--- @include "counts"
-- purge_dead: delete dead letters of one shard, in bounded steps.
--
-- KEYS[1] dead      ZSET
-- KEYS[2] msg       HASH
-- KEYS[3] counts    HASH per-route counts (includes/counts.lua)
-- ARGV[1] limit: delete at most this many per call
-- Returns { purged, more } with more = 1 when dead letters remain.
local cs = cstart(KEYS[3])
local page = redis.call('ZRANGE', KEYS[1], '0', itoa(tonumber(ARGV[1]) - 1), 'WITHSCORES')
local ids = {}
for i = 1, #page, 2 do
  ids[#ids + 1] = page[i]
end
if #ids > 0 then
  local envs = redis.call('HMGET', KEYS[2], unpack(ids))
  for i = 1, #ids do
    redis.call('ZREM', KEYS[1], ids[i])
    redis.call('HDEL', KEYS[2], ids[i])
    cadd(cs, 'dead', routeOf(envs[i]), -1)
  end
  cflush(cs)
end
return { #ids, redis.call('ZCARD', KEYS[1]) > 0 and 1 or 0 }
