--- @include "counts"
--- @include "index"
--- @include "cold"
-- counts_backfill: one bounded step of counting a shard written by an older bridge
-- (without the counts hash); counts.lua, which lua.go puts in front of this script,
-- says how the counts and cursors work.
--
-- KEYS[1] due       ZSET
-- KEYS[2] msg       HASH
-- KEYS[3] inflight  ZSET
-- KEYS[4] dead      ZSET
-- KEYS[5] counts    HASH "<state>:<route>" -> count; "~exact", "~cur:<state>"
-- KEYS[6] the shard's slotguard (slotguard.go): the cold tier's buckets are named here
-- ARGV[1] limit: count at most this many messages in this call
-- Returns { exact, counted }: exact = 1 once the counts cover the whole shard (then
-- "~exact" is set and the cursors are gone; further calls do nothing).
--
-- Each call continues the first set not finished (the cold tier, pending, then in
-- flight, then dead)
-- after its cursor, reads the envelopes of the next members for their routes, adds them
-- and moves the cursor past them, all in one call, so a message that moves meanwhile
-- is counted exactly once (see counts.lua).
cstart(KEYS[5])
if C.exact then
  return { 1, 0 }
end
costart(KEYS[1])
local limit = tonumber(ARGV[1])
local done = 0
-- The cold tier first (cold.lua): its buckets in order, from the cursor's position. No
-- message goes cold until the counts are exact, so a bucket the cursor passed gets no
-- new element.
while C.cur.cold ~= true and done < limit do
  local c = C.cur.cold or { 0, 0 }
  local h = redis.call('ZRANGEBYSCORE', CO.base .. 'cb', string.format('%d', c[1] * CO_W), '+inf', 'LIMIT', 0, 1)
  if #h == 0 then
    C.cur.cold = true
    redis.call('HSET', KEYS[5], '~cur:cold', '+')
    break
  end
  local b, from = tonumber(h[1]), 0
  if b == c[1] then
    from = c[2]
  end
  local want = limit - done
  local els = redis.call('LRANGE', cobkey(b), from, from + want - 1)
  local t = C.d.pending or {}
  C.d.pending = t
  for i = 1, #els do
    local id, _, env = coparse(els[i], b)
    if id then
      t[routeOf(env)] = (t[routeOf(env)] or 0) + 1
    end
  end
  done = done + #els
  if #els < want then
    C.cur.cold = { b + 1, 0 } -- read to its end
  else
    C.cur.cold = { b, from + #els }
  end
  redis.call('HSET', KEYS[5], '~cur:cold', string.format('%d:%d', C.cur.cold[1], C.cur.cold[2]))
end
local sets = { { 'pending', KEYS[1] }, { 'inflight', KEYS[3] }, { 'dead', KEYS[4] } }
for _, st in ipairs(sets) do
  local state, key = st[1], st[2]
  local c = C.cur[state]
  if c ~= true and done < limit then
    local start = 0
    if c then
      -- first rank after (c[1], c[2]) in (score, member) order
      local lo = redis.call('ZCOUNT', key, '-inf', '(' .. c[3])
      local hi = lo + redis.call('ZCOUNT', key, c[3], c[3])
      while lo < hi do
        local mid = math.floor((lo + hi) / 2)
        if lexle(redis.call('ZRANGE', key, mid, mid)[1], c[2]) then
          lo = mid + 1
        else
          hi = mid
        end
      end
      start = lo
    end
    local want = limit - done
    local page = redis.call('ZRANGE', key, start, start + want - 1, 'WITHSCORES')
    local n = #page / 2
    if n > 0 then
      local ids = {}
      for i = 1, n do
        ids[i] = page[2 * i - 1]
      end
      local envs = redis.call('HMGET', KEYS[2], unpack(ids))
      local t = C.d[state] or {} -- pending: the cold tier's counts of this call too
      C.d[state] = t
      for i = 1, n do
        local r = routeOf(envs[i])
        t[r] = (t[r] or 0) + 1
      end
      done = done + n
    end
    if n < want then
      redis.call('HSET', KEYS[5], '~cur:' .. state, '+')
      C.cur[state] = true
    else
      redis.call('HSET', KEYS[5], '~cur:' .. state, page[2 * n] .. '|' .. page[2 * n - 1])
    end
  end
end
cflush()
if C.cur.cold == true and C.cur.pending == true and C.cur.inflight == true and C.cur.dead == true then
  redis.call('HDEL', KEYS[5], '~cur:pending', '~cur:inflight', '~cur:dead', '~cur:cold')
  redis.call('HSET', KEYS[5], '~exact', 1)
  return { 1, done }
end
return { 0, done }
