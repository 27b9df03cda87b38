-- order: strict per-key order for routes with `order: key` (storeapi/order.go), the
-- helper lua.go puts in front of the ordered_* wrappers. They wrap park, ack, retry,
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
local O = { ko = nil, ki = nil, due = nil, msg = nil, woke = -1, on = false }

local function ostart(ko, ki, due, msg)
  O.ko, O.ki, O.due, O.msg, O.woke = ko, ki, due, msg, -1
  O.on = redis.call('EXISTS', ki) == 1
end

-- oinfo returns the key zset and the queue member of a keyed id, nil if not keyed.
local function oinfo(id)
  local v = redis.call('HGET', O.ki, id)
  if not v then
    return nil
  end
  local bar = string.find(v, '|', 1, true)
  return string.sub(v, bar + 1), string.sub(v, 1, bar - 1) .. '|' .. id
end

-- ohead returns the key's head id and whether it was claimed.
local function ohead(kz)
  local v = redis.call('HGET', O.ko, kz)
  if v and string.sub(v, 1, 1) == '!' then
    return string.sub(v, 2), true
  end
  return v, false
end

-- opromote makes the next live message of kz its head, at its due time.
local function opromote(kz)
  while true do
    local nxt = redis.call('ZRANGE', kz, 0, 0, 'WITHSCORES')
    if not nxt[1] then
      redis.call('HDEL', O.ko, kz)
      return
    end
    local id = string.sub(nxt[1], string.find(nxt[1], '|', 1, true) + 1)
    if redis.call('HEXISTS', O.msg, id) == 1 then
      redis.call('HSET', O.ko, kz, id)
      redis.call('ZADD', O.due, 'XX', nxt[2], id)
      local d = tonumber(nxt[2])
      if O.woke < 0 or d < O.woke then
        O.woke = d
      end
      return
    end
    redis.call('ZREM', kz, nxt[1]) -- removed behind our back (a bulk job): skip it
    redis.call('HDEL', O.ki, id)
  end
end

-- ogone: keyed id left its key (acked, dead, cancelled); a head is replaced.
local function ogone(id, kz, member)
  redis.call('ZREM', kz, member)
  redis.call('HDEL', O.ki, id)
  if ohead(kz) == id then
    opromote(kz)
  end
end

-- oadd queues id, just parked at due d (in the due set at d), behind its key.
local function oadd(id, d, kz)
  local seq = string.format('%016d', redis.call('HINCRBY', O.ko, '~seq', 1))
  redis.call('ZADD', kz, d, seq .. '|' .. id)
  redis.call('HSET', O.ki, id, seq .. '|' .. kz)
  O.on = true
  local head, claimed = ohead(kz)
  if not head or redis.call('HEXISTS', O.ki, head) == 0 then
    redis.call('ZADD', O.due, GATE + d, id)
    opromote(kz)
    return
  end
  local hkz, hm = oinfo(head)
  local hdue = redis.call('ZSCORE', kz, hm)
  if not claimed and hdue and d < tonumber(hdue) and redis.call('ZSCORE', O.due, head) then
    -- an earlier message than an unclaimed head takes its place
    redis.call('ZADD', O.due, GATE + tonumber(hdue), head)
    redis.call('HSET', O.ko, kz, id)
    return
  end
  redis.call('ZADD', O.due, GATE + d, id)
end

-- oclaimed marks id's key's head as claimed (it came back from a claim: retry, recover).
local function oclaimed(id)
  local kz = oinfo(id)
  if kz and ohead(kz) == id then
    redis.call('HSET', O.ko, kz, '!' .. id)
  end
end

-- opre collects the keyed ids among ids (before the wrapped script runs).
local function opre(ids)
  local pre = {}
  if not O.on then
    return pre
  end
  for _, id in ipairs(ids) do
    local kz, m = oinfo(id)
    if kz then
      pre[#pre + 1] = { id, kz, m }
    end
  end
  return pre
end

-- ogoneIfLeft: those of pre whose message left the shard's live sets.
local function ogoneIfLeft(pre)
  for _, p in ipairs(pre) do
    if redis.call('HEXISTS', O.msg, p[1]) == 0 then
      ogone(p[1], p[2], p[3])
    end
  end
end

-- osweep checks up to n heads (from a cursor kept in ko): a head whose message is gone
-- is replaced, so no key stays blocked by a message removed without these wrappers.
local function osweep(n)
  if not O.on then
    return
  end
  local cur = redis.call('HGET', O.ko, '~scan') or '0'
  local page = redis.call('HSCAN', O.ko, cur, 'COUNT', n)
  for i = 1, #page[2], 2 do
    local kz = page[2][i]
    if string.sub(kz, 1, 1) ~= '~' then
      local head = ohead(kz)
      if redis.call('HEXISTS', O.msg, head) == 0 then
        local hkz, hm = oinfo(head)
        if hkz then
          ogone(head, hkz, hm)
        else
          opromote(kz)
        end
      end
    end
  end
  redis.call('HSET', O.ko, '~scan', page[1])
end
