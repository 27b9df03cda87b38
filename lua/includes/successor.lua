--- @include "counts"
-- successor: the new version of an in-flight message kept by replace.lua, included
-- by the scripts that take a message out of in flight (ack, retry, recover) or look it
-- up by id (cancel, get). docs/CONTRACT.md "Replace" states the rule; this
-- file and replace.lua are the whole of it on Redis.
--
-- P:{C:n}:nx  HASH id -> "<due>|<envelope>": the successor of an id in flight (a
--             replace that came while its message was being published). Only ids in
--             the shard's inflight set have one. It is not counted and not browsed: the
--             id is counted once, in flight, until its successor becomes pending.
--
-- When the in-flight version leaves in flight (acked: it was published; retried or
-- dead-lettered; recovered), its successor takes its place in due and msg, pending at
-- its own due time, and the in-flight version is not retried or remembered as done.

-- nxany: whether the shard has any successor (one EXISTS per call, so the hot path of a
-- store that never replaces costs one cheap command).
local function nxany(nxKey)
  return redis.call('EXISTS', nxKey) == 1
end

-- nxtake removes id's successor and returns its due time and envelope, or nil.
local function nxtake(nxKey, id)
  local v = redis.call('HGET', nxKey, id)
  if not v then
    return nil
  end
  redis.call('HDEL', nxKey, id)
  local bar = string.find(v, '|', 1, true)
  return string.sub(v, 1, bar - 1), string.sub(v, bar + 1)
end

-- nxpromote makes id's successor pending (envelope into msgKey, due time into dueKey,
-- counted; cadd/routeOf come from counts.lua) and returns its due time, or nil when id
-- has none. The caller has already taken the in-flight version out (inflight, counts).
local function nxpromote(cs, nxKey, dueKey, msgKey, id)
  local due, env = nxtake(nxKey, id)
  if not due then
    return nil
  end
  redis.call('HSET', msgKey, id, env)
  redis.call('ZADD', dueKey, due, id)
  cadd(cs, 'pending', routeOf(env), 1)
  return due
end

-- nxget reads id's successor without removing it: due time (a number) and envelope.
local function nxget(nxKey, id)
  local v = redis.call('HGET', nxKey, id)
  if not v then
    return nil
  end
  local bar = string.find(v, '|', 1, true)
  return tonumber(string.sub(v, 1, bar - 1)), string.sub(v, bar + 1)
end

-- nxacked promotes the successors of acked ids (ack.lua: their msg entries are gone
-- already) and returns fps (fps[j] is acked[j]'s) without the promoted ids' fps: an id
-- whose successor is pending now is not remembered as delivered.
local function nxacked(cs, nxKey, dueKey, msgKey, acked, fps)
  if not nxany(nxKey) then
    return fps
  end
  local kf = {}
  for j = 1, #acked do
    if not nxpromote(cs, nxKey, dueKey, msgKey, acked[j]) then
      kf[#kf + 1] = fps[j]
    end
  end
  return kf
end
