--- @include "routes"
--- @include "counts"
--- @include "index"
--- @include "successor"
--- @include "cold"
-- replace: store a batch of messages in one shard, each replacing the message its id
-- names on its route (x-delay-replace: upsert and debounce). docs/CONTRACT.md "Replace"
-- has the table of states and outcomes; storeapi.Intake.ReplaceEach the contract.
--
-- KEYS[1] due        ZSET id -> due time (unix ms)
-- KEYS[2] msg        HASH id -> envelope
-- KEYS[3] inflight   ZSET id -> lease deadline
-- KEYS[4] dead       ZSET id -> time dead-lettered
-- KEYS[5] done       ZSET, layout 2's done window (read, and a delivered id's entry
--                    dropped, while it exists)
-- KEYS[6] cancelled  HASH, layout 2's cancel routes
-- KEYS[7] counts     HASH per-route counts (counts.lua)
-- KEYS[8] ix         HASH the id index's state (index.lua)
-- KEYS[9] dn         ZSET the done slices (index.lua)
-- KEYS[10] nx        HASH id -> "<due>|<envelope>": successors (successor.lua)
-- ARGV[1] 1 when a replace of an in-flight message may keep a successor (every ack
--         promotes it: layout 3's ack), 0 when it is refused (layout 2 is written)
-- ARGV[2] now (integer unix ms)
-- ARGV[3] the cold horizon (ms), as in park; -1 puts every new version in due
-- ARGV[4..] quintuples: id, due (integer unix ms), envelope bytes, route, fp (12 bytes
--         of SHA-256(id)); the caller bounds the batch
-- Returns one string per quintuple, "<outcome>:<prior>": outcome "parked",
-- "replaced" or "refused", prior the state the id was in ("" unknown, "pending",
-- "inflight", "dead", "delivered", "cancelled").
--
-- Only deletes from the done window, never writes it, so it serves both layouts (a
-- cold message's index entry is its place, not a done state).
-- hasRoute comes from routes.lua, cstart/cadd/cflush/routeOf from counts.lua,
-- ixstart/ixget/ixdel/ixflush/doneOf from index.lua, nxget from successor.lua, co* from
-- cold.lua.
cstart(KEYS[7])
ixstart(KEYS[8], KEYS[9])
local legacy = redis.call('EXISTS', KEYS[5]) == 1
local succ = ARGV[1] == '1'
local now, horizon = tonumber(ARGV[2]), tonumber(ARGV[3])
if not C.exact then
  horizon = -1
end
costart(KEYS[1])
local out = {}
-- park puts a new version in due, or in the cold tier when it is due far enough ahead
-- and its id's index entry is free (free: none, or the cold place just emptied).
local function park(id, due, env, route, fp, free)
  if free and cocold(due, now, horizon) then
    ixset({ fp }, { coput(id, due, env, fp) })
  else
    redis.call('HSET', KEYS[2], id, env)
    redis.call('ZADD', KEYS[1], due, id)
  end
  cadd('pending', route, 1, due, id)
end
for i = 4, #ARGV, 5 do
  local id, due, env, route, fp = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  local res
  local old = redis.call('HGET', KEYS[2], id)
  local state, b, pos, cdue, cenv
  if not old then
    state = ixget({ fp })[1]
    b, pos, cdue, cenv = cofind(state, id)
  end
  if b then
    if routeOf(cenv) ~= route then
      res = 'refused:pending'
    else
      codrop(b, pos)
      caddc(route, -1, b, pos)
      if not cocold(due, now, horizon) then
        ixdel({ fp })
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
    if routeOf(old) ~= route or (prior == 'inflight' and not succ) then
      res = 'refused:' .. prior
    elseif prior == 'inflight' then
      redis.call('HSET', KEYS[10], id, due .. '|' .. env)
      res = 'replaced:inflight'
    else
      redis.call('ZREM', set, id)
      cadd(prior, route, -1, score, id)
      park(id, due, env, route, fp, false)
      res = 'replaced:' .. prior
    end
  else
    local t, routes = doneOf(state)
    local inix = t ~= nil
    if not t and legacy and redis.call('ZSCORE', KEYS[5], id) then
      t, routes = 1, redis.call('HGET', KEYS[6], id)
    end
    if t and routes and hasRoute(routes, route) then
      res = 'refused:cancelled'
    else
      res = 'parked:'
      if t and not routes then
        -- Delivered: the id starts anew (its done entry would say "delivered" to a
        -- duplicate of the new version).
        res = 'parked:delivered'
        if inix then
          ixdel({ fp })
        end
        if legacy then
          redis.call('ZREM', KEYS[5], id)
        end
      end
      -- A successor left behind by an ack of a release without successors (rolling
      -- back during a replace) must not outlive the message it was kept for.
      redis.call('HDEL', KEYS[10], id)
      park(id, due, env, route, fp, not state or (inix and not routes))
    end
  end
  out[#out + 1] = res
end
cflush()
ixflush()
return out
