package main

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// OrderResult is the cost of strict per-key order (`order: key`): the same keyed
// workload through an unordered route and through an ordered one, one after the other
// in one run, each on a fresh Redis and its own topics.
type OrderResult struct {
	Keys       int        `json:"keys"`
	Rate       float64    `json:"offered_per_s"`
	Seconds    float64    `json:"seconds"`
	MinDelayMs int64      `json:"min_delay_ms"`
	MaxDelayMs int64      `json:"max_delay_ms"`
	Unordered  SteadyStep `json:"unordered"`
	Ordered    SteadyStep `json:"ordered"`
	Throughput float64    `json:"throughput_ratio"` // ordered / unordered
	P99        float64    `json:"p99_ratio"`        // ordered / unordered
	// The same with every delay FixedDelayMs: each key's messages arrive in due order,
	// so none waits behind a head claimed early (scheduler.lookahead) for being due
	// before it.
	FixedDelayMs    int64      `json:"fixed_delay_ms"`
	FixedUnordered  SteadyStep `json:"fixed_unordered"`
	FixedOrdered    SteadyStep `json:"fixed_ordered"`
	FixedThroughput float64    `json:"fixed_throughput_ratio"`
	FixedP99        float64    `json:"fixed_p99_ratio"`
}

const orderKeys = 10000

// hdrID is the message id header: the collector counts arrivals by it when present.
const hdrID = "x-message-id"

func runOrder(e *env) error {
	minD, maxD := time.Second, 5*time.Second
	dur := pick(e, 20*time.Second, 6*time.Second)
	rate := 10000.0
	if len(e.rates) > 0 {
		rate = e.rates[0]
	}
	r := &OrderResult{Keys: orderKeys, Rate: rate, Seconds: dur.Seconds(), MinDelayMs: minD.Milliseconds(),
		MaxDelayMs: maxD.Milliseconds()}
	e.res.Order = r
	fixed := 3 * time.Second
	r.FixedDelayMs = fixed.Milliseconds()
	for _, c := range []struct {
		ordered    bool
		minD, maxD time.Duration
		out        *SteadyStep
	}{{false, minD, maxD, &r.Unordered}, {true, minD, maxD, &r.Ordered},
		{false, fixed, fixed, &r.FixedUnordered}, {true, fixed, fixed, &r.FixedOrdered}} {
		st, err := orderStep(e, c.ordered, rate, dur, c.minD, c.maxD)
		if err != nil {
			return err
		}
		*c.out = st
	}
	r.Throughput = Ratio(r.Ordered.Throughput, r.Unordered.Throughput)
	r.P99 = Ratio(r.Ordered.Lat.P99, r.Unordered.Lat.P99)
	r.FixedThroughput = Ratio(r.FixedOrdered.Throughput, r.FixedUnordered.Throughput)
	r.FixedP99 = Ratio(r.FixedOrdered.Lat.P99, r.FixedUnordered.Lat.P99)
	logf("order: key at %.0f/s over %d keys: throughput %.0f vs %.0f/s unordered (%.2fx), p99 %.1f vs %.1f ms (%.2fx)",
		rate, orderKeys, r.Ordered.Throughput, r.Unordered.Throughput, r.Throughput, r.Ordered.Lat.P99, r.Unordered.Lat.P99, r.P99)
	return nil
}

func orderStep(e *env, ordered bool, rate float64, dur, minD, maxD time.Duration) (SteadyStep, error) {
	name := fmt.Sprintf("order-unordered-%d-%d", minD.Milliseconds(), maxD.Milliseconds())
	if ordered {
		name = fmt.Sprintf("order-keyed-%d-%d", minD.Milliseconds(), maxD.Milliseconds())
	}
	src, dst := name+".delay", name
	if err := createTopics(e.ctx, e.kafka.addr, e.partitions, src, dst); err != nil {
		return SteadyStep{}, err
	}
	if err := e.fresh(); err != nil {
		return SteadyStep{}, err
	}
	b, err := startBridge(e, name, []route{{name: "r", from: src, to: dst, ordered: ordered}}, "")
	if err != nil {
		return SteadyStep{}, err
	}
	defer b.close()
	cs0 := e.redis.commandStats(e.ctx)
	p, err := probe(e, name, src, dst, rate, dur, maxD, 60*time.Second, false,
		keyedDelayed("o", orderKeys, minD, maxD), map[string]int{"bridge": b.pid()}, true)
	if err != nil {
		return SteadyStep{}, err
	}
	st := SteadyStep{ProbeResult: p, BridgeRSS: rssBytes(b.pid())}
	st.Redis = redisCost(cs0, e.redis.commandStats(e.ctx), p.Arrived)
	st.Sustained = p.Arrived >= p.Produced.Sent && p.Produced.Rate >= 0.97*rate && p.Lat.Early == 0 && p.Lat.P99 <= 1000
	logf("  %s: throughput %.0f/s, p99 %.1f ms, sustained=%v, %.2f script calls/msg", name, p.Throughput, p.Lat.P99,
		st.Sustained, st.Redis.ScriptCallsPerMsg)
	return st, nil
}

// keyedDelayed is delayed with keys drawn from keys distinct values (the ordering key
// on an ordered route), so several messages of one key are pending at once.
func keyedDelayed(prefix string, keys int, minD, maxD time.Duration) func(int, time.Time) kafka.Message {
	base := delayed(prefix, minD, maxD)
	return func(i int, now time.Time) kafka.Message {
		m := base(i, now)
		m.Headers = append(m.Headers, kafka.Header{Key: hdrID, Value: m.Key}) // the identity the collector counts
		m.Key = []byte(prefix + "-key-" + strconv.Itoa(rand.IntN(keys)))
		return m
	}
}

func writeOrder(b *strings.Builder, x *OrderResult) {
	fmt.Fprintf(b, "## Cost of order: key (%d keys, %.0f msgs/s offered, delays %d–%d ms, %.0f s per route)\n\n",
		x.Keys, x.Rate, x.MinDelayMs, x.MaxDelayMs, x.Seconds)
	t := newTable(b, "route", "produced/s", "arrived", "throughput/s", "p50 ms", "p99 ms", "p999 ms", "max ms", "early", "dups", "Redis scripts/msg", "CPU (cores)")
	for _, s := range []struct {
		name string
		st   SteadyStep
	}{{"unordered", x.Unordered}, {"order: key", x.Ordered},
		{fmt.Sprintf("unordered, delay %d ms", x.FixedDelayMs), x.FixedUnordered},
		{fmt.Sprintf("order: key, delay %d ms", x.FixedDelayMs), x.FixedOrdered}} {
		t.row(s.name, rate(s.st.Produced.Rate), fmt.Sprintf("%d/%d", s.st.Arrived, s.st.Produced.Sent), rate(s.st.Throughput),
			ms(s.st.Lat.P50), ms(s.st.Lat.P99), ms(s.st.Lat.P999), ms(s.st.Lat.Max), fmt.Sprint(s.st.Lat.Early), fmt.Sprint(s.st.Dups),
			fmt.Sprintf("%.2f", s.st.Redis.ScriptCallsPerMsg), cores(s.st.CPU))
	}
	fmt.Fprintf(b, "\nordered / unordered: throughput %s, p99 %s; with every delay %d ms: throughput %s, p99 %s.\n\n",
		ratio(x.Throughput), ratio(x.P99), x.FixedDelayMs, ratio(x.FixedThroughput), ratio(x.FixedP99))
}
