-- zset: batch reads of sorted sets.

-- zpresent returns, for each of ids, its score in the sorted set key or false: one
-- ZMSCORE (Redis 6.2+), else, where the server lacks it, one ZSCORE per id.
local function zpresent(key, ids)
  if #ids == 0 then
    return {}
  end
  local r = redis.pcall('ZMSCORE', key, unpack(ids))
  if type(r) == 'table' and r.err then
    r = {}
    for i = 1, #ids do
      r[i] = redis.call('ZSCORE', key, ids[i])
    end
  end
  return r
end
