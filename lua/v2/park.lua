-- park: store a batch of messages in one shard, idempotently by id.
--
-- KEYS[1] due        ZSET id -> due time (unix ms)
-- KEYS[2] msg        HASH id -> envelope
-- KEYS[3] inflight   ZSET id -> lease deadline
-- KEYS[4] dead       ZSET id -> time dead-lettered
-- KEYS[5] done       ZSET id -> time delivered or cancelled (dedup window)
-- KEYS[6] cancelled  HASH id -> routes whose cancel it was ("<length>:<route>" each),
--                    for the done ids that were cancelled rather than delivered
-- KEYS[7] counts     HASH per-route counts (counts.lua)
-- ARGV    quadruples: id, due (integer unix ms), envelope bytes, route; the caller
--         bounds the batch (at most a few hundred: ZADD gets them in one unpack).
-- Returns an array with one string per quadruple: "parked", or why it was refused:
-- the state the id is already in, "pending", "inflight", "dead", "delivered" or
-- "cancelled".
--
-- An id already pending, in flight, dead or remembered in done is skipped, so an ingress
-- replay after a crash (or a producer retry) never duplicates or resurrects a message.
-- The same id twice in one batch: the first wins (the second reads "pending").
-- Cancels are scoped to a route: a tombstone left by another route's cancel (a cancel
-- that arrived before its message) does not stop this route's message.
--
-- Every script keeps msg holding an envelope exactly for the ids in due, inflight or
-- dead, so HSETNX on msg is the test for those three states (one call instead of three
-- lookups; this is the hot path: a new id costs one ZSCORE and one HSETNX). Should an id
-- sit in due without its envelope after some corruption, parking it again repairs it.
-- hasRoute comes from routes.lua, cstart/cadd/cflush from counts.lua, which lua.go puts
-- in front of this script.
cstart(KEYS[7])
local out = {}
local zadd = {}
local n = 0
for i = 1, #ARGV, 4 do
  local id = ARGV[i]
  local st
  n = n + 1
  if redis.call('ZSCORE', KEYS[5], id) then
    local routes = redis.call('HGET', KEYS[6], id)
    if not routes then
      st = 'delivered'
    elseif hasRoute(routes, ARGV[i + 3]) then
      st = 'cancelled'
    end
  end
  if not st then
    if redis.call('HSETNX', KEYS[2], id, ARGV[i + 2]) == 1 then
      st = 'parked'
      cadd('pending', ARGV[i + 3], 1, ARGV[i + 1], id)
      zadd[#zadd + 1] = ARGV[i + 1]
      zadd[#zadd + 1] = id
    elseif redis.call('ZSCORE', KEYS[3], id) then
      st = 'inflight'
    elseif redis.call('ZSCORE', KEYS[4], id) then
      st = 'dead'
    else
      st = 'pending' -- in due, or earlier in this batch (its ZADD comes below)
    end
  end
  out[n] = st
end
if #zadd > 0 then
  redis.call('ZADD', KEYS[1], unpack(zadd))
end
cflush()
return out
