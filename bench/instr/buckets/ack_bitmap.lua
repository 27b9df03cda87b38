-- ack (time-bucket probe, -ack bitmap): the done state is kept per in-flight bucket, not
-- per id: the caller, which holds the bucket under its lease, writes the bucket's whole
-- bitmap of acknowledged positions; a bucket acknowledged whole is remembered by name
-- for the done window (its ids' slots name it) and its elements go.
--
-- KEYS[1] counts  HASH
-- KEYS[2] hf      ZSET in-flight bucket name -> lease deadline
-- KEYS[3] hfn     HASH in-flight bucket name -> messages not yet acknowledged
-- KEYS[4] hd      ZSET bucket name -> when acknowledged whole (the done window's)
-- ARGV[1] key prefix, ARGV[2] now (unix ms)
-- ARGV[3] r: routes follow, each: route, messages
-- then triples of an in-flight bucket name, its messages acknowledged here and its bitmap
-- Returns how many buckets went.
local p = ARGV[1]
local r = tonumber(ARGV[3])
for j = 4, 3 + 2 * r, 2 do
  redis.call('HINCRBY', KEYS[1], 'inflight:' .. ARGV[j], -tonumber(ARGV[j + 1]))
end
local gone = 0
for j = 4 + 2 * r, #ARGV, 3 do
  local name = ARGV[j]
  if redis.call('HINCRBY', KEYS[3], name, -tonumber(ARGV[j + 1])) <= 0 then
    redis.call('HDEL', KEYS[3], name)
    redis.call('ZREM', KEYS[2], name)
    redis.call('DEL', p .. 'hf:' .. name, p .. 'ha:' .. name)
    redis.call('ZADD', KEYS[4], ARGV[2], name)
    gone = gone + 1
  else
    redis.call('SET', p .. 'ha:' .. name, ARGV[j + 2])
  end
end
return gone
