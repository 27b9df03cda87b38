-- park (time-bucket probe, -bucket listpos): as park.lua, but each id's slot also holds
-- its element's position in its bucket, so that a cancel finds the element with one
-- LINDEX (as the cold tier's index entries hold theirs): the buckets are appended first,
-- and the slots are built here from the positions RPUSH gives.
--
-- KEYS as park.lua's.
-- ARGV[1] the key prefix, ARGV[2] 'list'
-- ARGV[3] k: block spans follow, each: block name, first byte, last byte, the slots'
--         record hashes (6 bytes each, in offset order), then for each of those slots
--         its bucket's number in this call (1-based) and its place among that bucket's
--         messages here (0-based), two bytes each, big endian
-- then r routes (as park.lua), then per bucket: number, start, m, m elements, routes
local p = ARGV[1]
local k = tonumber(ARGV[3])
for b = 0, k - 1 do
  local at = 4 + 5 * b
  if redis.call('BITCOUNT', p .. 'kb:' .. ARGV[at], ARGV[at + 1], ARGV[at + 2]) > 0 then
    return 'full'
  end
end
local i = 4 + 5 * k
local r = tonumber(ARGV[i])
for j = i + 1, i + 2 * r, 2 do
  redis.call('HINCRBY', KEYS[1], 'pending:' .. ARGV[j], ARGV[j + 1])
end
i = i + 1 + 2 * r
local base, num = {}, {} -- per bucket of the call: its first element's position, its number
while i <= #ARGV do
  local b, start, m = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  base[#base + 1] = redis.call('RPUSH', p .. 'hb:' .. b, unpack(ARGV, i + 3, i + 2 + m)) - m
  num[#num + 1] = tonumber(b) % 1024
  redis.call('ZADD', KEYS[2], start, b)
  i = i + 3 + m
  local q = tonumber(ARGV[i])
  for j = i + 1, i + 2 * q, 2 do
    redis.call('HINCRBY', p .. 'hbc:' .. b, ARGV[j], ARGV[j + 1])
  end
  i = i + 1 + 2 * q
end
local pack, unpk, sub = struct.pack, struct.unpack, string.sub
for b = 0, k - 1 do
  local at = 4 + 5 * b
  local hashes, places = ARGV[at + 3], ARGV[at + 4]
  local slots = {}
  for s = 0, #hashes / 6 - 1 do
    local g, j = unpk('>HH', places, 4 * s + 1)
    slots[s + 1] = sub(hashes, 6 * s + 1, 6 * s + 6) .. pack('>I4', 2147483648 + num[g] * 2097152 + base[g] + j)
  end
  redis.call('SETRANGE', p .. 'kb:' .. ARGV[at], ARGV[at + 1], table.concat(slots))
end
return 'ok'
