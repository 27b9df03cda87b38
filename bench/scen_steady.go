package main

import (
	"fmt"
	"path/filepath"
	"time"
)

// SteadyStep is one offered rate through the bridge.
type SteadyStep struct {
	ProbeResult
	Sustained bool      `json:"sustained"`
	Redis     RedisCost `json:"redis"`
	BridgeRSS int64     `json:"bridge_rss_bytes"`
	// Stages break the bridge's part of the lateness down (stages.go).
	Stages []Stage `json:"stages,omitempty"`
	// ScriptCalls is the bridge's script calls per message by script (its
	// redis_script_duration_seconds counts over the step).
	ScriptCalls map[string]float64 `json:"script_calls_per_msg_by_script,omitempty"`
}

// SteadyResult is scenario 2.
type SteadyResult struct {
	MinDelayMs    int64        `json:"min_delay_ms"`
	MaxDelayMs    int64        `json:"max_delay_ms"`
	Seconds       float64      `json:"seconds_per_step"`
	Steps         []SteadyStep `json:"steps"`
	MaxSustained  float64      `json:"max_sustained_per_s"`
	SustainedRule string       `json:"sustained_rule"`
}

const sustainedRule = "every message arrived, the producer reached ≥ 97 % of the offered rate, none early, and p99 lateness ≤ 1 s (no growing backlog)"

func runSteady(e *env) error {
	minD, maxD := time.Second, 10*time.Second
	if e.quick {
		maxD = 3 * time.Second
	}
	if e.delays[0] > 0 {
		minD, maxD = e.delays[0], e.delays[1]
	}
	dur := pick(e, 20*time.Second, 5*time.Second)
	r := &SteadyResult{MinDelayMs: minD.Milliseconds(), MaxDelayMs: maxD.Milliseconds(), Seconds: dur.Seconds(), SustainedRule: sustainedRule}
	e.res.Steady = r
	rates := pick(e, []float64{1000, 10000, 50000}, []float64{1000, 10000})
	// Above (or below) 50k: look for the highest sustained rate.
	var more []float64
	if !e.quick {
		more = []float64{75000, 100000}
	}
	if len(e.rates) > 0 {
		rates, more = e.rates, nil
	}
	run := func(rate float64) (SteadyStep, error) {
		st, err := steadyStep(e, rate, dur, minD, maxD)
		if err == nil {
			r.Steps = append(r.Steps, st)
			if st.Sustained && rate > r.MaxSustained {
				r.MaxSustained = rate
			}
		}
		return st, err
	}
	for _, rate := range rates {
		if _, err := run(rate); err != nil {
			return err
		}
	}
	last := r.Steps[len(r.Steps)-1]
	if !last.Sustained && !e.quick && len(e.rates) == 0 {
		more = []float64{20000, 30000, 40000} // 50k not sustained: find where it breaks
	}
	for _, rate := range more {
		st, err := run(rate)
		if err != nil {
			return err
		}
		if !st.Sustained && rate > 50000 {
			break
		}
	}
	return nil
}

func steadyStep(e *env, rate float64, dur, minD, maxD time.Duration) (SteadyStep, error) {
	name := fmt.Sprintf("steady-%d", int(rate))
	src, dst := name+".delay", name
	if err := createTopics(e.ctx, e.kafka.addr, e.partitions, src, dst); err != nil {
		return SteadyStep{}, err
	}
	if err := e.fresh(); err != nil {
		return SteadyStep{}, err
	}
	b, err := startBridge(e, name, []route{{name: "steady", from: src, to: dst}}, "")
	if err != nil {
		return SteadyStep{}, err
	}
	defer b.close()
	profDone := make(chan struct{})
	if e.profile { // every step: the fixed costs show at low rates
		go func() {
			defer close(profDone)
			time.Sleep(maxD + 2*time.Second) // into the steady part
			path := filepath.Join(e.outDir, fmt.Sprintf("%s-bridge-cpu-%d.pprof", e.stamp, int(rate)))
			if pprofKafka != "" {
				go func() {
					kp := filepath.Join(e.outDir, fmt.Sprintf("%s-kfake-cpu-%d.pprof", e.stamp, int(rate)))
					if err := fetchProfile(pprofKafka, kp, int(min(10, dur.Seconds()/2))); err != nil {
						logf("kfake cpu profile: %v", err)
					}
				}()
				go func() {
					time.Sleep(3 * time.Second)
					_ = fetchURL("http://"+b.pprof+"/debug/pprof/goroutine?debug=1", filepath.Join(e.outDir, fmt.Sprintf("%s-bridge-goroutines-%d.txt", e.stamp, int(rate))))
				}()
			}
			if err := b.cpuProfile(path, int(min(10, dur.Seconds()/2))); err != nil {
				logf("cpu profile: %v", err)
			} else {
				logf("bridge CPU profile at %.0f/s: %s (go tool pprof -top %s)", rate, path, path)
			}
			// Allocations since the bridge started (the profile is cumulative): with
			// -sample_index=alloc_space, what each message costs the garbage collector.
			ap := filepath.Join(e.outDir, fmt.Sprintf("%s-bridge-allocs-%d.pprof", e.stamp, int(rate)))
			if err := fetchURL("http://"+b.pprof+"/debug/pprof/allocs", ap); err != nil {
				logf("allocs profile: %v", err)
			}
		}()
	} else {
		close(profDone)
	}
	cs0 := e.redis.commandStats(e.ctx)
	m0, merr := scrapeMetrics(b.admin)
	p, err := probe(e, fmt.Sprintf("bridge %d", int(rate)), src, dst, rate, dur, maxD, 30*time.Second, false,
		delayed("s", minD, maxD), map[string]int{"bridge": b.pid()}, true)
	<-profDone
	if err != nil {
		return SteadyStep{}, err
	}
	st := SteadyStep{ProbeResult: p, BridgeRSS: rssBytes(b.pid())}
	m1, err := scrapeMetrics(b.admin)
	if err == nil && merr == nil {
		st.Stages = stagesBetween(m0.hists, m1.hists)
		for _, sg := range st.Stages {
			logf("  stage %-40s n %8.0f  p50 %7.2f  p99 %7.2f  p999 %7.2f ms", sg.Name, sg.Count, sg.P50, sg.P99, sg.P999)
		}
		st.ScriptCalls = callsPerMsg(m0.calls, m1.calls, p.Arrived)
		logf("  script calls per message by script: %s", fmtCalls(st.ScriptCalls))
	} else {
		logf("  stages: %v %v", merr, err)
	}
	st.Redis = redisCost(cs0, e.redis.commandStats(e.ctx), p.Arrived)
	if secs := p.CPU.WallSeconds; secs > 0 && p.Arrived > 0 {
		st.Redis.CPUUsecPerMsg = p.CPU.CPUSeconds["redis"] * 1e6 / float64(p.Arrived)
	}
	st.Sustained = p.Arrived >= p.Produced.Sent && p.Produced.Rate >= 0.97*rate && p.Lat.Early == 0 && p.Lat.P99 <= 1000
	logf("  sustained=%v redis: %.2f script calls/msg, %.1f µs per script call, %.1f µs CPU/msg; bridge RSS %.0f MiB",
		st.Sustained, st.Redis.ScriptCallsPerMsg, st.Redis.UsecPerScriptCall, st.Redis.CPUUsecPerMsg, float64(st.BridgeRSS)/(1<<20))
	return st, nil
}
