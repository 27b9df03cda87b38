-- park: store a batch of messages in one shard, idempotently by id.
--
-- KEYS[1] due   ZSET id -> due time (unix ms)
-- KEYS[2] msg   HASH id -> envelope
-- KEYS[3] done  ZSET id -> time fired or cancelled (dedup window)
-- ARGV    triples: id, due (integer unix ms), envelope bytes; the caller bounds the
--         batch (at most a few hundred triples: ZADD gets them in one unpack).
-- Returns an array with one integer per triple: 1 parked, 0 duplicate.
--
-- An id already pending, in flight, dead or remembered in done is skipped, so an ingress
-- replay after a crash (or a producer retry) never duplicates or resurrects a message.
-- The same id twice in one batch: the first wins.
--
-- Every script keeps msg holding an envelope exactly for the ids in due, inflight or
-- dead, so HSETNX on msg is the test for those three states (one call instead of three
-- lookups; this is the hot path). Should an id sit in due without its envelope after
-- some corruption, parking it again simply repairs it.
local out = {}
local zadd = {}
local n = 0
for i = 1, #ARGV, 3 do
  local id = ARGV[i]
  n = n + 1
  out[n] = 0
  if not redis.call('ZSCORE', KEYS[3], id) and redis.call('HSETNX', KEYS[2], id, ARGV[i + 2]) == 1 then
    out[n] = 1
    zadd[#zadd + 1] = ARGV[i + 1]
    zadd[#zadd + 1] = id
  end
end
if #zadd > 0 then
  redis.call('ZADD', KEYS[1], unpack(zadd))
end
return out
