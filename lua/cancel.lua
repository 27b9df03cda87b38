-- cancel: remove a message by id wherever it is, and remember the id in done so that a
-- replayed ingress record cannot park it again.
--
-- KEYS[1] due       ZSET
-- KEYS[2] msg       HASH
-- KEYS[3] inflight  ZSET
-- KEYS[4] dead      ZSET
-- KEYS[5] done      ZSET
-- ARGV[1] id
-- ARGV[2] now (integer unix ms)
-- ARGV[3] remember: 1 to record the id in done, 0 when the dedup window is off
-- ARGV[4] trimBefore, ARGV[5] trimLimit: as in ack
-- Returns the state the id was in: "pending", "inflight", "dead", "done" (already fired
-- or cancelled: nothing changes) or "" (unknown).
--
-- An unknown id is remembered too: a cancel that overtakes its message (the cancel and
-- the delayed record on different partitions) still wins for the dedup window.
-- Cancelling an inflight message cannot recall a publish already under way; it only
-- makes its ack or retry a no-op.
local id = ARGV[1]
local prior = ''
if redis.call('ZREM', KEYS[1], id) == 1 then
  prior = 'pending'
elseif redis.call('ZREM', KEYS[3], id) == 1 then
  prior = 'inflight'
elseif redis.call('ZREM', KEYS[4], id) == 1 then
  prior = 'dead'
elseif redis.call('ZSCORE', KEYS[5], id) then
  return 'done'
end
redis.call('HDEL', KEYS[2], id)
if ARGV[3] == '1' then
  redis.call('ZADD', KEYS[5], ARGV[2], id)
end
local old = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', '(' .. ARGV[4], 'LIMIT', 0, ARGV[5])
for i = 1, #old do
  redis.call('ZREM', KEYS[5], old[i])
end
return prior
