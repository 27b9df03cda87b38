package lua

import _ "embed"

// The ordered_* scripts (strict per-key order, order.lua) wrap park, ack, retry,
// cancel, recover and reschedule without changing them: the wrapped
// script runs as a function (wrap), with order.lua's bookkeeping before and after it
// in the same atomic call. Each wrapper takes the wrapped script's KEYS and ARGV
// unchanged, plus the keys named below after them (and, when the wrapped script takes
// it, the slot guard last: scheduler/store/slotguard.go).

//go:embed order.lua
var order string

// wrap runs body (a whole script, helpers excluded) as the function body() inside the
// wrapper whose code is tail.
func wrap(helpers, body, tail string) string {
	return helpers + order + "local function body()\n" + body + "\nend\n" + tail
}

var (
	// OrderedPark: park's 7 keys, then ko, ki and one key per quintuple: its key's
	// queue, or ko itself for a message without a key. Returns park's reply.
	OrderedPark = wrap(routes+counts+index+cold, park, `
ostart(KEYS[8], KEYS[9], KEYS[1], KEYS[2])
ARGV[2] = '-1' -- keyed messages never go to the cold tier (their key's queue holds them)
local out = body()
for j = 1, #out do
  local kz = KEYS[9 + j]
  if kz ~= KEYS[8] and out[j] == 'parked' then
    local i = (j - 1) * 5 + 3
    oadd(ARGV[i], tonumber(ARGV[i + 1]), kz)
  end
end
return out
`)
	// OrderedAck: ack's 7 keys (the 7th is due), then ko, ki. Returns { acked,
	// trimmed, woke }: woke is the earliest due time of a head promoted now, -1 if none.
	OrderedAck = wrap(counts+index+successor, ack, `
ostart(KEYS[8], KEYS[9], KEYS[7], KEYS[1])
local ids = {}
local step = ARGV[5] == '1' and 3 or 2
for i = 7, #ARGV, step do
  ids[#ids + 1] = ARGV[i]
end
local pre = opre(ids)
local r = body()
ogoneIfLeft(pre)
r[3] = O.woke
return r
`)
	// OrderedRetry: retry's 6 keys, then ko, ki. Returns { requeued, dead, woke }: a
	// dead-lettered head unblocks its key; a retried one stays its head.
	OrderedRetry = wrap(counts+successor, retry, `
ostart(KEYS[7], KEYS[8], KEYS[1], KEYS[2])
local ids = {}
for i = 2, #ARGV, 4 do
  ids[#ids + 1] = ARGV[i]
end
local pre = opre(ids)
local r = body()
for _, p in ipairs(pre) do
  if redis.call('ZSCORE', KEYS[4], p[1]) then
    ogone(p[1], p[2], p[3])
  elseif redis.call('ZSCORE', KEYS[1], p[1]) then
    oclaimed(p[1])
  end
end
r[3] = O.woke
return r
`)
	// OrderedRecover: recover's 5 keys, then ko, ki. Returns { moved, more, woke }:
	// recovered heads stay heads (marked claimed); then a bounded sweep of the heads.
	OrderedRecover = wrap(counts+successor, recover, `
ostart(KEYS[6], KEYS[7], KEYS[1], KEYS[3])
local page = {}
if O.on then
  page = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ARGV[3] or ARGV[1], 'LIMIT', 0, ARGV[2])
end
local r = body()
for _, id in ipairs(page) do
  if redis.call('ZSCORE', KEYS[1], id) then
    oclaimed(id)
  end
end
osweep(32)
r[3] = O.woke
return r
`)
	// OrderedCancel: cancel's 8 keys, then ko, ki. Returns cancel's reply; a cancelled
	// head is replaced by the next of its key.
	OrderedCancel = wrap(routes+counts+index+successor+cold, cancel, `
ostart(KEYS[9], KEYS[10], KEYS[1], KEYS[2])
local pre = opre({ ARGV[1] })
local r = body()
ogoneIfLeft(pre)
return r
`)
	// OrderedReschedule: reschedule's 6 keys, then ko, ki and the key queue of the
	// message's key (ko when none). A message of an ordered key is not rescheduled:
	// "ordered". A requeued dead letter of an ordered key joins its key's queue.
	OrderedReschedule = wrap(counts+index+cold, reschedule, `
ostart(KEYS[7], KEYS[8], KEYS[1], KEYS[2])
if redis.call('HEXISTS', KEYS[8], ARGV[1]) == 1 then
  return 'ordered'
end
local r = body()
if r == 'dead' and KEYS[9] ~= KEYS[7] then
  oadd(ARGV[1], tonumber(ARGV[2]), KEYS[9])
end
return r
`)
	// OrderedReplace: replace's 8 keys, then ko, ki and one key per quintuple: its
	// key's queue, or ko itself for a message without a key. Returns replace's reply.
	// A stored id whose key (or keylessness) differs from the one given is refused
	// before replace runs ("refused:<prior>"): never a second copy. A replaced pending
	// message leaves its key and joins it anew at its new due time (the key's order is
	// recomputed: it may become or stop being the unclaimed head); a newly parked one
	// (new, delivered, dead) joins its key; an in-flight one keeps its place (its
	// successor takes it when acked: the key stays blocked until it is delivered).
	OrderedReplace = routes + counts + index + successor + cold + order + `
ostart(KEYS[9], KEYS[10], KEYS[1], KEYS[2])
-- New versions go to due, never to the cold tier (a keyed one joins its key's queue).
local out, keep, argv = {}, {}, { ARGV[1], '-1' }
local j = 0
for i = 3, #ARGV, 5 do
  local id = ARGV[i]
  j = j + 1
  local kz, m = oinfo(id)
  local prior = nil
  if redis.call('HEXISTS', KEYS[2], id) == 1 and (kz or KEYS[9]) ~= KEYS[10 + j] then
    if redis.call('ZSCORE', KEYS[1], id) then
      prior = 'pending'
    elseif redis.call('ZSCORE', KEYS[3], id) then
      prior = 'inflight'
    end
  end
  if prior then
    out[j] = 'refused:' .. prior
  else
    keep[#keep + 1] = j
    for k = 0, 4 do
      argv[#argv + 1] = ARGV[i + k]
    end
  end
end
local function body(ARGV)
` + replace + `
end
local r = body(argv)
for n, jj in ipairs(keep) do
  local i = (n - 1) * 5 + 3
  local id, d, kz = argv[i], tonumber(argv[i + 1]), KEYS[10 + jj]
  local res = r[n]
  out[jj] = res
  if res ~= 'replaced:inflight' and string.sub(res, 1, 8) ~= 'refused:' then
    -- read now, not before body: the same id may come again in the batch
    local okz, om = oinfo(id)
    if okz then
      ogone(id, okz, om)
    end
    if kz ~= KEYS[9] then
      oadd(id, d, kz)
    end
  end
end
return out
`
)
