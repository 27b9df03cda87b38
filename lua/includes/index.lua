--- @include "zset"
--- @include "num"
--- @include "kbmark"
-- index: the id index and the done window of the shard store, included by the
-- scripts that read or write remembered ids. docs/ARCHITECTURE.md "Store layout" gives
-- the reasons and the figures.
--
-- Keys (shard n, prefix P; every name below starts with a key passed in KEYS, so it
-- carries the shard's hash tag {C:n} and lives in the same Redis Cluster slot; the
-- caller also declares P:{C:n}:slotguard, never written, after the script's own KEYS, so
-- Redis refuses the call while that slot migrates: see store/redisstore/slotguard.go):
--   P:{C:n}:ix           HASH  level, split, n: the linear-hashing state of the index
--                              (n = entries in all sub-hashes), and tcur = how far the
--                              trim has read the oldest done slice ("<slice>|<offset>")
--   P:{C:n}:ix:<k>       HASH  fp -> state, one sub-hash of the index; fp is 12 bytes
--                              (96 bits) of SHA-256(id), computed by the caller
--   P:{C:n}:dn           ZSET  "<start>:<width>" -> start + width: the done slices
--   P:{C:n}:dn:<s>:<w>   LIST  the fps remembered during [s, s+w): one element per
--                              call, the call's fps concatenated (12 bytes each)
--   P:{C:n}:kb:<block>   STRING the delivered ids of one block of a Kafka partition
--                              (below): KB_SLOT bytes per offset
--   P:{C:n}:kb           ZSET  <block> -> the time of its latest delivery (unix ms)
--
-- Delivered ids of the Kafka default form ("<topic>/<partition>/<offset>/<hash>",
-- storeapi.KafkaOffset) are not index entries. The offsets of a partition's block of
-- 1024 share a shard (storeapi.ShardOf), and an ack writes each id into its offset's
-- slot of the block's string: the record hash (6 bytes, the id's 12 hex digits) and the
-- time delivered (unix seconds, 4 bytes big endian). A park of a fetch reads its block
-- with one GETRANGE instead of one HGET per id, an ack writes a slot with one SETRANGE
-- instead of an HSET, and the trim forgets a whole block with one DEL (once its latest
-- delivery is a window old) instead of an HGET and an HDEL per id: 10 bytes per id
-- instead of ~37. The caller marks such an id by appending to its fp: the slot (2 bytes
-- big endian), the record hash (6 bytes) and the block's name "<topic>/<partition>/<n>"
-- (store/redisstore fingerprint). Their cancel tombstones and cold places stay index
-- entries under the fp's first FP bytes; a delivered slot wins over an index entry (an
-- ack replaces another route's tombstone).
--
-- A state (the value of an fp) is the integer time in unix seconds at which the id was
-- delivered, "p<bucket>:<position>" (base 36) while it is a pending message in the cold tier
-- (cold.lua), or "c<seconds>|<routes>" when it was cancelled, routes being the cancels'
-- routes as "<length>:<route>" entries (routes.lua). Sub-hashes stay small (below the
-- default hash-max-listpack-entries 128), so Redis keeps each as one listpack: about
-- 20 bytes per entry instead of ~70 for a field of a big hash.
--
-- Sub-hash of an fp: linear hashing over h, the fp's first 4 bytes as a 32-bit number.
-- With L = level and S = split, k = h mod 2^L, or h mod 2^(L+1) when that is below S.
-- Whenever n exceeds IX_TARGET entries per sub-hash on average, sub-hash S is split
-- (its entries with h mod 2^(L+1) = S + 2^L move to that new sub-hash) and S advances;
-- at most IX_SPLITS splits per call, each moving at most one sub-hash.
local IX_TARGET = 48
-- A new index starts with 2^IX_LEVEL0 sub-hashes, so that the first batches (up to a
-- few hundred ids) spread over many and none outgrows a listpack before it is split:
-- a sub-hash that once held more than 128 entries stays a (big) hash table.
local IX_LEVEL0 = 6
local IX_SPLITS = 16
local FP = 12
-- A block slot: record hash (6 bytes) and time delivered (4 bytes).
local KB_SLOT = 10
-- Slots per block: storeapi.ShardBlock offsets.
local KB_BLOCK = 1024
-- kbwrite reads a span to patch it only where it is shorter than this many bytes for
-- each run of slots beyond two.
local KB_PATCH = 250
-- At most this many blocks are forgotten per trim call (each one DEL).
local KB_TRIM = 16
-- The last byte of a block's string, KB_BLOCK * KB_SLOT - 1, as text (num.lua; a
-- library's top level cannot call string functions when Redis loads it).
local KB_LAST = '10239'

-- ixstart returns the call's index state ix, which every helper below takes first:
-- ixKey is P:{C:n}:ix, dnKey P:{C:n}:dn. Nothing is read until a helper needs the
-- linear-hashing state (ixload): a call that records no id and trims nothing reads
-- nothing.
local function ixstart(ixKey, dnKey)
  return { key = ixKey, dn = dnKey, kb = string.sub(ixKey, 1, -3) .. 'kb', names = {}, loaded = false }
end

-- ixshort is fp's index key: its first FP bytes (a Kafka-form fp carries its block
-- slot after them).
local function ixshort(fp)
  if #fp > FP then
    return string.sub(fp, 1, FP)
  end
  return fp
end

-- kbkey is the key of the Kafka block named name ("<topic>/<partition>/<n>").
local function kbkey(ix, name)
  return ix.kb .. ':' .. name
end

-- kbgroup groups the Kafka-form fps among fps by block: { {key, name, at, off, hash,
-- lo, hi, n}, ... }, at being positions in fps, off byte offsets of the slots, lo and
-- hi the first and last slot's offsets, n how many. The string functions are locals of
-- the loop (registers) rather than a global's fields looked up per fp.
local function kbgroup(ix, fps)
  local sub, byte = string.sub, string.byte
  local by, order = {}, {}
  for i = 1, #fps do
    local fp = fps[i]
    if #fp > FP then
      local name = sub(fp, FP + 9)
      local g = by[name]
      if not g then
        g = { key = kbkey(ix, name), name = name, at = {}, off = {}, hash = {}, lo = math.huge, hi = -1, n = 0 }
        by[name] = g
        order[#order + 1] = g
      end
      local a, b = byte(fp, FP + 1, FP + 2)
      local off = (a * 256 + b) * KB_SLOT
      local n = g.n + 1
      g.n = n
      g.at[n], g.off[n], g.hash[n] = i, off, sub(fp, FP + 3, FP + 8)
      if off < g.lo then
        g.lo = off
      end
      if off > g.hi then
        g.hi = off
      end
    end
  end
  return order
end

-- kbslots reads each block's slots of group g with one GETRANGE and returns, per
-- member of g, the time (unix s) its slot says the id was delivered, or false.
local function kbslots(g)
  local r = redis.call('GETRANGE', g.key, itoa(g.lo), itoa(g.hi + KB_SLOT - 1))
  local out = {}
  local sub, off, hash, lo = string.sub, g.off, g.hash, g.lo
  for j = 1, g.n do
    local s = off[j] - lo + 1
    out[j] = false
    if sub(r, s, s + 5) == hash[j] then
      local a, b, c, d = string.byte(r, s + 6, s + 9)
      if d then
        local t = ((a * 256 + b) * 256 + c) * 256 + d
        if t > 0 then
          out[j] = t
        end
      end
    end
  end
  return out
end

-- kbget sets out[i] to the delivered state of each Kafka-form fps[i] its block holds,
-- and returns the blocks' groups (kbgroup).
local function kbget(ix, fps, out)
  local groups = kbgroup(ix, fps)
  for _, g in ipairs(groups) do
    local ts = kbslots(g)
    for j = 1, #g.at do
      if ts[j] then
        out[g.at[j]] = string.format('%d', ts[j])
      end
    end
  end
  return groups
end

-- kbwrite writes a block's runs of consecutive slots, in offset order: a[from],
-- a[from + 2], ... the byte offsets (text) of their first slots, a[from + 1], ... their
-- bytes. One SETRANGE per run, or, when the runs are many and close together, one
-- GETRANGE of the span they cover and one SETRANGE of it patched. Every string that
-- enters Lua is hashed byte by byte (Redis's Lua), so a span read and written back
-- costs about ten cycles a byte, and a command about 2,500: the span is patched only
-- where it is shorter than KB_PATCH bytes for each run beyond two. (Acks of messages
-- with scattered delays touch a few slots of a block each, far apart: read whole, their
-- spans were most of the string hashing at a steady 20k msgs/s.)
local function kbwrite(key, a, from, to)
  local n = (to - from + 1) / 2
  local lo = tonumber(a[from])
  local hi = tonumber(a[to - 1]) + #a[to]
  if n <= 2 or hi - lo >= (n - 2) * KB_PATCH then
    for r = from, to, 2 do
      redis.call('SETRANGE', key, a[r], a[r + 1])
    end
    return
  end
  local span = redis.call('GETRANGE', key, a[from], itoa(hi - 1))
  if #span < hi - lo then
    span = span .. string.rep('\0', hi - lo - #span)
  end
  local parts, at = {}, 1
  for r = from, to, 2 do
    local s = tonumber(a[r]) - lo + 1
    parts[#parts + 1] = string.sub(span, at, s - 1)
    parts[#parts + 1] = a[r + 1]
    at = s + #a[r + 1]
  end
  redis.call('SETRANGE', key, a[from], table.concat(parts))
end

-- kbnote notes the latest delivery (now, unix ms) of the blocks names (their keys
-- keys) with one ZADD; when that added any, each new block's string is allocated whole,
-- so that the slots written later do not grow it step by step (Redis grows a string to
-- twice what it needs).
local function kbnote(ix, names, keys, now)
  local zadd = {}
  for k = 1, #names do
    zadd[2 * k - 1], zadd[2 * k] = now, names[k]
  end
  if redis.call('ZADD', ix.kb, unpack(zadd)) > 0 then
    for _, key in ipairs(keys) do
      if redis.call('EXISTS', key) == 0 then
        redis.call('SETRANGE', key, KB_LAST, '\0')
      end
    end
  end
end

-- kbrunsof is the slots of group g (each its hash and tb) as kbwrite's runs, in offset
-- order; of two ids at one slot the later in fps wins.
local function kbrunsof(g, tb)
  local off, hash = g.off, g.hash
  local order = {}
  for j = 1, g.n do
    order[j] = j
  end
  table.sort(order, function(x, y)
    if off[x] ~= off[y] then
      return off[x] < off[y]
    end
    return x < y
  end)
  local a, parts, first, last = {}, nil, 0, 0
  for _, j in ipairs(order) do
    if parts and off[j] == last then -- the same slot again
      parts[#parts - 1] = hash[j]
    elseif parts and off[j] == last + KB_SLOT then
      parts[#parts + 1] = hash[j]
      parts[#parts + 1] = tb
      last = off[j]
    else
      if parts then
        a[#a + 1] = itoa(first)
        a[#a + 1] = table.concat(parts)
      end
      parts, first, last = { hash[j], tb }, off[j], off[j]
    end
  end
  a[#a + 1] = itoa(first)
  a[#a + 1] = table.concat(parts)
  return a
end

-- kbrest is the fps among fps that are not of Kafka form (they go to the index); an
-- empty fp (an ack's Kafka id its runs covered: ack.lua) is neither.
local function kbrest(fps)
  local rest = {}
  for i = 1, #fps do
    if #fps[i] <= FP and fps[i] ~= '' then
      rest[#rest + 1] = fps[i]
    end
  end
  return rest
end

-- kbackfp is the fp an ack gets for Kafka default id "<topic>/<partition>/<offset>/<12
-- hex>" (store/redisstore ackFingerprint): FP zero bytes, the offset's slot in its
-- block (2 bytes big endian), the record hash (6 bytes) and the block's name. The
-- caller sends it empty where its runs cover the id, and only for offsets below 2^53,
-- which a Lua number holds exactly.
local function kbackfp(id)
  local prefix, off, hash = string.match(id, '^(.*/)(%d+)/(%x+)$')
  local o = tonumber(off)
  local slot = o % KB_BLOCK
  local bytes = string.gsub(hash, '%x%x', function(h) return string.char(tonumber(h, 16)) end)
  return string.rep('\0', FP) .. string.char(math.floor(slot / 256), slot % 256) .. bytes ..
    prefix .. itoa((o - slot) / KB_BLOCK)
end

-- kbdone remembers the Kafka-form fps among fps as delivered at sec (unix seconds, a
-- string) in their blocks, noting each block's latest delivery at now (unix ms), and
-- returns the other fps (for the index).
local function kbdone(ix, fps, sec, now)
  local rest = kbrest(fps)
  if #rest == #fps then
    return rest
  end
  local t = tonumber(sec)
  local tb = string.char(math.floor(t / 16777216) % 256, math.floor(t / 65536) % 256, math.floor(t / 256) % 256, t % 256)
  local groups = kbgroup(ix, fps)
  local names, keys = {}, {}
  for k, g in ipairs(groups) do
    names[k], keys[k] = g.name, g.key
  end
  kbnote(ix, names, keys, now)
  for _, g in ipairs(groups) do
    local a = kbrunsof(g, tb)
    kbwrite(g.key, a, 1, #a)
  end
  return rest
end

-- kbclear empties the slots of the Kafka-form fps among fps that hold them.
local function kbclear(ix, fps)
  local zero = string.rep('\0', KB_SLOT)
  for _, g in ipairs(kbgroup(ix, fps)) do
    local ts = kbslots(g)
    for j = 1, #g.at do
      if ts[j] then
        redis.call('SETRANGE', g.key, itoa(g.off[j]), zero)
      end
    end
  end
end

-- kbtrim forgets the blocks whose latest delivery was before `before` (unix ms),
-- at most KB_TRIM per call, and returns how many it forgot.
local function kbtrim(ix, before)
  local old = redis.call('ZRANGEBYSCORE', ix.kb, '-inf', '(' .. before, 'LIMIT', '0', itoa(KB_TRIM))
  if #old == 0 then
    return 0
  end
  local keys = {}
  for i = 1, #old do
    keys[i] = kbkey(ix, old[i])
  end
  redis.call('DEL', unpack(keys))
  redis.call('ZREM', ix.kb, unpack(old))
  return #old
end

-- ixload reads the index state (level, split, n), once per call.
local function ixload(ix)
  if ix.loaded then
    return
  end
  ix.loaded = true
  local v = redis.call('HMGET', ix.key, 'level', 'split', 'n')
  ix.level = tonumber(v[1]) or IX_LEVEL0
  ix.split = tonumber(v[2]) or 0
  ix.m = 2 ^ ix.level
  ix.n = tonumber(v[3]) or 0
  ix.n0, ix.l0, ix.s0 = ix.n, ix.level, ix.split
end

local function fphash(fp)
  local a, b, c, d = string.byte(fp, 1, 4)
  return ((a * 256 + b) * 256 + c) * 256 + d
end

local function ixkey(ix, k)
  local name = ix.names[k]
  if not name then
    name = ix.key .. ':' .. string.format('%d', k)
    ix.names[k] = name
  end
  return name
end

local function ixslot(ix, fp)
  local h = fphash(fp)
  local k = h % ix.m
  if k < ix.split then
    k = h % (2 * ix.m)
  end
  return k
end

-- ixgroup groups fps by sub-hash: { {k, fps, positions}, ... } in first-seen order.
-- Only worth its tables when the batch is dense (several fps per sub-hash).
local function ixgroup(ix, fps)
  local by, order = {}, {}
  for i = 1, #fps do
    local k = ixslot(ix, fps[i])
    local g = by[k]
    if not g then
      g = { k, {}, {} }
      by[k] = g
      order[#order + 1] = g
    end
    g[2][#g[2] + 1] = fps[i]
    g[3][#g[3] + 1] = i
  end
  return order
end

-- ixdense: whether fps share sub-hashes enough for one command per sub-hash to beat
-- one command per fp.
local function ixdense(ix, fps)
  return #fps >= 4 * (ix.m + ix.split)
end

-- ixget returns the state of each fp (false when it has none); an empty index (n
-- counts its entries exactly) is not read at all.
local function ixget(ix, fps)
  local out = {}
  if #fps == 0 then
    return out
  end
  local groups = kbget(ix, fps, out)
  ixload(ix)
  if ix.n == 0 then
    return out
  end
  -- The index holds the others, and a Kafka-form id's tombstone or cold place: looked
  -- for only in the blocks kbmark.lua marks, when the caller has set ix.marked (park);
  -- every id otherwise.
  local skip = {}
  if ix.marked and #groups > 0 then
    local names = {}
    for k, g in ipairs(groups) do
      names[k] = g.name
    end
    local live = kmlive(ix, names)
    for k, g in ipairs(groups) do
      if not live[k] then
        for j = 1, g.n do
          skip[g.at[j]] = true
        end
      end
    end
  end
  local at, short = {}, {}
  for i = 1, #fps do
    if not out[i] and not skip[i] then
      at[#at + 1] = i
      short[#short + 1] = ixshort(fps[i])
    end
  end
  if not ixdense(ix, short) then
    for k = 1, #short do
      out[at[k]] = redis.call('HGET', ixkey(ix, ixslot(ix, short[k])), short[k])
    end
    return out
  end
  for _, g in ipairs(ixgroup(ix, short)) do
    local v = redis.call('HMGET', ixkey(ix, g[1]), unpack(g[2]))
    for j = 1, #g[2] do
      out[at[g[3][j]]] = v[j]
    end
  end
  return out
end

-- ixset stores states (vals[i] for fps[i]).
local function ixset(ix, fps, vals)
  if #fps == 0 then
    return
  end
  kmnote(ix, fps, vals, FP)
  local short = {}
  for i = 1, #fps do
    short[i] = ixshort(fps[i])
  end
  fps = short
  ixload(ix)
  if not ixdense(ix, fps) then
    for i = 1, #fps do
      ix.n = ix.n + redis.call('HSET', ixkey(ix, ixslot(ix, fps[i])), fps[i], vals[i])
    end
    return
  end
  for _, g in ipairs(ixgroup(ix, fps)) do
    local args = {}
    for j = 1, #g[2] do
      args[#args + 1] = g[2][j]
      args[#args + 1] = vals[g[3][j]]
    end
    ix.n = ix.n + redis.call('HSET', ixkey(ix, g[1]), unpack(args))
  end
end

-- ixdel forgets fps.
local function ixdel(ix, fps)
  if #fps == 0 then
    return
  end
  kbclear(ix, fps)
  local short = {}
  for i = 1, #fps do
    short[i] = ixshort(fps[i])
  end
  fps = short
  ixload(ix)
  if not ixdense(ix, fps) then
    for i = 1, #fps do
      ix.n = ix.n - redis.call('HDEL', ixkey(ix, ixslot(ix, fps[i])), fps[i])
    end
    return
  end
  for _, g in ipairs(ixgroup(ix, fps)) do
    ix.n = ix.n - redis.call('HDEL', ixkey(ix, g[1]), unpack(g[2]))
  end
end

-- ixsplit splits sub-hashes while the index is fuller than IX_TARGET per sub-hash.
local function ixsplit(ix)
  for _ = 1, IX_SPLITS do
    local m = ix.m
    if ix.n <= IX_TARGET * (m + ix.split) then
      return
    end
    local old, newk = ixkey(ix, ix.split), ix.split + m
    local all = redis.call('HGETALL', old)
    local mv, keep, gone = {}, {}, 0
    for i = 1, #all, 2 do
      local to = keep
      if fphash(all[i]) % (2 * m) == newk then
        to, gone = mv, gone + 1
      end
      to[#to + 1] = all[i]
      to[#to + 1] = all[i + 1]
    end
    if gone > 0 then
      -- Rebuilding the half that stays costs less than deleting the half that goes
      -- from a listpack one field at a time (each a search and a move of the rest).
      redis.call('HSET', ixkey(ix, newk), unpack(mv))
      redis.call('DEL', old)
      if #keep > 0 then
        redis.call('HSET', old, unpack(keep))
      end
    end
    ix.split = ix.split + 1
    if ix.split == m then
      ix.level, ix.split, ix.m = ix.level + 1, 0, 2 * m
    end
  end
end

-- ixflush splits what needs splitting and saves the index state if it changed.
local function ixflush(ix)
  if not ix.loaded then
    return -- nothing read, so nothing changed
  end
  ixsplit(ix)
  if ix.n ~= ix.n0 or ix.level ~= ix.l0 or ix.split ~= ix.s0 then
    redis.call('HSET', ix.key, 'level', itoa(ix.level), 'split', itoa(ix.split), 'n', itoa(ix.n))
    ix.n0, ix.l0, ix.s0 = ix.n, ix.level, ix.split
  end
end

-- doneOf reads a state: its time (unix ms, whole seconds), and its cancels' routes
-- (nil when delivered).
local function doneOf(v)
  if not v or string.sub(v, 1, 1) == 'p' then -- none, or a cold message's place (cold.lua)
    return nil, nil
  end
  if string.sub(v, 1, 1) == 'c' then
    local bar = string.find(v, '|', 2, true)
    return tonumber(string.sub(v, 2, bar - 1)) * 1000, string.sub(v, bar + 1)
  end
  return tonumber(v) * 1000, nil
end

-- doneAt is the state of an id delivered at now (unix ms, a string): the time in whole
-- seconds, which a listpack keeps in 5 bytes (milliseconds would take 9).
local function doneAt(now)
  return string.format('%d', math.floor(tonumber(now) / 1000))
end

-- cancelledAt is the state of an id cancelled at now (unix ms) for routes.
local function cancelledAt(now, routes)
  return 'c' .. doneAt(now) .. '|' .. routes
end

-- dnrecord notes fps in the done slice of now (unix ms, a string): one RPUSH of them
-- all to that slice's list, and the slice's member in dn when the push started it.
-- width is the slice width in ms (a string; whole seconds, so a slice holds exactly the
-- states whose second falls in it).
local function dnrecord(ix, fps, now, width)
  if #fps == 0 then
    return
  end
  local w = tonumber(width)
  local start = tonumber(now)
  start = start - start % w
  local member = string.format('%d', start) .. ':' .. width
  -- A slice's list is non-empty only while dn holds its member (dntrim removes the
  -- member once the list is gone), and the member's score is fixed by its name: only
  -- the push that starts the list adds it.
  local short = {}
  for i = 1, #fps do
    short[i] = ixshort(fps[i])
  end
  if redis.call('RPUSH', ix.dn .. ':' .. member, table.concat(short)) == 1 then
    redis.call('ZADD', ix.dn, string.format('%d', start + w), member)
  end
end

-- dntrim forgets the ids of the done slices that ended at or before `before`: reading
-- at most `limit` fps of the oldest slices (an element of a slice's list holds the fps
-- of one call; tcur says how far into the head element the last trim read), it deletes
-- those whose state is still one of that slice's time (a later cancel or ack of the
-- same id wrote a later time, recorded in a later slice). Returns how many it forgot.
local function dntrim(ix, before, limit)
  local forgot = 0
  limit = tonumber(limit)
  while limit > 0 do
    local head = redis.call('ZRANGEBYSCORE', ix.dn, '-inf', before, 'LIMIT', '0', '1')
    if #head == 0 then
      break
    end
    local member = head[1]
    local c = string.find(member, ':', 1, true)
    local s = tonumber(string.sub(member, 1, c - 1))
    local e = s + tonumber(string.sub(member, c + 1))
    local skey = ix.dn .. ':' .. member
    local off = 0
    local cur = redis.call('HGET', ix.key, 'tcur')
    if cur then
      local bar = string.find(cur, '|', 1, true)
      if string.sub(cur, 1, bar - 1) == member then
        off = tonumber(string.sub(cur, bar + 1))
      end
    end
    local elem = redis.call('LINDEX', skey, '0')
    if not elem then
      redis.call('ZREM', ix.dn, member)
      redis.call('HDEL', ix.key, 'tcur')
      kmtrimmed(ix)
    else
      local stop = math.min(#elem, off + FP * limit)
      local fps = {}
      for i = off + 1, stop - FP + 1, FP do
        fps[#fps + 1] = string.sub(elem, i, i + FP - 1)
      end
      local vals = ixget(ix, fps)
      local del = {}
      for i = 1, #fps do
        local t = doneOf(vals[i])
        if t and t >= s and t < e then
          del[#del + 1] = fps[i]
        end
      end
      ixdel(ix, del)
      forgot = forgot + #del
      limit = limit - math.max(#fps, 1)
      if stop >= #elem then
        redis.call('LPOP', skey)
        redis.call('HDEL', ix.key, 'tcur')
      else
        redis.call('HSET', ix.key, 'tcur', member .. '|' .. string.format('%d', stop))
      end
    end
  end
  return forgot
end
