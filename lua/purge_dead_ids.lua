--- @include "counts"
-- purge_dead_ids: delete chosen dead letters of one shard (a bulk purge job).
--
-- KEYS[1] dead  ZSET id -> time dead-lettered
-- KEYS[2] msg   HASH
-- KEYS[3] counts HASH per-route counts (includes/counts.lua)
-- ARGV[1..] id, dead-letter time pairs: an id is deleted only if it is still a dead
--           letter with that time (requeued, or dead-lettered again, since the caller
--           read it: left alone). At most a few hundred pairs per call.
-- Returns one flag per pair: 1 deleted, 0 left alone. Purged ids are not remembered in
-- done, as with purge_dead.
local cs = cstart(KEYS[3])
local out = {}
for i = 1, #ARGV, 2 do
  local id = ARGV[i]
  local at = redis.call('ZSCORE', KEYS[1], id)
  if at and tonumber(at) == tonumber(ARGV[i + 1]) then
    cadd(cs, 'dead', routeOf(redis.call('HGET', KEYS[2], id)), -1)
    redis.call('ZREM', KEYS[1], id)
    redis.call('HDEL', KEYS[2], id)
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
cflush(cs)
return out
