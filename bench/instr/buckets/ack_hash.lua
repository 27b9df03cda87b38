-- ack (time-bucket probe, -bucket hash): published messages' slots say delivered (as
-- ack.lua), and they leave their in-flight buckets by id; a bucket left empty is gone
-- (Redis deletes an empty hash) and leaves the in-flight set.
--
-- KEYS[1] counts, KEYS[2] hf, KEYS[3] unused, KEYS[4] kb: as ack.lua's
-- ARGV as ack.lua's, except that each in-flight bucket's name is followed by m and
-- its m ids acknowledged here.
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
while i <= #ARGV do
  local name, m = ARGV[i], tonumber(ARGV[i + 1])
  local key = p .. 'hf:' .. name
  redis.call('HDEL', key, unpack(ARGV, i + 2, i + 1 + m))
  if redis.call('EXISTS', key) == 0 then
    redis.call('ZREM', KEYS[2], name)
    gone = gone + 1
  end
  i = i + 2 + m
end
return gone
