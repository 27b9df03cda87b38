package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// BenchmarkStoreCallCost reports the Redis time of one script call (INFO commandstats:
// usec / calls of FCALL, EVALSHA and EVAL) of park, claim and ack with batches of 0, 1,
// 10 and 50 messages on one shard: the fixed cost of a call, and what each message adds.
// "batch=0" is a park and an ack of no message and a claim that finds none due.
//
//	go test ./store/redisstore -run '^$' -bench 'BenchmarkStoreCallCost' -count 3
func BenchmarkStoreCallCost(b *testing.B) {
	for _, n := range []int{0, 1, 10, 50} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) { benchCallCost(b, n) })
	}
}

func benchCallCost(b *testing.B, batch int) {
	s, c := benchStore(b, 1)
	ctx := context.Background()
	tok, err := s.AcquireLease(ctx, 0, "bench", 1<<40)
	if err != nil {
		b.Fatal(err)
	}
	var park, claim, ack callStat
	b.ResetTimer()
	for i := range b.N {
		envs := make([]*envelope.Envelope, batch)
		for j := range envs {
			envs[j] = benchEnv(fmt.Sprintf("c%d-%d", i, j), t0)
		}
		p0 := scriptStat(b, c)
		if batch == 0 {
			parkNone(b, s)
		} else if _, _, err := s.Park(ctx, envs); err != nil {
			b.Fatal(err)
		}
		p1 := scriptStat(b, c)
		items, _, err := s.Claim(ctx, 0, "bench", tok, t0, t0+30_000, max(batch, 1))
		if err != nil || len(items) != batch {
			b.Fatalf("claim: %d, %v", len(items), err)
		}
		p2 := scriptStat(b, c)
		if batch == 0 {
			ackNone(b, s)
		} else if err := s.AckEnvelopes(ctx, items, t0); err != nil {
			b.Fatal(err)
		}
		p3 := scriptStat(b, c)
		park.add(p0, p1)
		claim.add(p1, p2)
		ack.add(p2, p3)
	}
	b.ReportMetric(park.perCall(), "redis-µs/park")
	b.ReportMetric(claim.perCall(), "redis-µs/claim")
	b.ReportMetric(ack.perCall(), "redis-µs/ack")
}

// parkNone and ackNone are a park and an ack call of no message on shard 0.
func parkNone(b *testing.B, s *Store) {
	sc, keys, args := s.parkNoneCall(0)
	if err := s.eval(context.Background(), sc, keys, args...).Err(); err != nil {
		b.Fatal(err)
	}
}

func ackNone(b *testing.B, s *Store) {
	cl := s.ackCall(0, t0)
	if err := s.eval(context.Background(), cl.sc, cl.keys, cl.args...).Err(); err != nil {
		b.Fatal(err)
	}
}

// callStat sums script calls and their Redis time.
type callStat struct{ usec, calls float64 }

func (a *callStat) add(from, to callStat) {
	a.usec += to.usec - from.usec
	a.calls += to.calls - from.calls
}

func (a *callStat) perCall() float64 {
	if a.calls == 0 {
		return 0
	}
	return a.usec / a.calls
}

// scriptStat is the calls and time Redis has spent in FCALL, EVALSHA and EVAL so far.
func scriptStat(b *testing.B, c *redis.Client) callStat {
	b.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var st callStat
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval" && name != "cmdstat_fcall") {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "usec":
				st.usec += n
			case "calls":
				st.calls += n
			}
		}
	}
	return st
}
