-- job_claim: take a bulk job to run (docs/CONTRACT.md §3, job records).
--
-- KEYS[1] job:<id>     the job's HASH (P:{C}:job:<id>)
-- KEYS[2] jobs:active  the active jobs SET (P:{C}:jobs:active)
-- ARGV[1] job id (the member of KEYS[2])
-- ARGV[2] instance claiming it
-- ARGV[3] now (unix ms)
-- ARGV[4] stale before: a running job whose heartbeat is older than this was abandoned
--         (its instance died) and may be taken over; it resumes from its cursor
-- Returns 1 when the caller now runs the job (state running, instance, heartbeat set),
-- 0 when it is not claimable (running elsewhere with a fresh heartbeat, or finished),
-- -1 when the record is gone (expired): it is dropped from the active set.
local state = redis.call('HGET', KEYS[1], 'state')
if not state then
  redis.call('SREM', KEYS[2], ARGV[1])
  return -1
end
if state == 'running' then
  local hb = tonumber(redis.call('HGET', KEYS[1], 'heartbeat') or '0')
  if hb >= tonumber(ARGV[4]) then
    return 0
  end
elseif state ~= 'queued' then
  redis.call('SREM', KEYS[2], ARGV[1])
  return 0
end
redis.call('HSET', KEYS[1], 'state', 'running', 'instance', ARGV[2], 'heartbeat', ARGV[3], 'updated', ARGV[3])
redis.call('HINCRBY', KEYS[1], 'claims', '1')
return 1
