--- @include "counts"
--- @include "index"
--- @include "cold"
-- cold_read: read a shard's cold tier (cold.lua) for browse, counts and edges; read-only.
--
-- KEYS[1] due   the shard's due key (the cold tier's keys are named after it)
-- (then the shard's slotguard, never written: slotguard.go)
-- ARGV[1] mode: "page", "count" or "edge"
-- ARGV[2] from: lowest due time (unix ms, inclusive)
-- ARGV[3] to: highest due time (inclusive)
-- page:  ARGV[4] cursor id: with it, only messages after (from, id) in (due, id) order
--        ("" = every message due at from or later); ARGV[5] limit.
--        Returns { id1, due1, env1, ... }: the first limit live messages in (due, id)
--        order. Whole buckets are read (a bucket's elements are in arrival order), from
--        the bucket of from on, until a bucket ends with limit messages found.
-- count: Returns the number of live messages due in [from, to]: LLEN - x<b> for a
--        bucket inside the range, a scan of the (at most two) buckets at its ends.
-- edge:  ARGV[4] "1" for the highest due time in [from, to], else the lowest.
--        Returns { due } or {} when there is none.
local co = costart(KEYS[1])
local mode, from, to = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local cb = co.base .. 'cb'
local lo = math.floor(from / CO_W)
local hi = math.floor(to / CO_W)

-- the bucket numbers that may hold dues in [from, to], ascending (a bucket's score is
-- its earliest due time or earlier, always inside the bucket's range)
local function buckets(rev)
  local args = { cb, string.format('%d', lo * CO_W), string.format('%d', (hi + 1) * CO_W - 1) }
  local cmd = 'ZRANGEBYSCORE'
  if rev then
    cmd, args[2], args[3] = 'ZREVRANGEBYSCORE', args[3], args[2]
  end
  return redis.call(cmd, unpack(args))
end

-- scan calls fn(id, due, env) for each live element of bucket b due in [from, to].
local function scan(b, fn)
  local key = cobkey(co, b)
  local n = redis.call('LLEN', key)
  for first = 0, n - 1, 1000 do
    local els = redis.call('LRANGE', key, first, first + 999)
    for i = 1, #els do
      local id, due, env = coparse(els[i], b)
      if id and due >= from and due <= to then
        fn(id, due, env)
      end
    end
  end
end

if mode == 'count' then
  local n = 0
  for _, m in ipairs(buckets(false)) do
    local b = tonumber(m)
    if b * CO_W >= from and (b + 1) * CO_W - 1 <= to then
      n = n + redis.call('LLEN', cobkey(co, b)) - (tonumber(redis.call('HGET', co.base .. 'cw', 'x' .. m)) or 0)
    else
      scan(b, function()
        n = n + 1
      end)
    end
  end
  return n
end

if mode == 'edge' then
  local high = ARGV[4] == '1'
  for _, m in ipairs(buckets(high)) do
    local best
    scan(tonumber(m), function(_, due)
      if not best or (high and due > best) or (not high and due < best) then
        best = due
      end
    end)
    if best then
      return { best }
    end
  end
  return {}
end

-- page
local cursor, limit = ARGV[4], tonumber(ARGV[5])
local items = {}
for _, m in ipairs(buckets(false)) do
  scan(tonumber(m), function(id, due, env)
    if cursor == '' or due > from or id > cursor then
      items[#items + 1] = { due, id, env }
    end
  end)
  if #items >= limit then
    break
  end
end
table.sort(items, function(a, b)
  return a[1] < b[1] or (a[1] == b[1] and a[2] < b[2])
end)
local out = {}
for i = 1, math.min(limit, #items) do
  out[#out + 1] = items[i][2]
  out[#out + 1] = items[i][1]
  out[#out + 1] = items[i][3]
end
return out
