-- job_cancel: an operator stops a bulk job.
--
-- KEYS[1] job:<id>     the job's HASH
-- KEYS[2] jobs:active  the active jobs SET
-- ARGV[1] job id
-- ARGV[2] now (unix ms)
-- ARGV[3] retention (ms) of a finished job record
-- Returns the state the job was in. A queued or running job becomes "cancelled" (a
-- runner sees that at its next progress write and stops; what it did stays done); a
-- finished job is left as it is; "" = no such job.
local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  return ''
end
if state == 'queued' or state == 'running' then
  redis.call('HSET', KEYS[1], 'state', 'cancelled', 'updated', ARGV[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  redis.call('SREM', KEYS[2], ARGV[1])
end
return state
