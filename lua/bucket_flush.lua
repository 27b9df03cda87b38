--- @include "bucket"
-- bucket_flush: move some of a shard's due buckets into due and inflight (bucket.lua's
-- hbflush), so that the readers that range over them by score see their messages; the
-- caller calls it until none is left, each call bounded.
--
-- KEYS[1] due  ZSET (the buckets' names are built from it; then the shard's slotguard)
-- ARGV[1] at most this many pending and this many claimed buckets per call
-- Returns how many buckets are left.
return hbflush(hbase(KEYS[1]), tonumber(ARGV[1]))
