-- ack (time-bucket probe): published messages' slots say delivered (when the caller
-- sends their runs), and they leave their in-flight buckets: a LIST bucket counts them
-- down and goes when none is left; a HASH bucket loses their ids, and Redis deletes it
-- once empty.
--
-- KEYS[1] counts  HASH
-- KEYS[2] hf      ZSET in-flight bucket name -> lease deadline
-- KEYS[3] hfn     HASH in-flight bucket name -> messages not yet acknowledged (a list's)
-- KEYS[4] kb      ZSET block name -> latest delivery (the trim's)
-- ARGV[1] key prefix, ARGV[2] now (unix ms), ARGV[3] the kind of bucket, 'list' or 'hash'
-- ARGV[4] k: blocks follow, each: name, run count, then runs of first byte and slots
-- then r: routes follow, each: route, messages
-- then per in-flight bucket: its name and how many of its messages are acknowledged
--         here, m (a hash: then their m ids)
-- Returns how many buckets went.
local p, hash = ARGV[1], ARGV[3] == 'hash'
local k = tonumber(ARGV[4])
local i = 5
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
while i <= #ARGV do
  local name, m = ARGV[i], tonumber(ARGV[i + 1])
  local left
  if hash then
    local key = p .. 'hf:' .. name
    redis.call('HDEL', key, unpack(ARGV, i + 2, i + 1 + m))
    left = redis.call('EXISTS', key)
    i = i + 2 + m
  else
    left = redis.call('HINCRBY', KEYS[3], name, -m)
    if left <= 0 then
      redis.call('HDEL', KEYS[3], name)
      redis.call('DEL', p .. 'hf:' .. name)
    end
    i = i + 2
  end
  if left <= 0 then
    redis.call('ZREM', KEYS[2], name)
    gone = gone + 1
  end
end
return gone
