package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
)

// ProbeResult is one paced run through some path: what was produced, what arrived, and
// the lateness (or latency) distribution at the consumer.
type ProbeResult struct {
	Label    string     `json:"label"`
	Offered  float64    `json:"offered_per_s"`
	Produced paceResult `json:"produced"`
	Arrived  int        `json:"arrived"`
	Dups     int        `json:"duplicates"`
	Lat      Dist       `json:"lateness"`
	CDF      []CDFPoint `json:"cdf"`
	// Throughput is the arrival rate in the window where every delay bucket contributes
	// (from max delay after the start to the end of production); 0 if that window is
	// shorter than 2 s.
	Throughput float64 `json:"throughput_per_s"`
	CPU        CPUUse  `json:"cpu"`
	// Timeline is the lateness per second of arrival time (from the start of production).
	Timeline []TimelinePoint `json:"timeline"`
}

// DrainResult is a full-speed run: n messages preloaded, then the path started; rate is
// measured between the first and the last arrival.
type DrainResult struct {
	N       int     `json:"n"`
	Seconds float64 `json:"seconds"`
	Rate    float64 `json:"rate_per_s"`
	CPU     CPUUse  `json:"cpu"`
}

// BaselineResult is scenario 1.
type BaselineResult struct {
	Floor       []ProbeResult `json:"consumer_floor"` // producer -> consumer, no hop
	Passthrough []ProbeResult `json:"passthrough"`    // producer -> passthrough -> consumer
	PassDrain   DrainResult   `json:"passthrough_drain"`
	BridgeDrain DrainResult   `json:"bridge_drain"`
	// IngressOnly is the bridge consuming and parking only (x-delay one hour): the
	// rate at which pending grows to n.
	IngressOnly DrainResult `json:"bridge_ingress_only"`
	DrainRatio  float64     `json:"bridge_over_passthrough"`
}

// probe paces gen into src at rate for dur while a collector reads dst, then waits up
// to grace for everything to arrive. With bySent the lateness is measured from the
// producer's clock (x-bench-sent-ns), else from x-delay-due-at. cpuPids are metered
// over the run; maxDelay sizes the throughput window.
func probe(e *env, label, src, dst string, rate float64, dur, maxDelay, grace time.Duration, bySent bool,
	gen func(int, time.Time) kafka.Message, cpuPids map[string]int, warm bool) (ProbeResult, error) {
	res := ProbeResult{Label: label, Offered: rate}
	c := collect(e.kafka.addr, dst, e.partitions, bySent)
	defer c.stop()
	if warm {
		if err := warmUp(e.ctx, e.kafka.addr, src, c); err != nil {
			return res, err
		}
	}
	w := newWriter(e.kafka.addr, src)
	defer w.Close()
	meter := newCPUMeter(e.pids(cpuPids))
	start := time.Now()
	pr, err := pace(e.ctx, w, rate, dur, 0, gen)
	res.Produced = pr
	if err != nil {
		return res, fmt.Errorf("%s: produce: %w", label, err)
	}
	if !c.waitCount(e.ctx, pr.Sent, maxDelay+grace) {
		logf("%s: only %d of %d arrived within %s after production", label, c.count.Load(), pr.Sent, maxDelay+grace)
	}
	res.CPU = meter.done()
	s, dups, bad := c.snapshot()
	if bad > 0 {
		logf("%s: %d arrivals without the lateness header", label, bad)
	}
	res.Arrived, res.Dups = len(s), dups
	if from, to := start.Add(maxDelay), start.Add(dur); to.Sub(from) >= 2*time.Second {
		res.Throughput = arrivalRate(s, from, to)
	}
	arr := make([]int64, len(s))
	for i := range s {
		arr[i] = s[i].arrival
	}
	lat := lateness(s, nil)
	res.Timeline = Timeline(arr, lat, start.UnixNano(), 1)
	res.Lat = Summarize(lat)
	res.CDF = CDF(lat, 400)
	logf("%-28s offered %6.0f/s produced %6.0f/s arrived %d/%d dups %d  p50 %.2f p99 %.2f p999 %.2f max %.2f ms early %d  cpu: %s",
		label, rate, pr.Rate, res.Arrived, pr.Sent, dups, res.Lat.P50, res.Lat.P99, res.Lat.P999, res.Lat.Max, res.Lat.Early, res.CPU)
	return res, nil
}

// drain preloads n messages built by gen into src, runs start (which starts the path
// and returns its pid), and measures how fast all n arrive on dst.
func drain(e *env, label, src, dst string, n int, gen func(int, time.Time) kafka.Message, start func() (int, error)) (DrainResult, error) {
	res := DrainResult{N: n}
	w := newWriter(e.kafka.addr, src)
	pr, err := pace(e.ctx, w, 0, 0, n, gen)
	w.Close()
	if err != nil {
		return res, fmt.Errorf("%s: preload: %w", label, err)
	}
	logf("%s: preloaded %d messages at %.0f/s", label, n, pr.Rate)
	c := collect(e.kafka.addr, dst, e.partitions, false)
	defer c.stop()
	pid, err := start()
	if err != nil {
		return res, err
	}
	meter := newCPUMeter(e.pids(map[string]int{label: pid}))
	if !c.waitCount(e.ctx, n, pick(e, 300*time.Second, 90*time.Second)) {
		return res, fmt.Errorf("%s: only %d of %d arrived", label, c.count.Load(), n)
	}
	res.CPU = meter.done()
	s, _, _ := c.snapshot()
	first, last := s[0].arrival, s[0].arrival
	for _, x := range s {
		first, last = min(first, x.arrival), max(last, x.arrival)
	}
	res.Seconds = float64(last-first) / 1e9
	res.Rate = float64(len(s)-1) / res.Seconds
	logf("%s: drained %d in %.2fs = %.0f msgs/s  cpu: %s", label, n, res.Seconds, res.Rate, res.CPU)
	return res, nil
}

func startPassthrough(e *env, from, to string) (*child, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return startChild("passthrough-"+from, e.dir, nil, self, "-child", "passthrough",
		"-brokers", e.kafka.addr, "-from", from, "-to", to, "-group", "pass-"+from)
}

func runBaseline(e *env) error {
	r := &BaselineResult{}
	e.res.Baseline = r
	dur := pick(e, 10*time.Second, 3*time.Second)
	rates := pick(e, []float64{10000, 50000}, []float64{10000})
	if len(e.rates) > 0 { // -rates: the pass-through at the steady scenario's rates
		rates = e.rates
	}

	// The consumer's own floor: producer -> kfake -> consumer, no hop in between.
	for _, rate := range rates {
		t := fmt.Sprintf("floor-%d", int(rate))
		if err := createTopics(e.ctx, e.kafka.addr, e.partitions, t); err != nil {
			return err
		}
		p, err := probe(e, "floor "+strconv.Itoa(int(rate)), t, t, rate, dur, 0, 20*time.Second, true, delayed("f", 0, 0), nil, false)
		if err != nil {
			return err
		}
		r.Floor = append(r.Floor, p)
	}

	// The pass-through at the same offered rates.
	for _, rate := range rates {
		src, dst := fmt.Sprintf("pass-%d.in", int(rate)), fmt.Sprintf("pass-%d.out", int(rate))
		if err := createTopics(e.ctx, e.kafka.addr, e.partitions, src, dst); err != nil {
			return err
		}
		pt, err := startPassthrough(e, src, dst)
		if err != nil {
			return err
		}
		p, err := probe(e, "passthrough "+strconv.Itoa(int(rate)), src, dst, rate, dur, 0, 20*time.Second, true,
			delayed("p", 0, 0), map[string]int{"passthrough": pt.pid()}, true)
		pt.stop(10 * time.Second)
		if err != nil {
			return err
		}
		r.Passthrough = append(r.Passthrough, p)
	}

	// Full speed: preload, then drain through the pass-through and through the bridge.
	n := pick(e, 300000, 50000)
	if err := createTopics(e.ctx, e.kafka.addr, e.partitions, "drain-pass.in", "drain-pass.out", "drain-bridge.in", "drain-bridge.out"); err != nil {
		return err
	}
	var pt *child
	d, err := drain(e, "passthrough", "drain-pass.in", "drain-pass.out", n, delayed("d", 0, 0), func() (int, error) {
		var err error
		pt, err = startPassthrough(e, "drain-pass.in", "drain-pass.out")
		if err != nil {
			return 0, err
		}
		return pt.pid(), nil
	})
	pt.stop(10 * time.Second)
	if err != nil {
		return err
	}
	r.PassDrain = d
	var b *bridgeProc
	d, err = drain(e, "bridge", "drain-bridge.in", "drain-bridge.out", n, delayed("d", 0, 0), func() (int, error) {
		var err error
		b, err = startBridge(e, "drain", []route{{name: "drain", from: "drain-bridge.in", to: "drain-bridge.out"}}, "")
		if err != nil {
			return 0, err
		}
		if e.profile { // the full-speed costs: 2 s from half a second into the drain (it lasts ~3 s)
			go func() {
				time.Sleep(500 * time.Millisecond)
				go func() { // where the goroutines wait, two seconds into the drain
					time.Sleep(1500 * time.Millisecond)
					_ = fetchURL("http://"+b.pprof+"/debug/pprof/goroutine?debug=1", filepath.Join(e.outDir, e.stamp+"-bridge-goroutines-drain.txt"))
				}()
				path := filepath.Join(e.outDir, e.stamp+"-bridge-cpu-drain.pprof")
				if err := b.cpuProfile(path, 2); err != nil {
					logf("drain cpu profile: %v", err)
				} else {
					logf("bridge CPU profile of the drain: %s", path)
				}
			}()
		}
		return b.pid(), nil
	})
	if e.profile && b != nil { // what the drain allocated, from the bridge's start (mostly the drain)
		_ = fetchURL("http://"+b.pprof+"/debug/pprof/allocs", filepath.Join(e.outDir, e.stamp+"-bridge-allocs-drain.pprof"))
		_ = fetchURL("http://"+b.admin+"/metrics", filepath.Join(e.outDir, e.stamp+"-bridge-metrics-drain.txt"))
	}
	b.close()
	if err != nil {
		return err
	}
	r.BridgeDrain = d
	r.DrainRatio = Ratio(r.BridgeDrain.Rate, r.PassDrain.Rate)

	// Ingress alone: preload messages due in an hour and time the parking.
	if err := createTopics(e.ctx, e.kafka.addr, e.partitions, "drain-park.in", "drain-park.out"); err != nil {
		return err
	}
	if err := e.fresh(); err != nil {
		return err
	}
	r.IngressOnly, err = drainIngress(e, "drain-park.in", "drain-park.out", n)
	return err
}

// drainIngress preloads n messages due in an hour and measures how fast the bridge
// parks them (pending polled from /v1/stats every 50 ms).
func drainIngress(e *env, src, dst string, n int) (DrainResult, error) {
	res := DrainResult{N: n}
	w := newWriter(e.kafka.addr, src)
	_, err := pace(e.ctx, w, 0, 0, n, delayed("i", time.Hour, time.Hour))
	w.Close()
	if err != nil {
		return res, err
	}
	b, err := startBridge(e, "park", []route{{name: "park", from: src, to: dst}}, "")
	if err != nil {
		return res, err
	}
	defer b.close()
	meter := newCPUMeter(e.pids(map[string]int{"bridge": b.pid()}))
	var first time.Time
	deadline := time.Now().Add(pick(e, 300*time.Second, 60*time.Second))
	for {
		st, err := b.stats()
		if err == nil && st.Pending > 0 && first.IsZero() {
			first = time.Now()
		}
		if err == nil && st.Pending >= int64(n) {
			break
		}
		if time.Now().After(deadline) || e.ctx.Err() != nil {
			return res, fmt.Errorf("ingress only: %d of %d parked (err %v)", st.Pending, n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	res.CPU = meter.done()
	res.Seconds = time.Since(first).Seconds()
	res.Rate = float64(n) / res.Seconds
	logf("bridge ingress only: parked %d in %.2fs = %.0f msgs/s  cpu: %s", n, res.Seconds, res.Rate, res.CPU)
	return res, nil
}
