-- lease_renew: extend a lease (shard or Kafka source partition), only for its current holder.
--
-- KEYS[1] owner  STRING "instance|token"
-- ARGV[1] "instance|token" the caller holds
-- ARGV[2] TTL (ms)
-- Returns 1 renewed, 0 not held (expired or taken over: the caller must stop working
-- the shard).
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
