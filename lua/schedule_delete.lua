-- schedule_delete: remove a recurring schedule's definition and plan.
--
-- KEYS[1] schedules       the definitions HASH (id -> "<gen>:<updated>:<definition>")
-- KEYS[2] schedules:plan  the plans HASH (id -> "<gen>:<plan>")
-- ARGV[1] schedule id
-- Returns false when there is no such schedule, else {definition value, plan value or
-- false}, as they were. The generations HASH is left alone.
local def = redis.call('HGET', KEYS[1], ARGV[1])
if not def then
  return false
end
local plan = redis.call('HGET', KEYS[2], ARGV[1])
redis.call('HDEL', KEYS[1], ARGV[1])
redis.call('HDEL', KEYS[2], ARGV[1])
return {def, plan}
