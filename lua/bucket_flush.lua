--- @include "bucket"
-- bucket_flush: move a shard's due buckets into due and inflight (bucket.lua's
-- hbflush), so that the readers that range over them by score see every message.
--
-- KEYS[1] due  ZSET (the buckets' names are built from it; then the shard's slotguard)
-- Returns the number of ids the shard's buckets held.
local base = hbase(KEYS[1])
local n = redis.call('HMGET', base .. 'hs', 'p', 'f')
hbflush(base)
return (tonumber(n[1]) or 0) + (tonumber(n[2]) or 0)
