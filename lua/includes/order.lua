-- order: strict per-key order for routes with `order: key` (storeapi/order.go), the
-- helper the ordered_* wrappers include. They wrap park, ack, retry,
-- cancel, recover and reschedule unchanged (each runs as a function inside its
-- wrapper) and keep, in the same atomic call, per shard:
--
--   P:{C:n}:ko        HASH  "<kz>" -> id of the key's head ("!" in front once the head
--                           was claimed: it stays the head whatever arrives), and
--                           "~seq" -> receive sequence counter, "~scan" -> sweep cursor
--   P:{C:n}:ki        HASH  id -> "<seq>|<kz>" for every pending or in-flight message
--                           of an ordered key
--   <kz> = P:{C:n}:ko:<route>\0<key>  ZSET "<seq>|<id>" -> due: the key's messages in
--                           (due, receive sequence) order
--
-- Only the head of a key is claimable: every other message of the key waits in the
-- due set at GATE + due, a score no claim reaches. The head leaves (acked, dead
-- lettered, cancelled) -> the next in order is put at its due time (opromote).
-- Anything that removed a message without these wrappers (a bulk job) is repaired by
-- the sweep that recover runs: a head whose message is gone is replaced.
local GATE = 4503599627370496 -- 2^52 (storeapi.GateBase)

-- ostart returns the call's order state o, which every helper below takes first: the
-- shard's keys, woke (the earliest due time of a head promoted by this call, -1 if
-- none) and on (whether the shard has keyed messages at all: one EXISTS).
local function ostart(ko, ki, due, msg)
  return { ko = ko, ki = ki, due = due, msg = msg, woke = -1, on = redis.call('EXISTS', ki) == 1 }
end

-- oinfo returns the key zset and the queue member of a keyed id, nil if not keyed.
local function oinfo(o, id)
  local v = redis.call('HGET', o.ki, id)
  if not v then
    return nil
  end
  local bar = string.find(v, '|', 1, true)
  return string.sub(v, bar + 1), string.sub(v, 1, bar - 1) .. '|' .. id
end

-- ohead returns the key's head id and whether it was claimed.
local function ohead(o, kz)
  local v = redis.call('HGET', o.ko, kz)
  if v and string.sub(v, 1, 1) == '!' then
    return string.sub(v, 2), true
  end
  return v, false
end

-- opromote makes the next live message of kz its head, at its due time.
local function opromote(o, kz)
  while true do
    local nxt = redis.call('ZRANGE', kz, '0', '0', 'WITHSCORES')
    if not nxt[1] then
      redis.call('HDEL', o.ko, kz)
      return
    end
    local id = string.sub(nxt[1], string.find(nxt[1], '|', 1, true) + 1)
    if redis.call('HEXISTS', o.msg, id) == 1 then
      redis.call('HSET', o.ko, kz, id)
      redis.call('ZADD', o.due, 'XX', nxt[2], id)
      local d = tonumber(nxt[2])
      if o.woke < 0 or d < o.woke then
        o.woke = d
      end
      return
    end
    redis.call('ZREM', kz, nxt[1]) -- removed behind our back (a bulk job): skip it
    redis.call('HDEL', o.ki, id)
  end
end

-- ogone: keyed id left its key (acked, dead, cancelled); a head is replaced.
local function ogone(o, id, kz, member)
  redis.call('ZREM', kz, member)
  redis.call('HDEL', o.ki, id)
  if ohead(o, kz) == id then
    opromote(o, kz)
  end
end

-- oadd queues id, just parked at due d (in the due set at d), behind its key.
local function oadd(o, id, d, kz)
  local seq = string.format('%016d', redis.call('HINCRBY', o.ko, '~seq', '1'))
  redis.call('ZADD', kz, d, seq .. '|' .. id)
  redis.call('HSET', o.ki, id, seq .. '|' .. kz)
  o.on = true
  local head, claimed = ohead(o, kz)
  if not head or redis.call('HEXISTS', o.ki, head) == 0 then
    redis.call('ZADD', o.due, GATE + d, id)
    opromote(o, kz)
    return
  end
  local hkz, hm = oinfo(o, head)
  local hdue = redis.call('ZSCORE', kz, hm)
  if not claimed and hdue and d < tonumber(hdue) and redis.call('ZSCORE', o.due, head) then
    -- an earlier message than an unclaimed head takes its place
    redis.call('ZADD', o.due, GATE + tonumber(hdue), head)
    redis.call('HSET', o.ko, kz, id)
    return
  end
  redis.call('ZADD', o.due, GATE + d, id)
end

-- oclaimed marks id's key's head as claimed (it came back from a claim: retry, recover).
local function oclaimed(o, id)
  local kz = oinfo(o, id)
  if kz and ohead(o, kz) == id then
    redis.call('HSET', o.ko, kz, '!' .. id)
  end
end

-- opre collects the keyed ids among ids (before the wrapped script runs).
local function opre(o, ids)
  local pre = {}
  if not o.on then
    return pre
  end
  for _, id in ipairs(ids) do
    local kz, m = oinfo(o, id)
    if kz then
      pre[#pre + 1] = { id, kz, m }
    end
  end
  return pre
end

-- ogoneIfLeft: those of pre whose message left the shard's live sets.
local function ogoneIfLeft(o, pre)
  for _, p in ipairs(pre) do
    if redis.call('HEXISTS', o.msg, p[1]) == 0 then
      ogone(o, p[1], p[2], p[3])
    end
  end
end

-- osweep checks up to n heads (from a cursor kept in ko): a head whose message is gone
-- is replaced, so no key stays blocked by a message removed without these wrappers.
local function osweep(o, n)
  if not o.on then
    return
  end
  local cur = redis.call('HGET', o.ko, '~scan') or '0'
  local page = redis.call('HSCAN', o.ko, cur, 'COUNT', n)
  for i = 1, #page[2], 2 do
    local kz = page[2][i]
    if string.sub(kz, 1, 1) ~= '~' then
      local head = ohead(o, kz)
      if redis.call('HEXISTS', o.msg, head) == 0 then
        local hkz, hm = oinfo(o, head)
        if hkz then
          ogone(o, head, hkz, hm)
        else
          opromote(o, kz)
        end
      end
    end
  end
  redis.call('HSET', o.ko, '~scan', page[1])
end
