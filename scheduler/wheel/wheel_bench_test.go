package wheel

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// Schedule+fire throughput of the wheel alone. One op = one envelope scheduled and,
// eventually, fired. Run with:
//
//	go test -run '^$' -bench Wheel -benchmem ./scheduler/

var wheelBenchPending = []int{1_000, 100_000}

// BenchmarkWheelFakeClock drives the loop body synchronously on a fake clock: the cost of
// the data structure without goroutine hand-offs or timers. Steady state: 100 envelopes
// arrive and 100 fire per 1 ms tick (a 100k msgs/s flow), with `pending` waiting, i.e.
// each stays pending/100 ms.
func BenchmarkWheelFakeClock(b *testing.B) {
	for _, pending := range wheelBenchPending {
		b.Run(fmt.Sprintf("pending=%d", pending), func(b *testing.B) {
			const perTick = 100
			spread := int64(pending / perTick) // ticks each envelope waits
			fc := clock.NewFake(wheelT0)
			fired := 0
			w := mustNew(fc, time.Millisecond, 0, func(batch []*envelope.Envelope, _ time.Time) {
				fired += len(batch)
			})
			// A ring of reusable envelopes keeps test data out of the allocation count; an
			// envelope is reused only long after it fired.
			ring := wheelBenchRing(2*pending + 2*perTick)
			t0 := wheelT0.UnixMilli()
			for i := range pending {
				env := ring[i]
				env.DueAt = t0 + 1 + int64(i/perTick)
				w.Schedule(env)
			}
			b.ReportAllocs()
			b.ResetTimer()
			now := wheelT0
			for i := range b.N {
				env := ring[(pending+i)%len(ring)]
				env.DueAt = t0 + spread + 1 + int64(i/perTick)
				w.Schedule(env)
				if (i+1)%perTick == 0 {
					now = now.Add(time.Millisecond)
					wheelDrive(w, now)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			if want := b.N / perTick * perTick; fired != want {
				b.Fatalf("fired %d, want %d", fired, want)
			}
		})
	}
}

// BenchmarkWheelRealClock runs Run on the wall clock in its own goroutine while the
// benchmark goroutine schedules envelopes due 1 ms ahead, with `pending` more envelopes
// parked an hour out (they sit in the slots the loop walks). The op count is divided by
// the time until the last envelope has fired: it includes lock contention between the
// producer and the loop, the timer wake-ups, and the final ≤ 2 ms wait. It also reports
// the mean and maximum fire lateness.
func BenchmarkWheelRealClock(b *testing.B) {
	for _, pending := range wheelBenchPending {
		b.Run(fmt.Sprintf("pending=%d", pending), func(b *testing.B) {
			// Envelopes in flight are bounded by the ring (back-pressure, as the pump is
			// bounded by egress); the ring index rides in Attempt so fire finds its slot.
			const ringSize = 1 << 16
			ring := wheelBenchRing(ringSize)
			busy := make([]atomic.Bool, ringSize)
			for i, env := range ring {
				env.Attempt = int32(i)
			}
			var fired atomic.Int64
			allFired := make(chan struct{})
			target := int64(b.N)
			// Written only by fire, read after allFired is closed.
			var lateSum, lateMax time.Duration
			w := mustNew(clock.Real{}, time.Millisecond, 0, func(batch []*envelope.Envelope, now time.Time) {
				for _, env := range batch {
					busy[env.Attempt].Store(false)
					late := now.Sub(time.UnixMilli(env.DueAt))
					lateSum += late
					lateMax = max(lateMax, late)
				}
				if fired.Add(int64(len(batch))) == target {
					close(allFired)
				}
			})
			far := time.Now().Add(time.Hour).UnixMilli()
			for i := range pending {
				w.Schedule(&envelope.Envelope{ID: fmt.Sprint("far-", i), DueAt: far})
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				w.Run(ctx)
			}()
			defer func() { cancel(); <-done }()

			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				k := i % ringSize
				for busy[k].Load() {
					runtime.Gosched()
				}
				busy[k].Store(true)
				env := ring[k]
				env.DueAt = time.Now().UnixMilli() + 1
				w.Schedule(env)
			}
			<-allFired
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
			// Fire lateness (fire time − due ms) as the loop saw it, before any egress.
			b.ReportMetric(float64(lateSum.Microseconds())/float64(b.N)/1000, "late-mean-ms")
			b.ReportMetric(float64(lateMax.Microseconds())/1000, "late-max-ms")
			if w.Len() != pending {
				b.Fatalf("Len %d, want %d", w.Len(), pending)
			}
		})
	}
}

// BenchmarkWheelScheduleCancelParallel is the contended path: many goroutines schedule
// and cancel (the admin API's DELETE) against one wheel holding 100k pending.
func BenchmarkWheelScheduleCancelParallel(b *testing.B) {
	w := mustNew(clock.Real{}, time.Millisecond, 0, func([]*envelope.Envelope, time.Time) {})
	far := time.Now().Add(time.Hour).UnixMilli()
	for i := range 100_000 {
		w.Schedule(&envelope.Envelope{ID: fmt.Sprint("far-", i), DueAt: far})
	}
	var worker atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		ring := wheelBenchRing(64)
		prefix := fmt.Sprint("w", worker.Add(1), "-")
		for _, env := range ring {
			env.ID = prefix + env.ID
			env.DueAt = far + 1
		}
		i := 0
		for pb.Next() {
			env := ring[i%len(ring)]
			h := w.Schedule(env)
			w.Cancel(&h)
			i++
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
}

func wheelBenchRing(n int) []*envelope.Envelope {
	ring := make([]*envelope.Envelope, n)
	for i := range ring {
		ring[i] = &envelope.Envelope{ID: fmt.Sprint("m", i)}
	}
	return ring
}
