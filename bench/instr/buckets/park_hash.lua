-- park (time-bucket probe, -bucket hash): as park.lua, but a bucket is a HASH of id ->
-- envelope, so an id is found in its bucket (get, cancel) by one HGET or HDEL.
--
-- KEYS, ARGV as park.lua's, except that each bucket's m elements are m id and envelope
-- pairs (2m arguments).
local p = ARGV[1]
local k = tonumber(ARGV[2])
for b = 0, k - 1 do
  local at = 3 + 4 * b
  if redis.call('BITCOUNT', p .. 'kb:' .. ARGV[at], ARGV[at + 1], ARGV[at + 2]) > 0 then
    return 'full'
  end
end
for b = 0, k - 1 do
  local at = 3 + 4 * b
  redis.call('SETRANGE', p .. 'kb:' .. ARGV[at], ARGV[at + 1], ARGV[at + 3])
end
local i = 3 + 4 * k
local r = tonumber(ARGV[i])
for j = i + 1, i + 2 * r, 2 do
  redis.call('HINCRBY', KEYS[1], 'pending:' .. ARGV[j], ARGV[j + 1])
end
i = i + 1 + 2 * r
while i <= #ARGV do
  local b, start, m = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  redis.call('HSET', p .. 'hb:' .. b, unpack(ARGV, i + 3, i + 2 + 2 * m))
  redis.call('ZADD', KEYS[2], start, b)
  i = i + 3 + 2 * m
  local q = tonumber(ARGV[i])
  for j = i + 1, i + 2 * q, 2 do
    redis.call('HINCRBY', p .. 'hbc:' .. b, ARGV[j], ARGV[j + 1])
  end
  i = i + 1 + 2 * q
end
return 'ok'
