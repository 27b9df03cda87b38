package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// redisServer is a redis-server child on a free port: no persistence (appendonly no,
// no RDB snapshots), so the benchmark measures the scripts and not the disk.
type redisServer struct {
	*child
	addr string
	port int
	rdb  *redis.Client
}

func startRedis(dir string) (*redisServer, error) {
	port := freePort()
	rdir := filepath.Join(dir, fmt.Sprintf("redis-%d", port))
	if err := os.MkdirAll(rdir, 0o755); err != nil {
		return nil, err
	}
	c, err := startChild("redis", dir, nil, "redis-server",
		"--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", rdir,
		"--save", "", "--appendonly", "no", "--protected-mode", "no")
	if err != nil {
		return nil, fmt.Errorf("%w (is redis-server on PATH? apt-get install redis-server)", err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := waitTCP(addr, 10e9); err != nil {
		c.kill()
		return nil, err
	}
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 64})
	return &redisServer{child: c, addr: addr, port: port, rdb: rdb}, nil
}

func (r *redisServer) close() {
	if r == nil {
		return
	}
	_ = r.rdb.Close()
	r.kill()
}

// info returns the fields of one INFO section.
func (r *redisServer) info(ctx context.Context, section string) map[string]string {
	out := map[string]string{}
	s, err := r.rdb.Info(ctx, section).Result()
	if err != nil {
		return out
	}
	for _, line := range strings.Split(s, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}

// usedMemory is INFO memory used_memory in bytes.
func (r *redisServer) usedMemory(ctx context.Context) int64 {
	v, _ := strconv.ParseInt(r.info(ctx, "memory")["used_memory"], 10, 64)
	return v
}

// cmdStat is one INFO commandstats line: calls and total microseconds.
type cmdStat struct {
	Calls int64   `json:"calls"`
	Usec  float64 `json:"usec"`
}

// commandStats returns INFO commandstats keyed by command (evalsha, zadd, ...).
func (r *redisServer) commandStats(ctx context.Context) map[string]cmdStat {
	out := map[string]cmdStat{}
	for k, v := range r.info(ctx, "commandstats") {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		var st cmdStat
		for _, kv := range strings.Split(v, ",") {
			kk, vv, _ := strings.Cut(kv, "=")
			switch kk {
			case "calls":
				st.Calls, _ = strconv.ParseInt(vv, 10, 64)
			case "usec":
				st.Usec, _ = strconv.ParseFloat(vv, 64)
			}
		}
		out[name] = st
	}
	return out
}

// diffStats is b - a per command, dropping commands with no calls in between.
func diffStats(a, b map[string]cmdStat) map[string]cmdStat {
	out := map[string]cmdStat{}
	for k, vb := range b {
		va := a[k]
		if d := vb.Calls - va.Calls; d > 0 {
			out[k] = cmdStat{Calls: d, Usec: vb.Usec - va.Usec}
		}
	}
	return out
}

// RedisCost is what Redis spent per delivered message over a run, from INFO
// commandstats (script calls; their inner commands are counted separately by Redis and
// left out here) and the redis-server process's CPU time.
type RedisCost struct {
	ScriptCallsPerMsg float64            `json:"script_calls_per_msg"` // FCALL + EVALSHA + EVAL
	UsecPerScriptCall float64            `json:"usec_per_script_call"`
	CPUUsecPerMsg     float64            `json:"cpu_usec_per_msg"` // redis-server user+system
	Commands          map[string]cmdStat `json:"commands"`
}

func redisCost(before, after map[string]cmdStat, msgs int) RedisCost {
	c := RedisCost{Commands: diffStats(before, after)}
	var calls int64
	var usec float64
	for _, name := range []string{"fcall", "evalsha", "eval"} {
		calls += c.Commands[name].Calls
		usec += c.Commands[name].Usec
	}
	if msgs > 0 {
		c.ScriptCallsPerMsg = float64(calls) / float64(msgs)
	}
	if calls > 0 {
		c.UsecPerScriptCall = usec / float64(calls)
	}
	return c
}
