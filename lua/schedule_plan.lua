-- schedule_plan: store the planner's progress for one generation of a schedule.
--
-- KEYS[1] schedules       the definitions HASH (id -> "<gen>:<updated>:<definition>")
-- KEYS[2] schedules:plan  the plans HASH (id -> "<gen>:<plan>")
-- ARGV[1] schedule id
-- ARGV[2] the generation the plan was made for
-- ARGV[3] the plan (opaque bytes)
-- Returns 1 when stored, 0 when the schedule is gone or has another generation now
-- (it was changed since the planner read it: nothing is written).
local def = redis.call('HGET', KEYS[1], ARGV[1])
if not def then
  return 0
end
local gen = string.match(def, '^(%d+):')
if gen ~= ARGV[2] then
  return 0
end
redis.call('HSET', KEYS[2], ARGV[1], table.concat({ARGV[2], ARGV[3]}, ':'))
return 1
