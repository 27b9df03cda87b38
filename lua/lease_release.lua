-- lease_release: give a lease (shard or Kafka source partition) up, only if the caller still holds it, so a late
-- release cannot free a lease another instance has since taken.
--
-- KEYS[1] owner  STRING "instance|token"
-- ARGV[1] "instance|token" the caller holds
-- Returns 1 released, 0 not held.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
