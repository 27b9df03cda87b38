-- park (time-bucket probe): a batch of new Kafka default ids, grouped by the caller
-- into due-time buckets, appended to the buckets as they come. Nothing per message
-- runs in Lua: every argument is handed to a command whole or by unpack.
--
-- KEYS[1] counts  HASH  <state>:<route> -> messages
-- KEYS[2] hbs     ZSET  bucket number -> its start (unix ms): the buckets holding messages
-- ARGV[1] the key prefix of the shard's buckets, slots and bucket counts
-- ARGV[2] the kind of bucket: 'list' (a LIST of elements) or 'hash' (a HASH of id ->
--         envelope, so that an id is found in its bucket by one HGET or HDEL)
-- ARGV[3] k: block spans follow, each: block name, first byte, last byte, the slots'
--         bytes (written: the record hash and the bucket, high bit set: "pending there")
-- then r: per-route totals follow, each: route, messages
-- then per bucket: number, start, m, then its m messages (a list: m elements, id length,
--         id and envelope, built by the caller; a hash: m id and envelope pairs), then
--         its routes: q, then q pairs of route and messages
-- Returns 'full' when a slot of a span is set (an id already known: the caller sends the
-- batch on the path that decides id by id), else 'ok'.
local p, hash = ARGV[1], ARGV[2] == 'hash'
local k = tonumber(ARGV[3])
for b = 0, k - 1 do
  local at = 4 + 4 * b
  if redis.call('BITCOUNT', p .. 'kb:' .. ARGV[at], ARGV[at + 1], ARGV[at + 2]) > 0 then
    return 'full'
  end
end
for b = 0, k - 1 do
  local at = 4 + 4 * b
  redis.call('SETRANGE', p .. 'kb:' .. ARGV[at], ARGV[at + 1], ARGV[at + 3])
end
local i = 4 + 4 * k
local r = tonumber(ARGV[i])
for j = i + 1, i + 2 * r, 2 do
  redis.call('HINCRBY', KEYS[1], 'pending:' .. ARGV[j], ARGV[j + 1])
end
i = i + 1 + 2 * r
while i <= #ARGV do
  local b, start, m = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  if hash then
    redis.call('HSET', p .. 'hb:' .. b, unpack(ARGV, i + 3, i + 2 + 2 * m))
    i = i + 3 + 2 * m
  else
    redis.call('RPUSH', p .. 'hb:' .. b, unpack(ARGV, i + 3, i + 2 + m))
    i = i + 3 + m
  end
  redis.call('ZADD', KEYS[2], start, b)
  local q = tonumber(ARGV[i])
  for j = i + 1, i + 2 * q, 2 do
    redis.call('HINCRBY', p .. 'hbc:' .. b, ARGV[j], ARGV[j + 1])
  end
  i = i + 1 + 2 * q
end
return 'ok'
