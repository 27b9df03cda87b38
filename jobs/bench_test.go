package jobs

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
	"github.com/delaybridge/delay-bridge/store/redisstore"
	"github.com/delaybridge/delay-bridge/store/storeapi"
	"github.com/delaybridge/delay-bridge/testkit"
)

// BenchmarkAt1M parks BENCH_PENDING (default 1,000,000) tiny envelopes over 64 shards
// into a redis-server it starts, then measures browse pages, dry runs and a bulk job
// (docs/OPERATIONS.md, "Browsing and bulk jobs at scale"):
//
//	go test -run XXX -bench At1M -benchtime 200x -timeout 30m ./jobs
//
// Besides ns/op each browse result reports redis-µs/op: the time Redis itself spent on
// the page's commands, from INFO commandstats before and after (another client's
// commands would count too; nothing else talks to this server). The dry runs and the
// job run once each and are logged (-v shows them).
func BenchmarkAt1M(b *testing.B) {
	n := 1_000_000
	if v, err := strconv.Atoi(os.Getenv("BENCH_PENDING")); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	rdb := testkit.StartRedis(b).Client()
	st, err := redisstore.New(ctx, rdb, redisstore.Options{Prefix: "bench", Cluster: "c", Shards: 64, DoneWindow: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	benchPark(b, st, n)
	b.Logf("parked %d messages over 64 shards in %s; used_memory %s", n, time.Since(start).Round(time.Second), redisMemory(rdb))

	pager := func(q storeapi.BrowseQuery) func(b *testing.B) {
		return func(b *testing.B) {
			cur := ""
			measure(b, rdb, func() {
				q.Cursor = cur
				p, err := st.Browse(ctx, q)
				if err != nil {
					b.Fatal(err)
				}
				cur = p.Next
			})
		}
	}
	b.Run("browse/pending/limit=100", pager(storeapi.BrowseQuery{Limit: 100}))
	b.Run("browse/pending/limit=1000", pager(storeapi.BrowseQuery{Limit: 1000}))
	b.Run("browse/route=b/limit=100", pager(storeapi.BrowseQuery{Route: "b", Limit: 100}))
	b.Run("browse/key-prefix-no-match/limit=100", pager(storeapi.BrowseQuery{KeyPrefix: "zz", Limit: 100}))
	b.Run("browse/inside-a-tie(a-tenth-due-at-one-instant)/limit=100", pager(storeapi.BrowseQuery{From: benchTie, To: benchTie, Limit: 100}))
	b.Run("browse/mid-range/limit=100", pager(storeapi.BrowseQuery{From: benchT0 + 43_200_001, Limit: 100}))

	// Dry runs and a job take seconds each: run once, logged.
	for _, c := range []struct {
		name string
		f    storeapi.JobFilter
	}{
		{"dry run, all pending (ZCOUNT per shard)", storeapi.JobFilter{State: storeapi.StatePending}},
		{"dry run, route=b (browse every page)", storeapi.JobFilter{State: storeapi.StatePending, Route: "b"}},
	} {
		var p Preview
		took, redisTook := once(b, rdb, func() {
			var err error
			if p, err = PreviewFilter(ctx, st, c.f, 10, 0); err != nil {
				b.Fatal(err)
			}
		})
		b.Logf("%s: matched %d (exact %v) in %s, Redis busy %s", c.name, p.Matched, p.Exact, took, redisTook)
	}

	// A real job last (it changes the data): reschedule what is due in the first
	// tenth of the day by an hour, while a browse page is timed now and then.
	to := benchT0 + 8_640_000
	r := New(st, Options{Instance: "bench", Poll: 10 * time.Millisecond})
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	defer func() { stop(); <-done }()
	job := func(name string, spec storeapi.JobSpec) {
		var j storeapi.Job
		took, redisTook := once(b, rdb, func() {
			var err error
			if j, err = st.CreateJob(ctx, spec, time.Now().UnixMilli()); err != nil {
				b.Fatal(err)
			}
			r.Kick()
			for {
				if j, _ = st.GetJob(ctx, j.ID, time.Now().UnixMilli()); j.State == storeapi.JobDone || j.State == storeapi.JobFailed {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		})
		b.Logf("job %s: %s, matched %d, moved %d, skipped %d, failed %d in %s (%.0f msg/s), Redis busy %s",
			name, j.State, j.Progress.Matched, j.Progress.Done, j.Progress.Skipped, j.Progress.Failed, took,
			float64(j.Progress.Done)/took.Seconds(), redisTook)
	}
	job("reschedule +1h over [t0, t0+2.4h]", storeapi.JobSpec{Kind: storeapi.JobReschedule, ShiftMs: 3_600_000,
		Filter: storeapi.JobFilter{From: benchT0, To: to}})
	// A shift far smaller than the gaps between due times (about 86 ms here): one
	// window per message.
	job("reschedule +1ms over [t0+12h, t0+12h15m] (sparse)", storeapi.JobSpec{Kind: storeapi.JobReschedule, ShiftMs: 1,
		Filter: storeapi.JobFilter{From: benchTie + 1, To: benchTie + 900_000}})
}

// once runs f and returns its wall time and Redis's own time meanwhile.
func once(b *testing.B, rdb *redis.Client, f func()) (time.Duration, time.Duration) {
	before := redisUsec(b, rdb)
	start := time.Now()
	f()
	took := time.Since(start)
	return took.Round(time.Millisecond), (time.Duration(redisUsec(b, rdb)-before) * time.Microsecond).Round(time.Millisecond)
}

const (
	benchT0  = int64(1_900_000_000_000)
	benchTie = benchT0 + 43_200_000 // every 10th message is due at this one instant
)

// benchPark parks n messages over three routes, due over one day, every tenth at
// benchTie, in pipelined batches.
func benchPark(b *testing.B, st storeapi.Store, n int) {
	envs := make([]*envelope.Envelope, 0, 5000)
	for i := range n {
		due := benchT0 + int64(i)*7919%86_400_000
		if i%10 == 0 {
			due = benchTie
		}
		envs = append(envs, &envelope.Envelope{ID: fmt.Sprintf("m%07d", i), Route: string(rune('a' + i%3)),
			SourceBroker: envelope.BrokerKafka, Source: "t", DueAt: due, ReceivedAt: benchT0,
			Key: []byte("k" + strconv.Itoa(i%1000)), Payload: []byte("x")})
		if len(envs) == cap(envs) || i == n-1 {
			if _, _, err := st.Park(context.Background(), envs); err != nil {
				b.Fatal(err)
			}
			envs = envs[:0]
		}
	}
}

// measure runs f b.N times and reports Redis's own time per run.
func measure(b *testing.B, rdb *redis.Client, f func()) {
	before := redisUsec(b, rdb)
	b.ResetTimer()
	for range b.N {
		f()
	}
	b.StopTimer()
	b.ReportMetric(float64(redisUsec(b, rdb)-before)/float64(b.N), "redis-µs/op")
}

// redisUsec sums the usec of every command in INFO commandstats except INFO itself.
func redisUsec(b *testing.B, rdb *redis.Client) int64 {
	s, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var total int64
	for _, line := range strings.Split(s, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") || name == "cmdstat_info" {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "usec="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				total += n
			}
		}
	}
	return total
}

func redisMemory(rdb *redis.Client) string {
	s, _ := rdb.Info(context.Background(), "memory").Result()
	for _, line := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory_human:"); ok {
			return v
		}
	}
	return "?"
}
