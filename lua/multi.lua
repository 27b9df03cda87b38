-- multi: the driver put after a one-shard script (park, ack) by lua.go, which wraps that
-- script in `local function shard(KEYS, ARGV) ... end`, so one call can serve several
-- shards: on a standalone Redis (or behind Sentinel) the store sends one call for all
-- the shards a batch touches instead of one call per shard; on Redis Cluster, where a
-- call must stay within one slot, one call per shard, each with a single group.
--
-- KEYS    the one-shard script's keys for each shard, group after group
-- ARGV[1] how many keys one group has
-- ARGV[2..] per group: the number of its arguments, then those arguments
-- Returns one reply per group, in order: what the one-shard script returned for it.
local nk = tonumber(ARGV[1])
local replies = {}
local a = 2
for g = 0, #KEYS / nk - 1 do
  local keys, args = {}, {}
  for i = 1, nk do
    keys[i] = KEYS[g * nk + i]
  end
  local na = tonumber(ARGV[a])
  for i = 1, na do
    args[i] = ARGV[a + i]
  end
  a = a + na + 1
  replies[g + 1] = shard(keys, args)
end
return replies
