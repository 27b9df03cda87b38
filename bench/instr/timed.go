package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// afterPrefill is called by a workload once its prefill is parked (-time: where the
// measured part starts).
var afterPrefill = func(context.Context) {}

// workloadOf runs o's layout's workload up to stage upto.
func workloadOf(ctx context.Context, rdb *redis.Client, o options, upto int) error {
	if o.layout == "buckets" {
		return bucketWorkload(ctx, rdb, o, upto)
	}
	if o.layout != "store" {
		return fmt.Errorf("-layout %q: store or buckets", o.layout)
	}
	return workload(ctx, rdb, o, upto)
}

// timed runs the whole workload (park, claim and ack) once on a plain redis-server and
// prints, per message of its rounds, redis-server's CPU time (INFO cpu, user and system)
// and the time commandstats gives its script calls, the prefill left out: a time, so
// compare two layouts run one after the other, in both orders.
func timed(o options) error {
	rdb, stop, err := startPlain(o.server)
	if err != nil {
		return err
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	var cpu0, usec0 float64
	afterPrefill = func(ctx context.Context) {
		_ = rdb.ConfigResetStat(ctx).Err()
		cpu0 = serverCPU(ctx, rdb)
		usec0 = 0
	}
	if err := workloadOf(ctx, rdb, o, len(stages)-1); err != nil {
		return err
	}
	cpu := serverCPU(ctx, rdb) - cpu0
	usec := scriptUsec(ctx, rdb) - usec0
	msgs := float64(o.batch * o.rounds)
	fmt.Printf("%s: redis-server CPU %.2f µs per message, script calls %.2f µs (%d messages, cd bench && go run ./instr -time -layout %s -batch %d -spread %d -rounds %d)\n",
		o.layout, cpu*1e6/msgs, usec/msgs, int(msgs), o.layout, o.batch, o.spread, o.rounds)
	return nil
}

// startPlain starts redis-server (no persistence) on a free port and returns a client
// of it and a function that stops both.
func startPlain(server string) (*redis.Client, func(), error) {
	port, err := freePort()
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(server, "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
	if err := cmd.Start(); err != nil {
		return nil, nil, fmt.Errorf("redis-server: %w", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port)})
	stop := func() { _ = rdb.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for rdb.Ping(ctx).Err() != nil {
		if ctx.Err() != nil {
			stop()
			return nil, nil, fmt.Errorf("redis-server did not answer on port %d", port)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return rdb, stop, nil
}

// serverCPU is redis-server's CPU time so far, user and system, in seconds.
func serverCPU(ctx context.Context, rdb *redis.Client) float64 {
	var t float64
	for _, line := range strings.Split(rdb.Info(ctx, "cpu").Val(), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok && (k == "used_cpu_sys" || k == "used_cpu_user") {
			f, _ := strconv.ParseFloat(v, 64)
			t += f
		}
	}
	return t
}

// scriptUsec is the time commandstats gives the script calls (EVALSHA, EVAL, FCALL)
// since the last reset (µs); the commands a script runs are in its time (and counted
// again on their own lines, which this leaves out).
func scriptUsec(ctx context.Context, rdb *redis.Client) float64 {
	var t float64
	for _, line := range strings.Split(rdb.Info(ctx, "commandstats").Val(), "\n") {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, "cmdstat_evalsha:") && !strings.HasPrefix(line, "cmdstat_eval:") && !strings.HasPrefix(line, "cmdstat_fcall:") {
			continue
		}
		_, v, _ := strings.Cut(line, "usec=")
		v, _, _ = strings.Cut(v, ",")
		f, _ := strconv.ParseFloat(v, 64)
		t += f
	}
	return t
}
