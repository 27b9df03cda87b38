-- get: look a message up by id wherever it is.
--
-- KEYS[1] due        ZSET id -> due time
-- KEYS[2] msg        HASH id -> envelope
-- KEYS[3] inflight   ZSET id -> lease deadline
-- KEYS[4] dead       ZSET id -> time dead-lettered
-- KEYS[5] done       ZSET id -> time delivered or cancelled
-- KEYS[6] cancelled  HASH id -> routes whose cancel it was
-- ARGV[1] id
-- Returns { state, score, envelope } with state "pending", "inflight", "dead",
-- "delivered" or "cancelled" and score the sorted-set score in that state (unix ms);
-- "delivered" and "cancelled" have no envelope; an unknown id returns { "" }.
-- A done entry without a cancelled field reads "delivered" (also those written by
-- bridges that recorded cancels in done without the cancelled hash).
local id = ARGV[1]
local states = { 'pending', 'inflight', 'dead' }
for i = 1, 3 do
  local k = KEYS[1]
  if i == 2 then k = KEYS[3] elseif i == 3 then k = KEYS[4] end
  local score = redis.call('ZSCORE', k, id)
  if score then
    local env = redis.call('HGET', KEYS[2], id)
    if env then
      return { states[i], tonumber(score), env }
    end
    return { states[i], tonumber(score) }
  end
end
local score = redis.call('ZSCORE', KEYS[5], id)
if score then
  if redis.call('HEXISTS', KEYS[6], id) == 1 then
    return { 'cancelled', tonumber(score) }
  end
  return { 'delivered', tonumber(score) }
end
return { '' }
