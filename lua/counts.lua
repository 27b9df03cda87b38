-- counts: the per-route counts helper, put in front of every script that moves messages
-- by lua.go (Redis scripts cannot include one another).
--
-- The shard's counts HASH (P:{C:n}:counts) holds "<state>:<route>" -> number of messages
-- of that route in that state (state pending, inflight or dead), changed in the same
-- script as the move, so it is exact at every moment. "~exact" = 1 says it covers every
-- message. Until then (a store written by an older bridge, being backfilled by
-- counts_backfill.lua) "~cur:<state>" = "<score>|<id>" is how far the backfill has
-- counted that state's sorted set, in (score, member) order ("+" = all of it): a script
-- changes a count only for a position the backfill has passed, and the backfill counts
-- the rest, so no message is counted twice or missed however the two interleave. No
-- cursor at all = nothing counted yet. The cold tier (cold.lua) is counted first, by
-- "~cur:cold" = "<bucket>:<position>" ("+" = all of it); a cold message promoted into
-- due while the backfill runs moves from one cursor's side to the other's, and the
-- promotion adjusts the count by the difference (cocounted, counted).
--
-- The route is read from the envelope (routeOf): version byte, flags, then for version
-- 2 the route, for version 1 the id and then the route, each a uvarint length + bytes.
-- An envelope that is missing or of an unknown version counts under route "".
local C = { exact = true, cur = {}, d = {}, key = nil }
local FIELD_SEP = ':' -- "<state>:<route>": a hash field, not a key name

local function uvarint(s, pos)
  local v, mul = 0, 1
  while true do
    local b = string.byte(s, pos)
    if not b then
      return nil, pos
    end
    pos = pos + 1
    if b < 128 then
      return v + b * mul, pos
    end
    v = v + (b - 128) * mul
    mul = mul * 128
  end
end

local function routeOf(env)
  if not env then
    return ''
  end
  local ver = string.byte(env, 1)
  local pos = 3
  local n
  if ver == 1 then
    n, pos = uvarint(env, pos)
    if not n then
      return ''
    end
    pos = pos + n
  elseif ver ~= 2 then
    return ''
  end
  n, pos = uvarint(env, pos)
  if not n then
    return ''
  end
  return string.sub(env, pos, pos + n - 1)
end

-- cstart reads the shard's counts state: one HGET once exact, as it stays.
local function cstart(key)
  C.key, C.exact, C.cur, C.d = key, true, {}, {}
  if redis.call('HGET', key, '~exact') then
    return
  end
  C.exact = false
  local v = redis.call('HMGET', key, '~cur:pending', '~cur:inflight', '~cur:dead', '~cur:cold')
  if v[4] == '+' then
    C.cur.cold = true
  elseif v[4] then
    local c = string.find(v[4], ':', 1, true)
    C.cur.cold = { tonumber(string.sub(v[4], 1, c - 1)), tonumber(string.sub(v[4], c + 1)) }
  end
  local states = { 'pending', 'inflight', 'dead' }
  for i = 1, 3 do
    local c = v[i]
    if c == '+' then
      C.cur[states[i]] = true
    elseif c then
      local bar = string.find(c, '|', 1, true)
      local sc = string.sub(c, 1, bar - 1)
      C.cur[states[i]] = { tonumber(sc), string.sub(c, bar + 1), sc }
    end
  end
end

-- lexle: a <= b bytewise, the order Redis keeps members of one score in (Lua's own
-- string comparison follows the server's locale).
local function lexle(a, b)
  local n = math.min(#a, #b)
  for i = 1, n do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then
      return x < y
    end
  end
  return #a <= #b
end

-- counted: whether the message at (score, id) of state's set is in the counts.
local function counted(state, score, id)
  if C.exact then
    return true
  end
  local c = C.cur[state]
  if c == true then
    return true
  end
  if not c or not score then
    return false
  end
  score = tonumber(score)
  return score < c[1] or (score == c[1] and lexle(id, c[2]))
end

-- cadd adds delta to route's count in state for the message at (score, id). score is
-- only read while the backfill runs (callers may pass nil once C.exact).
local function cadd(state, route, delta, score, id)
  if not C.exact and not counted(state, score, id) then
    return
  end
  local t = C.d[state]
  if not t then
    t = {}
    C.d[state] = t
  end
  t[route] = (t[route] or 0) + delta
end

-- cocounted: whether the cold message at position pos of bucket b is in the counts.
local function cocounted(b, pos)
  if C.exact or C.cur.cold == true then
    return true
  end
  local c = C.cur.cold
  return c ~= nil and (b < c[1] or (b == c[1] and pos < c[2]))
end

-- caddc is cadd for a cold message at position pos of bucket b (always state pending).
local function caddc(route, delta, b, pos)
  if not cocounted(b, pos) then
    return
  end
  local t = C.d.pending
  if not t then
    t = {}
    C.d.pending = t
  end
  t[route] = (t[route] or 0) + delta
end

-- cflush writes the accumulated changes: one HINCRBY per route and state touched.
local function cflush()
  for state, t in pairs(C.d) do
    for route, n in pairs(t) do
      if n ~= 0 then
        redis.call('HINCRBY', C.key, state .. FIELD_SEP .. route, n)
      end
    end
  end
  C.d = {}
end
