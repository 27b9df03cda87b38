--- @include "zset"
-- kbmark: which blocks of Kafka partitions (index.lua's blocks) have ids with an entry
-- in the id index, so that a park looks a fetch's Kafka-form ids up in the index only
-- where an entry can be. index.lua and cold.lua use it; it reads nothing else of theirs.
--
-- A Kafka-form id has an index entry only while it is a cold message (its place,
-- "p<bucket>:<position>": cold.lua) or after a cancel (its tombstone, "c<seconds>|...").
-- Without marks, a park of such ids pays an index lookup per id whenever the index
-- holds anything, which the cold tier alone keeps true.
--
-- Keys (shard n, prefix P; named from the index's key, so they carry the shard's hash
-- tag):
--   P:{C:n}:kxp  ZSET  block name -> the highest cold bucket an entry of its ids named
--   P:{C:n}:kxc  ZSET  block name -> the latest second one of its ids was cancelled at
--
-- A block is marked while it is a member of either. Marks only rise, and go when
-- nothing they stand for can be left:
--   - the cold tier promotes its buckets in order and never parks below the one it
--     promotes, so once bucket b is promoted whole no place is left in a bucket up to
--     b (kmpromoted, called by cold.lua);
--   - a tombstone is recorded in the done slice of its second and forgotten with that
--     slice, so none is left from before the oldest slice kept (kmtrimmed, called by
--     the trim when it drops a slice).

local function kmkeys(ix)
  local base = string.sub(ix.key, 1, -3)
  return base .. 'kxp', base .. 'kxc'
end

-- kmraise raises the marks of set key to marks[name] (one read, one write).
local function kmraise(key, marks, names)
  if #names == 0 then
    return
  end
  local cur = zpresent(key, names)
  local args = {}
  for i, name in ipairs(names) do
    if not cur[i] or tonumber(cur[i]) < marks[name] then
      args[#args + 1] = string.format('%d', marks[name])
      args[#args + 1] = name
    end
  end
  if #args > 0 then
    redis.call('ZADD', key, unpack(args))
  end
end

-- kmnote marks the blocks of the Kafka-form fps among fps (longer than fplen: the block
-- name follows the fp, its slot and its record hash) with the states vals[i] written
-- for them.
local function kmnote(ix, fps, vals, fplen)
  local p, c, pn, cn = {}, {}, {}, {}
  for i = 1, #fps do
    local fp, v = fps[i], vals[i]
    if #fp > fplen then
      local kind = string.sub(v, 1, 1)
      local marks, names, n = nil, nil, nil
      if kind == 'p' then
        marks, names, n = p, pn, tonumber(string.sub(v, 2, string.find(v, ':', 2, true) - 1), 36)
      elseif kind == 'c' then
        marks, names, n = c, cn, tonumber(string.sub(v, 2, string.find(v, '|', 2, true) - 1))
      end
      if n then
        local name = string.sub(fp, fplen + 9)
        if not marks[name] then
          names[#names + 1] = name
          marks[name] = n
        elseif n > marks[name] then
          marks[name] = n
        end
      end
    end
  end
  local kp, kc = kmkeys(ix)
  kmraise(kp, p, pn)
  kmraise(kc, c, cn)
end

-- kmlive returns, for each block name of names, whether its ids may have index
-- entries: two reads, none when neither set exists.
local function kmlive(ix, names)
  local kp, kc = kmkeys(ix)
  local p, c = zpresent(kp, names), zpresent(kc, names)
  local out = {}
  for i = 1, #names do
    out[i] = (p[i] or c[i]) and true or false
  end
  return out
end

-- kmpromoted forgets the place marks of buckets up to b: bucket b is promoted whole.
local function kmpromoted(ix, b)
  local kp = kmkeys(ix)
  redis.call('ZREMRANGEBYSCORE', kp, '-inf', string.format('%d', b))
end

-- kmtrimmed forgets the cancel marks older than the oldest done slice kept, after the
-- trim dropped one. Every member of dn is read (a few dozen): slices of another width
-- (the done window was changed) need not end in the order they start.
local function kmtrimmed(ix)
  local oldest = nil
  for _, m in ipairs(redis.call('ZRANGE', ix.dn, '0', '-1')) do
    local s = tonumber(string.sub(m, 1, string.find(m, ':', 1, true) - 1))
    if not oldest or s < oldest then
      oldest = s
    end
  end
  local _, kc = kmkeys(ix)
  if not oldest then
    redis.call('DEL', kc)
    return
  end
  -- a tombstone of second c is in a slice starting at or before c * 1000
  redis.call('ZREMRANGEBYSCORE', kc, '-inf', '(' .. string.format('%d', math.floor(oldest / 1000)))
end
