--- @include "envelope"
--- @include "num"
-- counts: the per-route counts helper, included by every script that moves messages.
--
-- The shard's counts HASH (P:{C:n}:counts) holds "<state>:<route>" -> number of messages
-- of that route in that state (state pending, inflight or dead), changed in the same
-- script as the move, so it is exact at every moment. A message's route is read from
-- its envelope (routeOf, envelope.lua).
local FIELD_SEP = ':' -- "<state>:<route>": a hash field, not a key name

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
        redis.call('HINCRBY', cs.key, state .. FIELD_SEP .. route, itoa(n))
      end
    end
  end
  cs.d = {}
end
