--- @include "routes"
--- @include "counts"
--- @include "index"
--- @include "cold"
--- @include "bucket"
-- park: store a batch of messages in one shard, idempotently by id.
--
-- KEYS[1] due        ZSET id -> due time (unix ms)
-- KEYS[2] msg        HASH id -> envelope
-- KEYS[3] inflight   ZSET id -> lease deadline
-- KEYS[4] dead       ZSET id -> time dead-lettered
-- KEYS[5] counts     HASH per-route counts (counts.lua)
-- KEYS[6] ix         HASH the id index's state (index.lua); its sub-hashes hold the
--                    done window: fp -> delivered or cancelled state
-- KEYS[7] dn         ZSET the done slices (index.lua)
-- KEYS[8] owner      STRING "instance|token", the shard's lease (read only when ARGV[6]
--                    > 0; ordered_park, which never claims, passes its own keys from 8 on)
-- ARGV[1] now (integer unix ms)
-- ARGV[2] the cold horizon (ms): a message due at least this far ahead (and not
--         before the cold tier's watermark) is parked in the cold tier (cold.lua); -1
--         parks every message in due (the cold tier is off, the batch holds ordered
--         messages, or none of it is due a horizon ahead)
-- ARGV[3] k: how many block spans follow (0: none). k > 0 is the caller's word that
--         every id of the batch is of the Kafka default form, no two the same, and that
--         the spans below cover the slots of all of them; it makes the call quick-only:
--         its messages come laid out for parkquick (below) without their fps, which
--         parks them all, or the call writes nothing and returns 'full' (the caller
--         sends the batch again with k = 0 and the fps)
-- ARGV[4] the owner value "instance|token" the caller holds the shard's lease with
-- ARGV[5] a lease deadline (unix ms) that identifies this call among the shard's claims
-- ARGV[6] c: the first c messages are claimed as they are parked, when KEYS[8] holds
--         ARGV[4]: a new one goes in flight under ARGV[5] instead of due (the caller
--         holds it from now on: due within its lookahead or park-claim horizon, and
--         never cold, whatever the cold horizon); 0: none
-- ARGV[7..6+3k] spans: block name, first byte, last byte (text) of the block's slots
--         (index.lua's "kb" strings) that the batch's ids occupy
-- ARGV[7+3k..] k = 0: quintuples: id, due (integer unix ms), envelope bytes, route, fp
--         (12 bytes of SHA-256(id)). k > 0 (n messages, the first c claimed): r, then r
--         triples of a route and its messages going pending and in flight; n pairs of
--         id and envelope; the due times of the other n - c (the claimed ones go in
--         flight under ARGV[5]); between the routes and the pairs, the due buckets
--         (bucket.lua): g, then per bucket its number b, how many of the batch's last
--         messages are its (the buckets in rising order, each one's together), their
--         envelopes' bytes, k and k pairs of a route and how many of them are its.
--         A bucket at or below the highest claimed, or that would pass HB_CAP, is not
--         written: its messages go to due. Each id is sent once: its command arguments are built
--         in Lua from it, cheaper than a second copy's way into Lua (every string
--         entering Lua is hashed whole). The caller bounds the batch (at most a few
--         hundred: each command gets them in one unpack).
-- Returns the refused messages only, a flat array of position (1-based) and why:
-- the state the id is already in, "pending", "inflight", "dead", "delivered" or
-- "cancelled"; every message it does not name was parked (an empty array: all were).
-- A short reply: most calls refuse nothing. When the first c were claimed (the lease
-- is held), one more element follows the pairs: 1; each of the c not named went in
-- flight (or was in flight under ARGV[5] already: the same call sent again). Without
-- it none did: the lease moved on, they are pending.
--
-- An id already pending, in flight, dead or remembered in the done window is skipped,
-- so an ingress replay after a crash (or a producer retry) never duplicates or
-- resurrects a message. The same id twice in one batch: the first wins (the second
-- reads "pending"). Cancels are scoped to a route: a tombstone left by another route's
-- cancel (a cancel that arrived before its message) does not stop this route's message.
--
-- Every script keeps msg holding an envelope exactly for the ids in due, inflight or
-- dead, so one HMGET of msg for the batch is the test for those three states, and one
-- HSET stores the new envelopes. The done window is read by ixget (index.lua).
-- A message parked in the cold tier is an element of one RPUSH per bucket and one index
-- entry; its id is looked for in msg first (the same HMGET), so an id in flight or dead
-- is refused as before.
-- hasRoute comes from routes.lua, cstart/cadd/cflush from counts.lua, ixstart/ixget/
-- doneOf from index.lua, co* from cold.lua, which this script includes.
local cs = cstart(KEYS[5])
local ix = ixstart(KEYS[6], KEYS[7])
local first = 7 + 3 * tonumber(ARGV[3])
-- claimUpTo: quintuples at positions up to this one go in flight (0: none)
local claimUpTo = tonumber(ARGV[6])
if claimUpTo > 0 and redis.call('GET', KEYS[8]) ~= ARGV[4] then
  claimUpTo = 0
end
local deadline = ARGV[5]
-- reply ends a reply of refused pairs with the mark of a claim made.
local function reply(out)
  if claimUpTo > 0 then
    out[#out + 1] = 1
  end
  return out
end
-- parkwrite stores what the call decided to park: the new envelopes (hset: id and
-- envelope pairs), their due entries (zadd) or in-flight entries (zin: score and id
-- pairs), and the per-route counts of what went pending (pend) and in flight (fly).
-- Both paths below end with it; the caller flushes the counts (cflush).
local function parkwrite(hset, zadd, zin, pend, fly)
  if #hset > 0 then
    redis.call('HSET', KEYS[2], unpack(hset))
  end
  if #zadd > 0 then
    redis.call('ZADD', KEYS[1], unpack(zadd))
  end
  if #zin > 0 then
    redis.call('ZADD', KEYS[3], unpack(zin))
  end
  for route, k in pairs(pend) do
    cadd(cs, 'pending', route, k)
  end
  for route, k in pairs(fly) do
    cadd(cs, 'inflight', route, k)
  end
end
-- parkquick parks the whole batch of a quick-only call (k > 0) at once and returns
-- true when no id of it can be refused, which it proves without looking at any id
-- alone: none has an envelope (one HMGET, as below), none is delivered (every slot the
-- spans cover is empty: one BITCOUNT per block, counted in C; no string of the slots
-- enters Lua), none has an index entry (no block is marked: kbmark.lua), none is twice
-- in the batch and none goes cold (the caller's word: k > 0, horizon -1). Otherwise, or
-- when the call asked to claim and the lease moved on, it writes nothing and the caller
-- sends the batch again for the full path below, which decides id by id. Its arguments
-- are laid out for the commands (ARGV[7+3k..] in the header): HSET takes the pairs as
-- they come, and the Lua per message only lists the ids for HMGET and ZADD and tests
-- HMGET's reply: about a third of park's instructions, and the fps it never reads are
-- not sent (docs/ARCHITECTURE.md).
local function parkquick()
  local k = tonumber(ARGV[3])
  if tonumber(ARGV[6]) ~= claimUpTo then
    return false
  end
  local names = {}
  for b = 1, k do
    local at = 4 + 3 * b
    names[b] = ARGV[at]
    if redis.call('BITCOUNT', kbkey(ix, ARGV[at]), ARGV[at + 1], ARGV[at + 2]) > 0 then
      return false
    end
  end
  ixload(ix)
  if ix.n > 0 then
    for _, live in ipairs(kmlive(ix, names)) do
      if live then
        return false
      end
    end
  end
  local r = tonumber(ARGV[first])
  -- then the buckets: g, and per bucket b, its messages (the last ones of the batch, a
  -- bucket's together, in the order of the buckets), their envelopes' bytes, k and k
  -- pairs of a route and its messages
  local gat = first + 1 + 3 * r
  local groups = {}
  local a = gat + 1
  for _ = 1, tonumber(ARGV[gat]) do
    groups[#groups + 1] = a
    a = a + 4 + 2 * tonumber(ARGV[a + 3])
  end
  -- a: the id and envelope pairs, then the pending ones' due times
  local n = (#ARGV - a + 1 + claimUpTo) / 3
  local ids = {}
  for j = 1, n do
    ids[j] = ARGV[a + 2 * j - 2]
  end
  local held = redis.call('HMGET', KEYS[2], unpack(ids))
  for j = 1, n do
    if held[j] then
      return false
    end
  end
  redis.call('HSET', KEYS[2], unpack(ARGV, a, a + 2 * n - 1))
  if claimUpTo > 0 then
    local zin = {}
    for j = 1, claimUpTo do
      zin[2 * j - 1], zin[2 * j] = deadline, ids[j]
    end
    redis.call('ZADD', KEYS[3], unpack(zin))
  end
  local d = a + 2 * n - claimUpTo - 1 -- d + j: message j's due time
  local zadd, nz = {}, 0
  local function due(from, to)
    for j = from, to do
      zadd[nz + 1], zadd[nz + 2] = ARGV[d + j], ids[j]
      nz = nz + 2
    end
  end
  local last = n -- messages up to last go to due, the rest to their buckets
  for _, at in ipairs(groups) do
    last = last - tonumber(ARGV[at + 1])
  end
  due(claimUpTo + 1, last)
  if #groups > 0 then
    last = last + 1
    local base = hbase(KEYS[1])
    local hw = tonumber(redis.call('HGET', base .. 'hs', 'w') or '-1')
    local added = 0
    for _, at in ipairs(groups) do
      local b, c = tonumber(ARGV[at]), tonumber(ARGV[at + 1])
      local key = base .. 'hb:' .. ARGV[at]
      local had = b > hw and redis.call('SCARD', key)
      if not had or had + c > HB_CAP then
        due(last, last + c - 1) -- claimed already, or full: due as any message
      else
        redis.call('SADD', key, unpack(ids, last, last + c - 1))
        added = added + c
        local hk = base .. 'hc:' .. ARGV[at]
        if had == 0 then
          local hc = { '\0b', ARGV[at + 2] }
          for i = at + 4, at + 3 + 2 * tonumber(ARGV[at + 3]), 2 do
            hc[#hc + 1], hc[#hc + 2] = ARGV[i], ARGV[i + 1]
          end
          redis.call('HSET', hk, unpack(hc))
          redis.call('ZADD', base .. 'hb', itoa(b * HB_W + HB_W / 2), ARGV[at])
        else
          redis.call('HINCRBY', hk, '\0b', ARGV[at + 2])
          for i = at + 4, at + 3 + 2 * tonumber(ARGV[at + 3]), 2 do
            redis.call('HINCRBY', hk, ARGV[i], ARGV[i + 1])
          end
        end
      end
      last = last + c
    end
    if added > 0 then
      redis.call('HINCRBY', base .. 'hs', 'p', itoa(added))
    end
  end
  if nz > 0 then
    redis.call('ZADD', KEYS[1], unpack(zadd))
  end
  for i = first + 1, first + 3 * r, 3 do
    if ARGV[i + 1] ~= '0' then
      cadd(cs, 'pending', ARGV[i], tonumber(ARGV[i + 1]))
    end
    if ARGV[i + 2] ~= '0' then
      cadd(cs, 'inflight', ARGV[i], tonumber(ARGV[i + 2]))
    end
  end
  cflush(cs)
  return true
end
if ARGV[3] ~= '0' then
  if ARGV[2] ~= '-1' then
    return redis.error_reply('ERR park: block spans with a cold horizon')
  end
  if parkquick() then
    return reply({})
  end
  return 'full'
end
local co = costart(KEYS[1])
local now, horizon = tonumber(ARGV[1]), tonumber(ARGV[2])
-- One HMGET says which ids already have an envelope (pending in due, in flight or
-- dead) and one HSET below stores the new envelopes: two commands per call instead of
-- one HSETNX (and, for the cold tier, one HEXISTS) per message.
local fps, ids = {}, {}
local n = 0
for i = first, #ARGV, 5 do
  n = n + 1
  ids[n] = ARGV[i]
  fps[n] = ARGV[i + 4]
end
-- Kafka-form ids are looked up in the index only in the blocks kbmark.lua marks.
ix.marked = true
local states = ixget(ix, fps)
local held = {}
if n > 0 then
  held = redis.call('HMGET', KEYS[2], unpack(ids))
end
local out, no = {}, 0
local zadd, hset, nz, nh = {}, {}, 0, 0
local zin, ni = {}, 0 -- the claimed ones' ZADD arguments into inflight
local fly = {} -- per route: messages claimed
-- seen: the ids parked by this call so far, true in due, 'c' in the cold tier, 'f' in
-- flight (claimed)
local seen = {}
local pend = {} -- per route: messages parked (one cadd per route, not per message)
n = 0
for i = first, #ARGV, 5 do
  n = n + 1
  local id, route, s = ARGV[i], ARGV[i + 3], states[n]
  local was = seen[id]
  local st
  if was == 'c' then
    st = 'pending'
  elseif was == 'f' then
    st = 'inflight'
  elseif s then
    if cofind(co, s, id) then
      st = 'pending'
    else
      local t, routes = doneOf(s)
      if t then
        if not routes then
          st = 'delivered'
        elseif hasRoute(routes, route) then
          st = 'cancelled'
        end
      end
    end
  end
  if not st then
    local h = held[n]
    if not h and not was then
      st = 'parked'
      if n <= claimUpTo then
        seen[id] = 'f'
        fly[route] = (fly[route] or 0) + 1
        zin[ni + 1], zin[ni + 2] = deadline, id
        ni = ni + 2
        hset[nh + 1], hset[nh + 2] = id, ARGV[i + 2]
        nh = nh + 2
      elseif not s and horizon >= 0 and cocold(co, ARGV[i + 1], now, horizon) then
        pend[route] = (pend[route] or 0) + 1
        seen[id] = 'c'
        coadd(co, id, ARGV[i + 1], ARGV[i + 2], ARGV[i + 4])
      else
        pend[route] = (pend[route] or 0) + 1
        seen[id] = true
        zadd[nz + 1] = ARGV[i + 1]
        zadd[nz + 2] = id
        nz = nz + 2
        hset[nh + 1] = id
        hset[nh + 2] = ARGV[i + 2]
        nh = nh + 2
      end
    elseif not h then
      st = 'pending' -- parked earlier in this batch
    else
      local fs = redis.call('ZSCORE', KEYS[3], id)
      if fs then
        st = 'inflight'
        -- In flight under this call's own lease deadline (unique per claim of the
        -- shard): this very call ran before, its reply lost (a client re-sending a
        -- pipeline), and claimed it then. Answered as claimed now, written once.
        if n <= claimUpTo and tonumber(fs) == tonumber(deadline) then
          st = 'parked'
        end
      elseif redis.call('ZSCORE', KEYS[4], id) then
        st = 'dead'
      elseif hbwhere(hbase(KEYS[1]), id, h) == 'inflight' then
        st = 'inflight'
      else
        st = 'pending'
      end
    end
  end
  if st ~= 'parked' then
    out[no + 1] = n
    out[no + 2] = st
    no = no + 2
  end
end
parkwrite(hset, zadd, zin, pend, fly)
local cfps, cmarks = coflush(co)
if #cfps > 0 then
  ixset(ix, cfps, cmarks)
  ixflush(ix)
end
cflush(cs)
return reply(out)
