package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// AsynqRun is the peer at one offered rate and check interval, with the bridge's steady
// step at the same rate (same run) beside it.
type AsynqRun struct {
	ProbeResult
	CheckInterval string       `json:"delayed_task_check_interval"`
	Bridge        *ProbeResult `json:"bridge,omitempty"`
	P99Factor     float64      `json:"asynq_p99_over_bridge_p99"`
}

// AsynqResult is scenario 5.
type AsynqResult struct {
	Version     string     `json:"asynq_version"`
	Concurrency string     `json:"concurrency"`
	Runs        []AsynqRun `json:"runs"`
}

func runAsynq(e *env) error {
	minD, maxD := time.Second, 10*time.Second
	if e.quick {
		maxD = 3 * time.Second
	}
	dur := pick(e, 20*time.Second, 5*time.Second)
	r := &AsynqResult{Version: moduleVersion("github.com/hibiken/asynq"), Concurrency: "default (runtime.NumCPU() workers)"}
	e.res.Asynq = r
	for _, rate := range pick(e, []float64{1000, 10000}, []float64{1000}) {
		for _, ci := range []time.Duration{0, 100 * time.Millisecond} {
			run, err := asynqRun(e, rate, dur, minD, maxD, ci)
			if err != nil {
				return err
			}
			if e.res.Steady != nil {
				for i := range e.res.Steady.Steps {
					if st := &e.res.Steady.Steps[i]; st.Offered == rate {
						run.Bridge = &st.ProbeResult
						run.P99Factor = Ratio(run.Lat.P99, st.Lat.P99)
					}
				}
			}
			r.Runs = append(r.Runs, run)
			if err := e.fresh(); err != nil {
				return err
			}
		}
	}
	return nil
}

// asynqRun schedules rate tasks/s for dur with ProcessAt(now + delay), delays uniform
// in [minD, maxD] in integer milliseconds, and measures handler start minus due time.
func asynqRun(e *env, rate float64, dur, minD, maxD, checkInterval time.Duration) (AsynqRun, error) {
	ciName := "default (5s)"
	if checkInterval > 0 {
		ciName = checkInterval.String()
	}
	run := AsynqRun{CheckInterval: ciName}
	run.Label = fmt.Sprintf("asynq %d, check %s", int(rate), ciName)
	run.Offered = rate
	rc := redis.NewClient(&redis.Options{Addr: e.redis.addr, PoolSize: 64})
	defer rc.Close()

	var mu sync.Mutex
	var got []sample
	seen := map[uint64]bool{}
	var dups int
	var done atomic.Int64
	srv := asynq.NewServerFromRedisClient(rc, asynq.Config{
		DelayedTaskCheckInterval: checkInterval,
		LogLevel:                 asynq.ErrorLevel,
	})
	mux := asynq.NewServeMux()
	mux.HandleFunc("bench", func(_ context.Context, t *asynq.Task) error {
		now := time.Now()
		p := t.Payload()
		due := int64(binary.BigEndian.Uint64(p[0:8]))
		seq := binary.BigEndian.Uint64(p[8:16])
		mu.Lock()
		if seen[seq] {
			dups++
		} else {
			seen[seq] = true
			got = append(got, sample{lateMs: float64(now.UnixNano()-due*1e6) / 1e6, arrival: now.UnixNano()})
		}
		mu.Unlock()
		done.Add(1)
		return nil
	})
	if err := srv.Start(mux); err != nil {
		return run, fmt.Errorf("asynq server: %w", err)
	}
	defer srv.Shutdown()
	client := asynq.NewClientFromRedisClient(rc)
	defer client.Close()

	pids := e.pids(nil)
	delete(pids, "kafka") // not involved
	meter := newCPUMeter(pids)
	type job struct {
		t   *asynq.Task
		due time.Time
	}
	jobs := make(chan job, 4096)
	var wg sync.WaitGroup
	var enqErr atomic.Pointer[error]
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				if _, err := client.EnqueueContext(e.ctx, j.t, asynq.ProcessAt(j.due), asynq.MaxRetry(0)); err != nil {
					enqErr.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	start := time.Now()
	sent := 0
	total := int(rate * dur.Seconds())
	tick := time.NewTicker(5 * time.Millisecond)
	for sent < total && e.ctx.Err() == nil {
		want := min(int(rate*time.Since(start).Seconds()), total) - sent
		for ; want > 0; want-- {
			now := time.Now()
			d := minD + time.Duration(rand.Int64N(int64(maxD-minD)+1))
			due := time.UnixMilli(now.Add(d).UnixMilli()) // integer milliseconds
			p := make([]byte, 16+payloadSize)
			binary.BigEndian.PutUint64(p[0:8], uint64(due.UnixMilli()))
			binary.BigEndian.PutUint64(p[8:16], uint64(sent))
			copy(p[16:], payload)
			jobs <- job{asynq.NewTask("bench", p), due}
			sent++
		}
		<-tick.C
	}
	tick.Stop()
	close(jobs)
	wg.Wait()
	prodDur := time.Since(start)
	run.Produced = paceResult{Sent: sent, Duration: prodDur, Rate: float64(sent) / prodDur.Seconds()}
	if p := enqErr.Load(); p != nil {
		return run, fmt.Errorf("asynq enqueue: %w", *p)
	}
	deadline := time.Now().Add(maxD + 10*time.Second + 30*time.Second)
	for done.Load() < int64(sent) && time.Now().Before(deadline) && e.ctx.Err() == nil {
		time.Sleep(50 * time.Millisecond)
	}
	run.CPU = meter.done()
	mu.Lock()
	got2 := append([]sample(nil), got...)
	run.Dups = dups
	mu.Unlock()
	l := lateness(got2, nil)
	run.Arrived = len(l)
	run.Lat = Summarize(l)
	run.CDF = CDF(l, 400)
	if from, to := start.Add(maxD), start.Add(dur); to.Sub(from) >= 2*time.Second {
		run.Throughput = arrivalRate(got2, from, to)
	}
	logf("%-28s offered %6.0f/s produced %6.0f/s done %d/%d dups %d  p50 %.1f p99 %.1f max %.1f ms early %d  cpu: %s",
		run.Label, rate, run.Produced.Rate, run.Arrived, sent, dups, run.Lat.P50, run.Lat.P99, run.Lat.Max, run.Lat.Early, run.CPU)
	return run, nil
}

// moduleVersion is the version of a dependency compiled into this binary.
func moduleVersion(path string) string {
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				return d.Version
			}
		}
	}
	return "unknown"
}
