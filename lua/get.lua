-- get: look a message up by id wherever it is.
--
-- KEYS[1] due       ZSET id -> due time
-- KEYS[2] msg       HASH id -> envelope
-- KEYS[3] inflight  ZSET id -> lease deadline
-- KEYS[4] dead      ZSET id -> time dead-lettered
-- KEYS[5] done      ZSET id -> time fired or cancelled
-- ARGV[1] id
-- Returns { state, score, envelope } with state "pending", "inflight", "dead" or "done"
-- and score the sorted-set score in that state (unix ms); "done" has no envelope; an
-- unknown id returns { "" }.
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
  return { 'done', tonumber(score) }
end
return { '' }
