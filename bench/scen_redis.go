package main

import (
	"encoding/csv"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// RedisOp is one redis-benchmark run.
type RedisOp struct {
	Name     string  `json:"name"`
	Pipeline int     `json:"pipeline"`
	Requests int     `json:"requests"`
	OpsPerS  float64 `json:"ops_per_s"`
	P50Ms    float64 `json:"p50_ms"`
}

// RedisBenchResult is scenario 6: the physical limits of this Redis on this machine.
type RedisBenchResult struct {
	Clients int          `json:"clients"`
	Ops     []RedisOp    `json:"ops"`
	Probes  []RedisProbe `json:"probes,omitempty"` // redis_probes.go
}

// smallScript is the "small script" the EVALSHA line measures: one ZADD, like park's
// inner step, to price a script call against the bare command.
const smallScript = "return redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])"

func runRedisBench(e *env) error {
	sha, err := e.redis.rdb.ScriptLoad(e.ctx, smallScript).Result()
	if err != nil {
		return err
	}
	value := strings.Repeat("v", 150) // an envelope-sized hash value
	ops := []struct {
		name string
		args []string
	}{
		{"EVALSHA (1 ZADD)", []string{"evalsha", sha, "1", "bench:ev", "__rand_int__", "m:__rand_int__"}},
		{"ZADD", []string{"zadd", "bench:z", "__rand_int__", "m:__rand_int__"}},
		{"ZRANGEBYSCORE LIMIT 100", []string{"zrangebyscore", "bench:z", "-inf", "+inf", "LIMIT", "0", "100"}},
		{"HSET (150 B)", []string{"hset", "bench:h", "f:__rand_int__", value}},
	}
	r := &RedisBenchResult{Clients: 50}
	e.res.RedisBench = r
	for _, pipe := range []int{1, 16} {
		n := pick(e, 200000, 20000)
		if pipe > 1 {
			n = pick(e, 1000000, 100000)
		}
		for _, op := range ops {
			args := append([]string{"-h", "127.0.0.1", "-p", strconv.Itoa(e.redis.port), "-c", strconv.Itoa(r.Clients),
				"-n", strconv.Itoa(n), "-P", strconv.Itoa(pipe), "-r", "1000000", "--csv"}, op.args...)
			out, err := exec.CommandContext(e.ctx, "redis-benchmark", args...).Output()
			if err != nil {
				return fmt.Errorf("redis-benchmark %s: %w (apt-get install redis-tools)", op.name, err)
			}
			rps, p50, err := parseRedisCSV(out)
			if err != nil {
				return fmt.Errorf("redis-benchmark %s: %w: %s", op.name, err, out)
			}
			r.Ops = append(r.Ops, RedisOp{Name: op.name, Pipeline: pipe, Requests: n, OpsPerS: rps, P50Ms: p50})
			logf("redis-benchmark %-24s -P %-2d %10.0f ops/s  p50 %.3f ms", op.name, pipe, rps, p50)
		}
	}
	r.Probes, err = runRedisProbes(e)
	return err
}

// parseRedisCSV reads redis-benchmark --csv: a header line then "test","rps",
// "avg_latency_ms","min_latency_ms","p50_latency_ms",...
func parseRedisCSV(out []byte) (rps, p50 float64, err error) {
	recs, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil {
		return 0, 0, err
	}
	for _, rec := range recs {
		if len(rec) < 2 || rec[0] == "test" {
			continue
		}
		rps, err = strconv.ParseFloat(rec[1], 64)
		if len(rec) >= 5 {
			p50, _ = strconv.ParseFloat(rec[4], 64)
		}
		return rps, p50, err
	}
	return 0, 0, fmt.Errorf("no result line")
}
