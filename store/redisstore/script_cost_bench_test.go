package redisstore

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// BenchmarkStoreScriptCost reports the time Redis itself spends in the scripts per
// message (INFO commandstats: FCALL, EVALSHA and EVAL usec), for park, replace (x-delay-replace
// of the messages just parked: the pending case), claim and ack in calls of 500 on one
// shard, which the client-side timings of the other benchmarks bury under
// round trips and scheduling on a busy machine. Compare two builds by running both,
// interleaved, and taking the best of several runs:
//
//	go test ./store/redisstore -run '^$' -bench 'BenchmarkStoreScriptCost' -count 6
//
// DELAYBRIDGE_SCRIPT_BATCH=5 makes the calls that small instead (the fixed cost of a
// call then shows: a steady flow over 64 shards parks one or two messages per call).
// These messages are due now, so the cold tier never holds them. The done window's
// share shows in three sub-benchmarks: "window=hour" (remembered for an hour, never
// trimmed), "window=off" (done_window 0: nothing remembered, nothing looked up) and
// "window=trimming" (a 10 s window while each call's clock advances 250 ms, so that
// after 40 rounds every ack also forgets about as many ids as it records: the steady
// state of a long run).
//
// "ids=kafka" runs the same with ids of the Kafka default form (consecutive offsets of
// one partition), which the done window remembers in their blocks' slots instead of
// index entries (lua/includes/index.lua).
func BenchmarkStoreScriptCost(b *testing.B) {
	for _, kafka := range []bool{false, true} {
		ids := map[bool]string{false: "short", true: "kafka"}[kafka]
		b.Run("window=hour,ids="+ids, func(b *testing.B) { benchScriptCost(b, time.Hour, 0, kafka) })
		b.Run("window=off,ids="+ids, func(b *testing.B) { benchScriptCost(b, 0, 0, kafka) })
		b.Run("window=trimming,ids="+ids, func(b *testing.B) { benchScriptCost(b, 10*time.Second, 250, kafka) })
	}
}

// benchScriptCost measures the scripts with done window `window`; the ack of round i
// says the time is stepMs × i later than the first. kafka: ids of the Kafka default
// form, else short ones.
func benchScriptCost(b *testing.B, window time.Duration, stepMs int64, kafka bool) {
	s, c := benchStore(b, 1)
	s.opt.DoneWindow = window
	ctx := context.Background()
	tok, err := s.AcquireLease(ctx, 0, "bench", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	batch := 500
	if v, err := strconv.Atoi(os.Getenv("DELAYBRIDGE_SCRIPT_BATCH")); err == nil && v > 0 {
		batch = v
	}
	var park, replace, claim, ack float64
	msgs := 0
	b.ResetTimer()
	for i := range b.N {
		envs := make([]*envelope.Envelope, batch)
		for j := range envs {
			id := fmt.Sprintf("c%d-%d", i, j)
			if kafka {
				id = fmt.Sprintf("orders.delay/3/%d/%012x", i*batch+j, i*batch+j)
			}
			envs[j] = benchEnv(id, 1_700_000_000_000)
		}
		t0 := scriptUsec(b, c)
		if _, _, err := s.Park(ctx, envs); err != nil {
			b.Fatal(err)
		}
		tr := scriptUsec(b, c)
		if _, _, err := s.ReplaceEach(ctx, envs); err != nil {
			b.Fatal(err)
		}
		t1 := scriptUsec(b, c)
		items, _, err := s.Claim(ctx, 0, "bench", tok, 1_700_000_000_000, 1_700_000_030_000, batch)
		if err != nil || len(items) != batch {
			b.Fatalf("claim: %d, %v", len(items), err)
		}
		t2 := scriptUsec(b, c)
		if err := s.AckEnvelopes(ctx, items, 1_700_000_000_000+int64(i)*stepMs); err != nil {
			b.Fatal(err)
		}
		t3 := scriptUsec(b, c)
		park, replace, claim, ack = park+tr-t0, replace+t1-tr, claim+t2-t1, ack+t3-t2
		msgs += batch
	}
	b.ReportMetric(park/float64(msgs), "redis-µs/park")
	b.ReportMetric(replace/float64(msgs), "redis-µs/replace")
	b.ReportMetric(claim/float64(msgs), "redis-µs/claim")
	b.ReportMetric(ack/float64(msgs), "redis-µs/ack")
	// ids remembered at the end: flat once the trim keeps up
	n, _ := c.HGet(ctx, s.keys[0].ix, "n").Int64()
	b.ReportMetric(float64(n), "ids-remembered")
}

// scriptUsec is the total time Redis has spent in FCALL, EVALSHA and EVAL so far.
func scriptUsec(b *testing.B, c *redis.Client) float64 {
	b.Helper()
	return scriptStat(b, c).usec
}

// BenchmarkStoreRedisCPU reports redis-server's own CPU time per message (INFO cpu,
// read before and after the loop only) over park, claim and ack of Kafka default ids in
// calls of DELAYBRIDGE_SCRIPT_BATCH (default 30), with a 10 s done window trimming as
// much as it records: the scripts plus reading their arguments, writing their replies
// and the event loop, which BenchmarkStoreScriptCost's script times leave out.
//
//	go test ./store/redisstore -run '^$' -bench BenchmarkStoreRedisCPU -benchtime 2000x
func BenchmarkStoreRedisCPU(b *testing.B) {
	s, c := benchStore(b, 1)
	s.opt.DoneWindow = 10 * time.Second
	ctx := context.Background()
	tok, err := s.AcquireLease(ctx, 0, "bench", time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	batch := 30
	if v, err := strconv.Atoi(os.Getenv("DELAYBRIDGE_SCRIPT_BATCH")); err == nil && v > 0 {
		batch = v
	}
	const due = 1_700_000_000_000
	cpu0 := redisCPU(b, c)
	b.ResetTimer()
	for i := range b.N {
		envs := make([]*envelope.Envelope, batch)
		for j := range envs {
			envs[j] = benchEnv(fmt.Sprintf("orders.delay/3/%d/%012x", i*batch+j, i*batch+j), due)
		}
		if _, _, err := s.Park(ctx, envs); err != nil {
			b.Fatal(err)
		}
		items, _, err := s.Claim(ctx, 0, "bench", tok, due, due+30_000, batch)
		if err != nil || len(items) != batch {
			b.Fatalf("claim: %d, %v", len(items), err)
		}
		if err := s.AckEnvelopes(ctx, items, due+int64(i)*250); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric((redisCPU(b, c)-cpu0)/float64(b.N*batch), "redis-cpu-µs/msg")
}

// redisCPU is redis-server's CPU time so far (INFO cpu: used_cpu_user + used_cpu_sys),
// in µs.
func redisCPU(b *testing.B, c *redis.Client) float64 {
	b.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		b.Fatal(err)
	}
	var sec float64
	for _, line := range strings.Split(info, "\n") {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":")
		if k == "used_cpu_user" || k == "used_cpu_sys" {
			n, _ := strconv.ParseFloat(v, 64)
			sec += n
		}
	}
	return sec * 1e6
}
