-- ack (time-bucket probe): published messages' slots say delivered; their in-flight
-- buckets count them down and go when none is left.
--
-- KEYS[1] counts  HASH
-- KEYS[2] hf      ZSET in-flight bucket name -> lease deadline
-- KEYS[3] hfn     HASH in-flight bucket name -> messages not yet acknowledged
-- KEYS[4] kb      ZSET block name -> latest delivery (the trim's)
-- ARGV[1] key prefix, ARGV[2] now (unix ms)
-- ARGV[3] k: blocks follow, each: name, run count, then runs of first byte and slots
-- then r: routes follow, each: route, messages
-- then pairs of an in-flight bucket name and its messages acknowledged here
-- Returns how many buckets went.
local p = ARGV[1]
local k = tonumber(ARGV[3])
local i = 4
local names = {}
for _ = 1, k do
  local name, n = ARGV[i], tonumber(ARGV[i + 1])
  names[#names + 1] = ARGV[2]
  names[#names + 1] = name
  for j = i + 2, i + 2 * n, 2 do
    redis.call('SETRANGE', p .. 'kb:' .. name, ARGV[j], ARGV[j + 1])
  end
  i = i + 2 + 2 * n
end
if #names > 0 then
  redis.call('ZADD', KEYS[4], unpack(names))
end
local r = tonumber(ARGV[i])
for j = i + 1, i + 2 * r, 2 do
  redis.call('HINCRBY', KEYS[1], 'inflight:' .. ARGV[j], -tonumber(ARGV[j + 1]))
end
i = i + 1 + 2 * r
local gone = 0
for j = i, #ARGV, 2 do
  if redis.call('HINCRBY', KEYS[3], ARGV[j], -tonumber(ARGV[j + 1])) <= 0 then
    redis.call('HDEL', KEYS[3], ARGV[j])
    redis.call('ZREM', KEYS[2], ARGV[j])
    redis.call('DEL', p .. 'hf:' .. ARGV[j])
    gone = gone + 1
  end
end
return gone
