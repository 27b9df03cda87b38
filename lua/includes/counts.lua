-- counts: the per-route counts helper, put in front of every script that moves messages
-- by lua.go (Redis scripts cannot include one another).
--
-- The shard's counts HASH (P:{C:n}:counts) holds "<state>:<route>" -> number of messages
-- of that route in that state (state pending, inflight or dead), changed in the same
-- script as the move, so it is exact at every moment.
--
-- The route is read from the envelope (routeOf): version byte, flags, then the route as
-- a uvarint length + bytes. An envelope that is missing or of an unknown version counts
-- under route "".
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
  if not env or string.byte(env, 1) ~= 2 then
    return ''
  end
  local n, pos = uvarint(env, 3)
  if not n then
    return ''
  end
  return string.sub(env, pos, pos + n - 1)
end

-- cstart returns the call's counts state cs, which cadd and cflush take: the shard's
-- counts key and the changes not yet written. Nothing is read.
local function cstart(key)
  return { key = key, d = {} }
end

-- cadd adds delta to route's count in state.
local function cadd(cs, state, route, delta)
  local t = cs.d[state]
  if not t then
    t = {}
    cs.d[state] = t
  end
  t[route] = (t[route] or 0) + delta
end

-- cflush writes the accumulated changes: one HINCRBY per route and state touched.
local function cflush(cs)
  for state, t in pairs(cs.d) do
    for route, n in pairs(t) do
      if n ~= 0 then
        redis.call('HINCRBY', cs.key, state .. FIELD_SEP .. route, n)
      end
    end
  end
  cs.d = {}
end
