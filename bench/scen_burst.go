package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/redisstore"
)

// BurstRun is one burst: N messages due at T0 plus a trickle due 1 s after it was sent.
type BurstRun struct {
	Label   string  `json:"label"`
	N       int     `json:"n"`
	MaxRate float64 `json:"max_rate"` // route max_rate, 0 = unlimited
	// ParkedBeforeT0 says whether every burst message was in Redis a second before T0
	// (parked straight with Store.Park, not through Kafka).
	ParkedBeforeT0 bool    `json:"parked_before_t0"`
	ParkSeconds    float64 `json:"park_seconds"`
	FirstArrival   float64 `json:"first_after_t0"` // seconds after T0
	DrainSeconds   float64 `json:"drain_seconds"`  // T0 -> last burst message arrived
	DrainRate      float64 `json:"drain_rate_per_s"`
	Arrived        int     `json:"arrived"`
	Dups           int     `json:"duplicates"`
	Burst          Dist    `json:"burst_lateness"`
	// TrickleDuring is the lateness of trickle messages due between T0 and the end of
	// the drain; TrickleOutside of those due before T0 or after the drain.
	TrickleDuring  Dist         `json:"trickle_during"`
	TrickleOutside Dist         `json:"trickle_outside"`
	TrickleSeries  [][2]float64 `json:"trickle_series"` // (due - T0 in s, lateness ms)
	DrainSeries    [][2]float64 `json:"drain_series"`   // (s after T0, fraction delivered)
	CPU            CPUUse       `json:"cpu"`
	// DrainCPU is the CPU from T0 until the last burst message arrived: the drain
	// alone (CPU covers the park, the wait for T0 and the tail as well).
	DrainCPU      CPUUse  `json:"drain_cpu"`
	BridgeRSSPeak int64   `json:"bridge_rss_peak_bytes"`
	RedisBytesPer float64 `json:"redis_bytes_per_pending"` // used_memory delta / N at T0
}

// BurstResult is scenario 3.
type BurstResult struct {
	TrickleRate float64    `json:"trickle_per_s"`
	Runs        []BurstRun `json:"runs"`
}

func runBurst(e *env) error {
	n := pick(e, 1000000, 50000)
	if e.burstN > 0 {
		n = e.burstN
	}
	r := &BurstResult{TrickleRate: 100}
	e.res.Burst = r
	limit := pick(e, 20000.0, 10000.0)
	for i, maxRate := range []float64{0, limit} {
		run, err := burstRun(e, i, n, maxRate, r.TrickleRate)
		if err != nil {
			return err
		}
		r.Runs = append(r.Runs, run)
	}
	return nil
}

func burstRun(e *env, i, n int, maxRate, trickleRate float64) (BurstRun, error) {
	run := BurstRun{N: n, MaxRate: maxRate, Label: "no max_rate"}
	if maxRate > 0 {
		run.Label = fmt.Sprintf("max_rate %.0f/s", maxRate)
	}
	name := fmt.Sprintf("burst-%d", i)
	src, dst := name+".delay", name
	if err := createTopics(e.ctx, e.kafka.addr, e.partitions, src, dst); err != nil {
		return run, err
	}
	if err := e.fresh(); err != nil {
		return run, err
	}
	// The burst is parked straight into the route's shards with the product's own
	// Store.Park (what ingress does after parsing), so this scenario measures the drain;
	// scenario 1 measures ingress. T0 leaves room for it (estimate, checked below). The
	// store is opened before the bridge starts, so that it writes the store's meta: a
	// -baseline-rev bridge from before the store recorded its format reads that meta,
	// where this tree's store refuses one written by such a build.
	store, err := redisstore.New(e.ctx, e.redis.rdb, redisstore.Options{Cluster: name, DoneWindow: time.Hour})
	if err != nil {
		return run, err
	}
	b, err := startBridge(e, name, []route{{name: "burst", from: src, to: dst, maxRate: maxRate}}, "")
	if err != nil {
		return run, err
	}
	defer b.close()
	c := collect(e.kafka.addr, dst, e.partitions, false)
	defer c.stop()
	if err := warmUp(e.ctx, e.kafka.addr, src, c); err != nil {
		return run, err
	}
	mem0 := e.redis.usedMemory(e.ctx)

	lead := time.Duration(float64(n)/40000*float64(time.Second)) + pick(e, 5*time.Second, 3*time.Second)
	start := time.Now()
	t0 := start.Add(lead).Truncate(time.Second)
	if !t0.After(start.Add(3 * time.Second)) {
		t0 = t0.Add(time.Second)
	}
	expectDrain := float64(n) / 50000
	if maxRate > 0 {
		expectDrain = float64(n) / maxRate
	}
	trickleEnd := t0.Add(time.Duration((expectDrain*1.3 + 2) * float64(time.Second))) // trickle keeps going past the drain
	logf("%s: %d messages due at T0 = start + %s, trickle %.0f/s due 1 s after sending until T0 + %s",
		run.Label, n, t0.Sub(start).Round(time.Millisecond), trickleRate, trickleEnd.Sub(t0).Round(time.Second))

	meter := newCPUMeter(e.pids(map[string]int{"bridge": b.pid()}))
	ctx, cancel := context.WithCancel(e.ctx)
	defer cancel()
	var wg sync.WaitGroup
	var trickleSent int
	wg.Add(1)
	go func() { // the trickle
		defer wg.Done()
		w := newWriter(e.kafka.addr, src)
		defer w.Close()
		gen := delayed("t", time.Second, time.Second)
		pr, err := pace(ctx, w, trickleRate, time.Until(trickleEnd.Add(-time.Second)), 0, func(i int, now time.Time) kafka.Message {
			m := gen(i, now)
			m.Headers = append(m.Headers, kafka.Header{Key: hdrClass, Value: []byte("t")})
			return m
		})
		if err != nil {
			logf("trickle: %v", err)
		}
		trickleSent = pr.Sent
	}()
	var peakRSS int64
	wg.Add(1)
	go func() { // bridge RSS peak
		defer wg.Done()
		for ctx.Err() == nil {
			peakRSS = max(peakRSS, rssBytes(b.pid()))
			sleepCtx(ctx, 200*time.Millisecond)
		}
	}()
	parkStart := time.Now()
	if err := parkRange(e.ctx, store, 0, n, func(i int, now int64) *envelope.Envelope {
		// Ids of a topic nobody produces to: records of src (the trickle) have ids
		// src/partition/offset, and parking is idempotent by id.
		return kafkaEnvelope("burst", name+".direct", i, t0.UnixMilli(), now)
	}); err != nil {
		return run, err
	}
	run.ParkSeconds = time.Since(parkStart).Seconds()
	run.ParkedBeforeT0 = time.Now().Before(t0.Add(-time.Second))
	run.RedisBytesPer = float64(e.redis.usedMemory(e.ctx)-mem0) / float64(n)
	logf("%s: parked %d in %.1fs (before T0 - 1s: %v)", run.Label, n, run.ParkSeconds, run.ParkedBeforeT0)

	// Wait for the burst (and the trickle) to arrive. The drain's own CPU is metered
	// from T0 until the whole burst is seen (polled every 200 ms: at most that late).
	limit := time.Until(t0) + time.Duration((expectDrain*4+60)*float64(time.Second))
	deadline := time.Now().Add(limit)
	sleepCtx(e.ctx, time.Until(t0))
	drainMeter := newCPUMeter(e.pids(map[string]int{"bridge": b.pid()}))
	profDone := make(chan struct{})
	if e.profile { // the drain's first seconds: the bridge at full speed
		go func() {
			defer close(profDone)
			secs := int(min(8, max(1, expectDrain/2)))
			path := filepath.Join(e.outDir, fmt.Sprintf("%s-bridge-cpu-drain-%.0f.pprof", e.stamp, maxRate))
			if err := b.cpuProfile(path, secs); err != nil {
				logf("cpu profile: %v", err)
			} else {
				logf("bridge CPU profile of the drain: %s (go tool pprof -top %s)", path, path)
			}
		}()
	} else {
		close(profDone)
	}
	for time.Now().Before(deadline) && e.ctx.Err() == nil {
		s, _, _ := c.snapshot()
		nb := 0
		for _, x := range s {
			if !x.trickle {
				nb++
			}
		}
		if nb >= n && drainMeter != nil {
			run.DrainCPU = drainMeter.done()
			drainMeter = nil
		}
		if nb >= n && time.Now().After(trickleEnd.Add(2*time.Second)) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	<-profDone
	cancel()
	wg.Wait()
	c.waitQuiet(time.Second, 10*time.Second)
	run.CPU = meter.done()
	run.BridgeRSSPeak = peakRSS

	s, dups, _ := c.snapshot()
	run.Dups = dups
	t0ns := t0.UnixNano()
	var burst []float64
	var arrivals []int64
	var during, outside []float64
	var lastBurst int64
	for _, x := range s {
		if !x.trickle {
			burst = append(burst, x.lateMs)
			arrivals = append(arrivals, x.arrival)
			lastBurst = max(lastBurst, x.arrival)
		}
	}
	run.Arrived = len(burst)
	if len(arrivals) > 0 {
		sort.Slice(arrivals, func(i, j int) bool { return arrivals[i] < arrivals[j] })
		run.FirstArrival = float64(arrivals[0]-t0ns) / 1e9
		run.DrainSeconds = float64(lastBurst-t0ns) / 1e9
		run.DrainRate = float64(len(arrivals)) / run.DrainSeconds
		step := max(1, len(arrivals)/300)
		for i := 0; i < len(arrivals); i += step {
			run.DrainSeries = append(run.DrainSeries, [2]float64{float64(arrivals[i]-t0ns) / 1e9, float64(i+1) / float64(n)})
		}
		run.DrainSeries = append(run.DrainSeries, [2]float64{run.DrainSeconds, float64(len(arrivals)) / float64(n)})
	}
	for _, x := range s {
		if !x.trickle {
			continue
		}
		dueNs := x.arrival - int64(x.lateMs*1e6)
		run.TrickleSeries = append(run.TrickleSeries, [2]float64{float64(dueNs-t0ns) / 1e9, x.lateMs})
		if dueNs >= t0ns && dueNs <= lastBurst {
			during = append(during, x.lateMs)
		} else {
			outside = append(outside, x.lateMs)
		}
	}
	sort.Slice(run.TrickleSeries, func(i, j int) bool { return run.TrickleSeries[i][0] < run.TrickleSeries[j][0] })
	run.Burst = Summarize(burst)
	run.TrickleDuring = Summarize(during)
	run.TrickleOutside = Summarize(outside)
	logf("%s: burst %d/%d arrived, first %.2fs after T0, drained in %.2fs (%.0f/s), trickle %d sent: during drain p50 %.0f p99 %.0f ms, outside p99 %.1f ms; early %d+%d  cpu: %s; during the drain: %s",
		run.Label, run.Arrived, n, run.FirstArrival, run.DrainSeconds, run.DrainRate, trickleSent,
		run.TrickleDuring.P50, run.TrickleDuring.P99, run.TrickleOutside.P99, run.Burst.Early, run.TrickleDuring.Early+run.TrickleOutside.Early, run.CPU, run.DrainCPU)
	if run.Arrived < n {
		return run, fmt.Errorf("%s: only %d of %d burst messages arrived", run.Label, run.Arrived, n)
	}
	return run, nil
}
