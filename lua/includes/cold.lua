--- @include "envelope"
--- @include "counts"
--- @include "index"
-- cold: the cold tier of the shard store, included by the scripts that park, find,
-- move or promote pending messages. docs/ARCHITECTURE.md "Cold tier" gives the reasons
-- and the figures. It includes envelope.lua (uvarint, routeOf), counts.lua and
-- index.lua.
--
-- A pending message due at least the cold horizon ahead is not a member of the shard's
-- `due` sorted set and a field of its `msg` hash (~205 bytes of structure); it is one
-- element of a LIST per due-time bucket, and its id's entry in the id index (index.lua)
-- says where: "p<bucket>:<position>", both numbers in base 36. Ahead of the bucket's
-- start the shard's owner promotes the bucket (claim.lua): its elements become ordinary
-- pending messages in `due` and `msg`, so claim, ack, retry, recover and per-key order
-- never see the cold tier.
--
-- Keys (shard n, prefix P; built from the shard's `due` key, KEYS[1] of every script
-- that uses them, so they carry its hash tag {C:n}; the callers declare the shard's
-- P:{C:n}:slotguard, as for the index):
--   P:{C:n}:cb         ZSET  bucket number b -> the earliest due time parked in it (a
--                            cancel does not raise it: it may be earlier than the
--                            earliest left): the buckets that exist
--   P:{C:n}:cb:<b>     LIST  the messages due in [b*W, (b+1)*W), in arrival order;
--                            an element is fp uvarint(#id) id uvarint(due - b*W)
--                            envelope (fp: the id's 12-byte fingerprint, index.lua),
--                            or "" once cancelled, rescheduled or replaced
--   P:{C:n}:cw         HASH  wm: no message due before wm is parked cold (the buckets
--                            below it are promoted or being promoted); cur:
--                            "<b>:<position>" how far the promotion of bucket b read;
--                            n: the messages in the cold tier; x<b>: the emptied
--                            elements of bucket b (so LLEN - x<b> are live)
--
-- Elements are never removed from a bucket before the whole bucket is promoted, so a
-- position stays valid as long as the bucket exists. A cold message has exactly one
-- index entry, written when it is parked and deleted when it is promoted, cancelled,
-- rescheduled or replaced. Two ids whose fingerprints collide cannot both be cold: the
-- second is parked as an ordinary pending message (cofind compares the full id).
local CO_W = 65536 -- bucket width in ms (2^16: about 65.5 s)

-- costart returns the call's cold-tier state co, which the helpers below that touch
-- the tier take first: the shard's key prefix (from its due key), the watermark once
-- read, and the messages queued for their buckets (coadd, coflush).
-- head caches the tier's earliest bucket as ZRANGE cb 0 0 WITHSCORES read it (copromote
-- reads it last when it stops with nothing due; conext needs it again: one read, not two);
-- whatever writes cb clears it.
local function costart(dueKey)
  return { base = string.sub(dueKey, 1, #dueKey - 3), wm = nil, head = nil, q = { order = {}, by = {}, n = 0 } }
end

local function cobkey(co, b)
  return co.base .. 'cb:' .. string.format('%d', b)
end

local function couv(n)
  local out = {}
  while n >= 128 do
    out[#out + 1] = string.char(n % 128 + 128)
    n = math.floor(n / 128)
  end
  out[#out + 1] = string.char(n)
  return table.concat(out)
end

-- coparse reads an element of bucket b: id, due (unix ms), envelope, fp; nil for "".
local function coparse(el, b)
  if not el or el == '' then
    return nil
  end
  local n, pos = uvarint(el, 13)
  if not n then
    return nil
  end
  local id = string.sub(el, pos, pos + n - 1)
  local off, pos2 = uvarint(el, pos + n)
  if not off then
    return nil
  end
  return id, b * CO_W + off, string.sub(el, pos2), string.sub(el, 1, 12)
end

-- co36 writes a non-negative integer in base 36: an index state "p<b>:<position>"
-- takes ~10 bytes in base 36 against ~15 in decimal (issue 17's bytes per message).
local CO_DIGITS = '0123456789abcdefghijklmnopqrstuvwxyz'
local function co36(n)
  if n == 0 then
    return '0'
  end
  local out = ''
  while n > 0 do
    local d = n % 36
    out = string.sub(CO_DIGITS, d + 1, d + 1) .. out
    n = (n - d) / 36
  end
  return out
end

-- comark reads an index state: the bucket and position of a cold message, or nil.
local function comark(v)
  if not v or string.sub(v, 1, 1) ~= 'p' then
    return nil
  end
  local c = string.find(v, ':', 2, true)
  return tonumber(string.sub(v, 2, c - 1), 36), tonumber(string.sub(v, c + 1), 36)
end

-- cost is the index state of position pos of bucket b.
local function cost(b, pos)
  return 'p' .. co36(b) .. ':' .. co36(pos)
end

-- cofind: where id is cold, given its index state v: bucket, position, due, envelope;
-- nil when v is no cold state or a stale one.
local function cofind(co, v, id)
  local b, pos = comark(v)
  if not b then
    return nil
  end
  local got, due, env = coparse(redis.call('LINDEX', cobkey(co, b), itoa(pos)), b)
  if got ~= id then
    return nil
  end
  return b, pos, due, env
end

local function cowm(co)
  if not co.wm then
    co.wm = tonumber(redis.call('HGET', co.base .. 'cw', 'wm')) or 0
  end
  return co.wm
end

-- cocold: whether a message due at due goes to the cold tier; horizon is the cold
-- horizon in ms (negative: the cold tier is off for this call), now unix ms.
local function cocold(co, due, now, horizon)
  if horizon < 0 then
    return false
  end
  due = tonumber(due)
  return due >= now + horizon and due >= cowm(co)
end

-- coadd queues a message for its bucket; coflush appends the queued messages, one
-- RPUSH per bucket, and returns their fps and index states (the caller writes them).

local function coadd(co, id, due, env, full)
  local fp = ixshort(full) -- the index key (a Kafka-form fp also names its block: index.lua)
  due = tonumber(due)
  local b = math.floor(due / CO_W)
  -- keyed by string: gopher-lua (bridge dev's server) grows a table's array part up
  -- to a large integer key
  local g = co.q.by['b' .. b]
  if not g then
    g = { b = b, els = {}, fps = {}, min = due }
    co.q.by['b' .. b] = g
    co.q.order[#co.q.order + 1] = g
  end
  g.els[#g.els + 1] = fp .. couv(#id) .. id .. couv(due - b * CO_W) .. env
  g.fps[#g.fps + 1] = full -- ixset marks a Kafka-form id's block (kbmark.lua)
  if due < g.min then
    g.min = due
  end
  co.q.n = co.q.n + 1
end

local function coflush(co)
  if co.q.n == 0 then
    return {}, {}
  end
  local fps, marks = {}, {}
  local cb = co.base .. 'cb'
  co.head = nil
  for _, g in ipairs(co.q.order) do
    local member = string.format('%d', g.b)
    local first = redis.call('RPUSH', cobkey(co, g.b), unpack(g.els)) - #g.els
    local cur = first > 0 and tonumber(redis.call('ZSCORE', cb, member))
    if not cur or g.min < cur then
      redis.call('ZADD', cb, itoa(g.min), member)
    end
    for i = 1, #g.fps do
      fps[#fps + 1] = g.fps[i]
      marks[#fps] = cost(g.b, first + i - 1)
    end
  end
  if co.q.n > 0 then
    redis.call('HINCRBY', co.base .. 'cw', 'n', itoa(co.q.n))
  end
  co.q = { order = {}, by = {}, n = 0 }
  return fps, marks
end

-- coput appends one message to its bucket and returns its index state.
local function coput(co, id, due, env, fp)
  coadd(co, id, due, env, fp)
  local _, marks = coflush(co)
  return marks[1]
end

-- codrop empties a cold message's element (the bucket keeps its length).
local function codrop(co, b, pos)
  redis.call('LSET', cobkey(co, b), itoa(pos), '')
  redis.call('HINCRBY', co.base .. 'cw', 'n', '-1')
  redis.call('HINCRBY', co.base .. 'cw', 'x' .. itoa(b), '1')
end

-- conext: the earliest due time in the cold tier (or earlier: see cb), nil if none.
local function conext(co)
  local h = co.head or redis.call('ZRANGE', co.base .. 'cb', '0', '0', 'WITHSCORES')
  if #h == 0 then
    return nil
  end
  return tonumber(h[2])
end

-- copromote moves the elements of the buckets starting at or before upTo (unix ms)
-- into due and msg, at most budget elements, and deletes their index entries (the
-- caller has run cstart and runs cflush; the index is read only once a bucket is due
-- for promotion: ixKey is the shard's P:{C:n}:ix); returns how many it moved, how many it
-- dropped because the id had an envelope in msg already (that copy is kept: the scripts
-- never let this happen, but a promotion must not overwrite one), and whether it stopped
-- on its budget.
local function copromote(co, cs, dueKey, msgKey, ixKey, upTo, budget)
  local moved, dup, ix = 0, 0, nil
  local cw = co.base .. 'cw'
  while budget > 0 do
    co.head = nil
    local h = redis.call('ZRANGE', co.base .. 'cb', '0', '0', 'WITHSCORES')
    if #h == 0 or tonumber(h[1]) * CO_W > upTo then
      co.head = h -- nothing below changes cb: conext reads this
      if ix then
        ixflush(ix)
      end
      return moved, dup, false
    end
    local b = tonumber(h[1])
    local key = cobkey(co, b)
    if not ix then
      ix = ixstart(ixKey, '')
    end
    if cowm(co) < (b + 1) * CO_W then
      co.wm = (b + 1) * CO_W
      redis.call('HSET', cw, 'wm', itoa(co.wm))
    end
    local from = 0
    local cur = redis.call('HGET', cw, 'cur')
    if cur then
      local c = string.find(cur, ':', 1, true)
      if tonumber(string.sub(cur, 1, c - 1)) == b then
        from = tonumber(string.sub(cur, c + 1))
      end
    end
    local els = redis.call('LRANGE', key, itoa(from), itoa(from + math.min(budget, 500) - 1))
    local zadd, fps, marks = {}, {}, {}
    for i = 1, #els do
      local id, due, env, fp = coparse(els[i], b)
      if id then
        fps[#fps + 1] = fp
        marks[#fps] = cost(b, from + i - 1)
        if redis.call('HSETNX', msgKey, id, env) == 1 then
          zadd[#zadd + 1] = due
          zadd[#zadd + 1] = id
          moved = moved + 1
        else
          dup = dup + 1 -- its copy in msg stays; this one leaves the route's count
          cadd(cs, 'pending', routeOf(env), -1)
        end
      end
    end
    if #zadd > 0 then
      redis.call('ZADD', dueKey, unpack(zadd))
    end
    if #fps > 0 then
      redis.call('HINCRBY', cw, 'n', itoa(-#fps))
    end
    -- Only entries that still point here: a colliding id's state stays.
    local st, del = ixget(ix, fps), {}
    for i = 1, #fps do
      if st[i] == marks[i] then
        del[#del + 1] = fps[i]
      end
    end
    ixdel(ix, del)
    budget = budget - math.max(#els, 1)
    if #els == 0 then
      redis.call('DEL', key)
      redis.call('ZREM', co.base .. 'cb', h[1])
      redis.call('HDEL', cw, 'cur', 'x' .. h[1])
      kmpromoted(ix, b)
    else
      redis.call('HSET', cw, 'cur', h[1] .. ':' .. string.format('%d', from + #els))
    end
  end
  ixflush(ix) -- ix is set: the loop promoted at least one chunk
  return moved, dup, true
end
