--- @include "index"
-- kbruns: an ack's done runs, built by its caller (store/redisstore appendAckRuns).

-- kbruns writes the runs a[from .. to] into their blocks and notes each block's latest
-- delivery at now (unix ms): per block its name, its run count n, then n pairs of the
-- byte offset (text) of a run's first slot and the run's slots, in offset order. No id
-- is read here: kbnote and kbwrite do what kbdone does with the runs it derives.
local function kbruns(ix, a, from, to, now)
  local names, keys, at = {}, {}, {}
  local i = from
  while i <= to do
    names[#names + 1], keys[#keys + 1], at[#at + 1] = a[i], kbkey(ix, a[i]), i
    i = i + 2 + 2 * tonumber(a[i + 1])
  end
  kbnote(ix, names, keys, now)
  for k, key in ipairs(keys) do
    local s = at[k]
    kbwrite(key, a, s + 2, s + 1 + 2 * tonumber(a[s + 1]))
  end
end
