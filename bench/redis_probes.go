package main

import (
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
)

// RedisProbe is one of the layout probes: a script run one call at a time by
// redis-benchmark, with the time per call that commandstats gives the script and each
// command it ran. The store's per-message cost is a sum of such commands, so the probes
// price a layout choice on this Redis without building it.
type RedisProbe struct {
	Name        string             `json:"name"`
	Calls       int64              `json:"calls"`
	UsecPerCall map[string]float64 `json:"usec_per_call"` // evalsha and each command inside
}

// probePrefill fills the probes' keys with the shapes of a live shard: KEYS[1], a sorted
// set of 200,000 ids of the Kafka default form due a few ms apart (a due set); KEYS[2]
// and KEYS[3], 60,000 ids each in a sorted set and a hash (the messages in flight at a
// steady rate).
const probePrefill = `
for i = 1, 200000 do
  redis.call('ZADD', KEYS[1], 1796000000000 + i * 3, 'orders.delay/' .. (i % 6) .. '/' .. (1000000 + i) .. '/a1b2c3d4e5f6')
end
for i = 1, 60000 do
  local id = 'orders.delay/1/' .. (5000000 + i) .. '/ffffffffffff'
  redis.call('ZADD', KEYS[2], 1796000000000, id)
  redis.call('HSET', KEYS[3], id, '1796000000000')
end
return 1`

// probeScript is every probe, chosen by ARGV[1]; ARGV[2] is redis-benchmark's random
// number, so that each call adds and removes ids of its own.
//
//	scores:   the claim's read of the head of a due set, 1,000 ids with their scores
//	noscores: the same without the scores (the time the scores' text costs)
//	zset:     100 ids into an in-flight sorted set under one deadline, then out again
//	hash:     the same 100 into and out of a hash (a deadline per field)
const probeScript = `
local mode = ARGV[1]
if mode == 'scores' then
  return #redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '1796000003000', 'WITHSCORES', 'LIMIT', '0', '1000')
elseif mode == 'noscores' then
  return #redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '1796000003000', 'LIMIT', '0', '1000')
end
local ids, args = {}, {}
for i = 1, 100 do
  ids[i] = 'orders.delay/3/' .. (tonumber(ARGV[2]) * 100 + i) .. '/a1b2c3d4e5f6'
end
if mode == 'zset' then
  for i = 1, 100 do args[2 * i - 1], args[2 * i] = '1796000012345', ids[i] end
  redis.call('ZADD', KEYS[2], unpack(args))
  return redis.call('ZREM', KEYS[2], unpack(ids))
end
for i = 1, 100 do args[2 * i - 1], args[2 * i] = ids[i], '1796000012345' end
redis.call('HSET', KEYS[3], unpack(args))
return redis.call('HDEL', KEYS[3], unpack(ids))`

// runRedisProbes runs each probe on e's Redis, one client, and records commandstats'
// time per call of the script and of the commands inside it.
func runRedisProbes(e *env) ([]RedisProbe, error) {
	keys := []string{"probe:due", "probe:zi", "probe:hi"}
	if err := e.redis.rdb.Eval(e.ctx, probePrefill, keys).Err(); err != nil {
		return nil, fmt.Errorf("layout probes: prefill: %w", err)
	}
	sha, err := e.redis.rdb.ScriptLoad(e.ctx, probeScript).Result()
	if err != nil {
		return nil, err
	}
	n := pick(e, 3000, 300)
	var out []RedisProbe
	for _, pr := range []struct {
		mode string
		want int64 // the reply of one call: elements read, or ids removed
	}{{"scores", 2000}, {"noscores", 1000}, {"zset", 100}, {"hash", 100}} {
		mode, want := pr.mode, pr.want
		// One call first, checked: redis-benchmark counts an error reply as a request.
		got, err := e.redis.rdb.EvalSha(e.ctx, sha, keys, mode, "1").Int64()
		if err != nil || got != want {
			return nil, fmt.Errorf("layout probe %s: replied %d (%v), want %d", mode, got, err, want)
		}
		if err := e.redis.rdb.ConfigResetStat(e.ctx).Err(); err != nil {
			return nil, err
		}
		args := append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(e.redis.port), "-c", "1", "-n", strconv.Itoa(n),
			"-r", "100000", "evalsha", sha, "3"}, append(keys, mode, "__rand_int__")...)
		if b, err := exec.CommandContext(e.ctx, "redis-benchmark", args...).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("layout probe %s: %w: %s", mode, err, b)
		}
		p := RedisProbe{Name: mode, UsecPerCall: map[string]float64{}}
		for name, st := range e.redis.commandStats(e.ctx) {
			if st.Calls == 0 || strings.HasPrefix(name, "config|") { // redis-benchmark's own, and the reset
				continue
			}
			if name == "evalsha" {
				p.Calls = st.Calls
			}
			p.UsecPerCall[name] = st.Usec / float64(st.Calls)
		}
		logf("layout probe %-8s %8.1f µs a call %v", mode, p.UsecPerCall["evalsha"], p.UsecPerCall)
		out = append(out, p)
	}
	return out, nil
}

// writeProbes prints the probes' table: the script's time per call and the commands'.
func writeProbes(b *strings.Builder, probes []RedisProbe) {
	b.WriteString("Layout probes (one client, commandstats' µs per call: the script, then each command in it):\n\n")
	t := newTable(b, "probe", "calls", "script µs", "commands µs")
	for _, p := range probes {
		var inner []string
		for name, us := range p.UsecPerCall {
			if name != "evalsha" {
				inner = append(inner, fmt.Sprintf("%s %.1f", name, us))
			}
		}
		sort.Strings(inner)
		t.row(p.Name, fmt.Sprint(p.Calls), fmt.Sprintf("%.1f", p.UsecPerCall["evalsha"]), strings.Join(inner, ", "))
	}
	b.WriteString("\n")
}
