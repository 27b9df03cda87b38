-- job_save: record a running job's progress, or finish it, if the caller still runs it.
--
-- KEYS[1] job:<id>     the job's HASH
-- KEYS[2] jobs:active  the active jobs SET
-- ARGV[1] job id
-- ARGV[2] instance that claimed it
-- ARGV[3] now (unix ms): written as heartbeat and updated
-- ARGV[4] final state ("done", "failed"), or "" to stay running
-- ARGV[5] retention (ms) of a finished job record
-- ARGV[6..] field, value pairs to write (counters, cursor, error, ...)
-- Returns "ok", or the job's state when the caller no longer runs it ("cancelled" by an
-- operator, "running" taken over by another instance after a missed heartbeat, "" if
-- gone): nothing is written then and the caller must stop.
local state = redis.call('HGET', KEYS[1], 'state')
if state ~= 'running' or redis.call('HGET', KEYS[1], 'instance') ~= ARGV[2] then
  return state or ''
end
for i = 6, #ARGV, 2 do
  redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
end
redis.call('HSET', KEYS[1], 'heartbeat', ARGV[3], 'updated', ARGV[3])
if ARGV[4] ~= '' then
  redis.call('HSET', KEYS[1], 'state', ARGV[4])
  redis.call('PEXPIRE', KEYS[1], ARGV[5])
  redis.call('SREM', KEYS[2], ARGV[1])
end
return 'ok'
