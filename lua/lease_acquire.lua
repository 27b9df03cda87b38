-- lease_acquire: take a lease (a shard's, or a Kafka source partition's) if it is free, with a new fencing token.
--
-- KEYS[1] owner  STRING "instance|token", expires after the lease TTL
-- KEYS[2] fence  STRING counter; INCR gives each new holder a larger token, so a claim
--                from a holder that lost the lease is refused even if it comes back
-- ARGV[1] instance name (without "|")
-- ARGV[2] TTL (ms)
-- Returns the token (>= 1) held now by ARGV[1], or 0 when another instance holds it.
-- An instance that already holds the lease (e.g. restarted under the same name) keeps
-- its token and the TTL is renewed.
local cur = redis.call('GET', KEYS[1])
if not cur then
  local token = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], ARGV[1] .. '|' .. token, 'PX', ARGV[2])
  return token
end
local inst, token = string.match(cur, '^(.*)|(%d+)$')
if inst == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(token)
end
return 0
