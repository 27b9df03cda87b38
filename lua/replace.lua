--- @include "routes"
--- @include "counts"
--- @include "index"
--- @include "successor"
--- @include "cold"
--- @include "bucket"
-- replace: store a batch of messages in one shard, each replacing the message its id
-- names on its route (x-delay-replace: upsert and debounce). docs/CONTRACT.md "Replace"
-- has the table of states and outcomes; storeapi.Intake.ReplaceEach the contract.
--
-- KEYS[1] due        ZSET id -> due time (unix ms)
-- KEYS[2] msg        HASH id -> envelope
-- KEYS[3] inflight   ZSET id -> lease deadline
-- KEYS[4] dead       ZSET id -> time dead-lettered
-- KEYS[5] counts     HASH per-route counts (counts.lua)
-- KEYS[6] ix         HASH the id index's state (index.lua)
-- KEYS[7] dn         ZSET the done slices (index.lua)
-- KEYS[8] nx         HASH id -> "<due>|<envelope>": successors (successor.lua)
-- ARGV[1] now (integer unix ms)
-- ARGV[2] the cold horizon (ms), as in park; -1 puts every new version in due
-- ARGV[3..] quintuples: id, due (integer unix ms), envelope bytes, route, fp (12 bytes
--         of SHA-256(id)); the caller bounds the batch
-- Returns one string per quintuple, "<outcome>:<prior>": outcome "parked",
-- "replaced" or "refused", prior the state the id was in ("" unknown, "pending",
-- "inflight", "dead", "delivered", "cancelled").
--
-- Only deletes from the done window, never writes it (a cold message's index entry is
-- its place, not a done state).
-- hasRoute comes from routes.lua, cstart/cadd/cflush/routeOf from counts.lua,
-- ixstart/ixget/ixdel/ixflush/doneOf from index.lua, nxget from successor.lua, co* from
-- cold.lua.
local cs = cstart(KEYS[5])
local ix = ixstart(KEYS[6], KEYS[7])
local now, horizon = tonumber(ARGV[1]), tonumber(ARGV[2])
local co = costart(KEYS[1])
local out = {}
-- park puts a new version in due, or in the cold tier when it is due far enough ahead
-- and its id's index entry is free (free: none, or the cold place just emptied).
local function park(id, due, env, route, fp, free)
  if free and cocold(co, due, now, horizon) then
    ixset(ix, { fp }, { coput(co, id, due, env, fp) })
  else
    redis.call('HSET', KEYS[2], id, env)
    redis.call('ZADD', KEYS[1], due, id)
  end
  cadd(cs, 'pending', route, 1)
end
for i = 3, #ARGV, 5 do
  local id, due, env, route, fp = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local res
  local old = redis.call('HGET', KEYS[2], id)
  if old then
    hbout(co.base, id, old) -- a bucketed message is replaced as one in due or inflight
  end
  local state, b, pos, cdue, cenv
  if not old then
    state = ixget(ix, { fp })[1]
    b, pos, cdue, cenv = cofind(co, state, id)
  end
  if b then
    if routeOf(cenv) ~= route then
      res = 'refused:pending'
    else
      codrop(co, b, pos)
      cadd(cs, 'pending', route, -1)
      if not cocold(co, due, now, horizon) then
        ixdel(ix, { fp })
      end
      park(id, due, env, route, fp, true)
      res = 'replaced:pending'
    end
  elseif old then
    local prior, set, score = 'pending', KEYS[1], redis.call('ZSCORE', KEYS[1], id)
    if not score then
      score = redis.call('ZSCORE', KEYS[3], id)
      prior, set = 'inflight', KEYS[3]
      if not score then
        score = redis.call('ZSCORE', KEYS[4], id)
        prior, set = 'dead', KEYS[4]
      end
    end
    if routeOf(old) ~= route then
      res = 'refused:' .. prior
    elseif prior == 'inflight' then
      redis.call('HSET', KEYS[8], id, due .. '|' .. env)
      res = 'replaced:inflight'
    else
      redis.call('ZREM', set, id)
      cadd(cs, prior, route, -1)
      park(id, due, env, route, fp, false)
      res = 'replaced:' .. prior
    end
  else
    local t, routes = doneOf(state)
    if t and routes and hasRoute(routes, route) then
      res = 'refused:cancelled'
    else
      res = 'parked:'
      if t and not routes then
        -- Delivered: the id starts anew (its done entry would say "delivered" to a
        -- duplicate of the new version).
        res = 'parked:delivered'
        ixdel(ix, { fp })
      end
      park(id, due, env, route, fp, not state or (t and not routes))
    end
  end
  out[#out + 1] = res
end
cflush(cs)
ixflush(ix)
return out
