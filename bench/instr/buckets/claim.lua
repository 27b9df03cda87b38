-- claim (time-bucket probe): the earliest bucket starting at or before upTo goes in
-- flight whole, renamed after the claim's lease deadline (which identifies the claim), so
-- that the caller reads its elements with an LRANGE (a HASH bucket: HGETALL) sent in the
-- same pipeline (no envelope enters Lua); a reply whose nextStart is at or before upTo says "claim again".
--
-- KEYS[1] counts  HASH
-- KEYS[2] hbs     ZSET bucket -> start
-- KEYS[3] owner   STRING "instance|token"
-- KEYS[4] hf      ZSET in-flight bucket name -> lease deadline
-- KEYS[5] hfn     HASH in-flight bucket name -> messages not yet acknowledged
-- ARGV[1] key prefix, ARGV[2] owner value, ARGV[3] upTo, ARGV[4] lease deadline,
-- ARGV[5] '1': count the bucket's messages in hfn (a LIST bucket; a HASH counts itself)
-- Returns { nextStart, bucket, n } (n messages in flight as hf:<deadline>), or
-- { nextStart } when no bucket starts by upTo; nextStart -1: none left.
if redis.call('GET', KEYS[3]) ~= ARGV[2] then
  return redis.error_reply('FENCED')
end
local p = ARGV[1]
local bs = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[3], 'LIMIT', '0', '1')
local out = { -1 }
local moved = {}
for _, b in ipairs(bs) do
  local name = ARGV[4]
  local rc = redis.call('HGETALL', p .. 'hbc:' .. b)
  local n = 0
  for j = 1, #rc, 2 do
    local c = tonumber(rc[j + 1])
    moved[rc[j]] = (moved[rc[j]] or 0) + c
    n = n + c
  end
  redis.call('RENAME', p .. 'hb:' .. b, p .. 'hf:' .. name)
  redis.call('DEL', p .. 'hbc:' .. b)
  if ARGV[5] == '1' then
    redis.call('HSET', KEYS[5], name, n)
  end
  redis.call('ZADD', KEYS[4], ARGV[4], name)
  redis.call('ZREM', KEYS[2], b)
  out[#out + 1] = tonumber(b)
  out[#out + 1] = n
end
for route, c in pairs(moved) do
  redis.call('HINCRBY', KEYS[1], 'pending:' .. route, -c)
  redis.call('HINCRBY', KEYS[1], 'inflight:' .. route, c)
end
local head = redis.call('ZRANGE', KEYS[2], '0', '0', 'WITHSCORES')
if head[2] then
  out[1] = tonumber(head[2])
end
return out
