--- @include "index"
-- kbruns: an ack's done runs, built by its caller (store/redisstore appendAckRuns).

-- kbpatchruns writes a block's n runs a[from .. to] (offset and bytes pairs, in
-- offset order) with one GETRANGE and one SETRANGE of the span they cover when that
-- span is shorter than KB_PATCH bytes for each run beyond two (as kbpatch decides), and
-- returns whether it did.
local function kbpatchruns(key, a, from, to, n)
  local lo = tonumber(a[from])
  local hi = tonumber(a[to - 1]) + #a[to]
  if hi - lo >= (n - 2) * KB_PATCH then
    return false
  end
  local r = redis.call('GETRANGE', key, a[from], itoa(hi - 1))
  if #r < hi - lo then
    r = r .. string.rep('\0', hi - lo - #r)
  end
  local parts, at = {}, 1
  for k = from, to, 2 do
    local s = tonumber(a[k]) - lo + 1
    parts[#parts + 1] = string.sub(r, at, s - 1)
    parts[#parts + 1] = a[k + 1]
    at = s + #a[k + 1]
  end
  redis.call('SETRANGE', key, a[from], table.concat(parts))
  return true
end

-- kbruns writes the runs a[from .. to] into their blocks and notes each block's latest
-- delivery at now (unix ms): per block its name, its run count n, then n pairs of the
-- byte offset (text) of a run's first slot and the run's slots. One ZADD notes every
-- block (its count says whether one is new; then each new block's string is allocated
-- whole, as kbdone does), one SETRANGE writes each run: no id is read here.
local function kbruns(ix, a, from, to, now)
  local keys, zadd = {}, {}
  local i = from
  while i <= to do
    local name = a[i]
    keys[#keys + 1] = kbkey(ix, name)
    zadd[#zadd + 1] = now
    zadd[#zadd + 1] = name
    i = i + 2 + 2 * tonumber(a[i + 1])
  end
  if redis.call('ZADD', ix.kb, unpack(zadd)) > 0 then
    for _, key in ipairs(keys) do
      if redis.call('EXISTS', key) == 0 then
        redis.call('SETRANGE', key, KB_LAST, '\0')
      end
    end
  end
  i = from
  for _, key in ipairs(keys) do
    local n = tonumber(a[i + 1])
    local last = i + 1 + 2 * n
    if n <= 2 or not kbpatchruns(key, a, i + 2, last, n) then
      for r = i + 2, last, 2 do
        redis.call('SETRANGE', key, a[r], a[r + 1])
      end
    end
    i = last + 1
  end
end
