-- counts_backfill: one bounded step of counting a shard written by an older bridge
-- (without the counts hash); counts.lua, which lua.go puts in front of this script,
-- says how the counts and cursors work.
--
-- KEYS[1] due       ZSET
-- KEYS[2] msg       HASH
-- KEYS[3] inflight  ZSET
-- KEYS[4] dead      ZSET
-- KEYS[5] counts    HASH "<state>:<route>" -> count; "~exact", "~cur:<state>"
-- ARGV[1] limit: count at most this many messages in this call
-- Returns { exact, counted }: exact = 1 once the counts cover the whole shard (then
-- "~exact" is set and the cursors are gone; further calls do nothing).
--
-- Each call continues the first set not finished (pending, then in flight, then dead)
-- after its cursor, reads the envelopes of the next members for their routes, adds them
-- and moves the cursor past them, all in one call, so a message that moves meanwhile
-- is counted exactly once (see counts.lua).
cstart(KEYS[5])
if C.exact then
  return { 1, 0 }
end
local sets = { { 'pending', KEYS[1] }, { 'inflight', KEYS[3] }, { 'dead', KEYS[4] } }
local limit = tonumber(ARGV[1])
local done = 0
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
      local t = {}
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
if C.cur.pending == true and C.cur.inflight == true and C.cur.dead == true then
  redis.call('HDEL', KEYS[5], '~cur:pending', '~cur:inflight', '~cur:dead')
  redis.call('HSET', KEYS[5], '~exact', 1)
  return { 1, done }
end
return { 0, done }
