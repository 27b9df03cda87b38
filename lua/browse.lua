-- browse: one page of a shard's sorted set after a cursor, read-only.
--
-- KEYS[1] due|inflight|dead  the set to read (ZSET id -> score)
-- ARGV[1] cursor score: return members after (ARGV[1], ARGV[2]) in (score, member) order
-- ARGV[2] cursor member: "" = start at the first member whose score >= ARGV[1]
-- ARGV[3] highest score to return (inclusive)
-- ARGV[4] limit: at most this many members
-- Returns: a flat array { id1, score1, id2, score2, ... } in (score, member) order.
--
-- (score, member) is the order Redis keeps a sorted set in, so "after the cursor" is a
-- rank: the first rank with a score above the cursor's, or with the cursor's score and a
-- member after the cursor's. Members with one score sit in member order, so that rank is
-- found by a binary search over the ranks of the cursor's score (ZCOUNT gives both ends
-- in O(log n)); however many members share a score (a million due at midnight), a page
-- costs O(log n) reads plus the page itself, never a scan.
local key = KEYS[1]
local from = ARGV[1]
local cursor = ARGV[2]
local limit = tonumber(ARGV[4])
local start
if cursor == '' then
  start = redis.call('ZCOUNT', key, '-inf', '(' .. from)
else
  local lo = redis.call('ZCOUNT', key, '-inf', '(' .. from)
  local hi = lo + redis.call('ZCOUNT', key, from, from)
  -- first rank in [lo, hi) whose member sorts after cursor; hi if none
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local m = redis.call('ZRANGE', key, mid, mid)[1]
    if m <= cursor then
      lo = mid + 1
    else
      hi = mid
    end
  end
  start = lo
end
local page = redis.call('ZRANGE', key, start, start + limit - 1, 'WITHSCORES')
local out = {}
local maxScore = tonumber(ARGV[3])
for i = 1, #page, 2 do
  if tonumber(page[i + 1]) > maxScore then
    break
  end
  out[#out + 1] = page[i]
  out[#out + 1] = page[i + 1]
end
return out
