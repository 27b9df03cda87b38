// Package series keeps the recent history the console draws: per route and per interval
// (10 s by default), the messages received, delivered and dead-lettered, the pending
// count at the interval's end, and a histogram of delivery lateness, for the last hour
// (360 intervals) in an in-process ring. The hot path (Received, Delivered,
// DeadLettered, called by the observer for every batch or message) is atomic adds on
// counters allocated once per route: no lock, no allocation. Run closes an interval on
// every boundary, reads the pending counts and hands the closed interval to a publish
// function (app writes it to Redis for the cluster view). Merge and Points turn
// intervals of one or many instances into chart points.
package series

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
)

// Defaults: 10 s intervals, an hour of them.
const (
	DefaultInterval = 10 * time.Second
	DefaultKeep     = 360
)

// Options configure a Recorder.
type Options struct {
	// Interval is the length of one sample; default DefaultInterval. Intervals start at
	// multiples of it in unix time, so the instances of a cluster sample the same spans.
	Interval time.Duration
	// Keep is how many closed intervals the ring holds; default DefaultKeep.
	Keep int
	// Clock tells the time; nil = the wall clock.
	Clock clock.Clock
	// Logger hears about failing pending reads and publishes (once per failure streak,
	// at warn; the recovery at info); nil = slog.Default().
	Logger *slog.Logger
}

// Interval is one closed sample of every route. Start is unix milliseconds.
type Interval struct {
	Start  int64                  `json:"t"`
	Routes map[string]RouteSample `json:"r"`
}

// RouteSample is one route's counts in one interval. Pending is the route's pending
// count when the interval closed (cluster-wide: it comes from Redis), -1 when it could
// not be read.
type RouteSample struct {
	Received     uint64 `json:"rc,omitempty"`
	Delivered    uint64 `json:"dv,omitempty"`
	DeadLettered uint64 `json:"dl,omitempty"`
	Pending      int64  `json:"p"`
	Lateness     Hist   `json:"h,omitempty"`
}

// acc is the open interval's counters of one route.
type acc struct {
	received, delivered, dead atomic.Uint64
	hist                      [NumBuckets]atomic.Uint64
}

// Recorder is the ring of one instance. Safe for concurrent use.
type Recorder struct {
	interval time.Duration
	keep     int
	clk      clock.Clock
	log      *slog.Logger

	routes atomic.Pointer[map[string]*acc] // copied on write (a new route); read lock-free
	addMu  sync.Mutex

	mu   sync.Mutex
	ring []Interval // closed intervals, oldest first, at most keep
}

// New returns an empty Recorder.
func New(opts Options) *Recorder {
	if opts.Interval <= 0 {
		opts.Interval = DefaultInterval
	}
	if opts.Keep <= 0 {
		opts.Keep = DefaultKeep
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	r := &Recorder{interval: opts.Interval, keep: opts.Keep, clk: opts.Clock, log: opts.Logger}
	m := map[string]*acc{}
	r.routes.Store(&m)
	return r
}

// Interval is the sample length.
func (r *Recorder) Interval() time.Duration { return r.interval }

// Keep is the number of intervals the ring holds.
func (r *Recorder) Keep() int { return r.keep }

// Declare creates the counters of the given routes, so that every closed interval
// lists them (with zeros) and their first messages take the lock-free path.
func (r *Recorder) Declare(routes ...string) {
	for _, name := range routes {
		r.acc(name)
	}
}

// acc returns the route's counters, creating them on first use (the only lock, taken
// once per route for the life of the process).
func (r *Recorder) acc(route string) *acc {
	if a, ok := (*r.routes.Load())[route]; ok {
		return a
	}
	r.addMu.Lock()
	defer r.addMu.Unlock()
	old := *r.routes.Load()
	if a, ok := old[route]; ok {
		return a
	}
	m := make(map[string]*acc, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	a := &acc{}
	m[route] = a
	r.routes.Store(&m)
	return a
}

// Received counts n records consumed for route.
func (r *Recorder) Received(route string, n int) { r.acc(route).received.Add(uint64(n)) }

// Delivered counts one broker-confirmed message with its delivery lateness.
func (r *Recorder) Delivered(route string, lateness time.Duration) {
	a := r.acc(route)
	a.delivered.Add(1)
	a.hist[bucketOf(lateness)].Add(1)
}

// DeadLettered counts n messages moved to the dead letters.
func (r *Recorder) DeadLettered(route string, n int) { r.acc(route).dead.Add(uint64(n)) }

// start is the start of the interval holding t: a multiple of the interval in unix
// time (what Slot and the other instances count from).
func (r *Recorder) start(t time.Time) time.Time {
	ms, iv := t.UnixMilli(), r.interval.Milliseconds()
	return time.UnixMilli(ms - ms%iv)
}

// close ends the open interval: every route's counters are swapped to zero (a message
// counted concurrently lands in this interval or the next, never in both) and the
// sample is kept in the ring. pending gives the routes' pending counts (nil: unknown).
func (r *Recorder) close(start time.Time, pending map[string]int64) Interval {
	routes := *r.routes.Load()
	iv := Interval{Start: start.UnixMilli(), Routes: make(map[string]RouteSample, len(routes))}
	for name, a := range routes {
		s := RouteSample{Received: a.received.Swap(0), Delivered: a.delivered.Swap(0), DeadLettered: a.dead.Swap(0), Pending: -1}
		if pending != nil { // known counts: a route missing from them has none pending
			s.Pending = pending[name]
		}
		var h Hist
		for i := range a.hist {
			if c := a.hist[i].Swap(0); c > 0 {
				if h == nil {
					h = make(Hist, NumBuckets)
				}
				h[i] = c
			}
		}
		s.Lateness = h.trim()
		iv.Routes[name] = s
	}
	// Routes only the pending counts know (no traffic on this instance yet).
	for name, n := range pending {
		if _, ok := iv.Routes[name]; !ok {
			iv.Routes[name] = RouteSample{Pending: n}
		}
	}
	r.mu.Lock()
	if len(r.ring) == r.keep {
		copy(r.ring, r.ring[1:])
		r.ring = r.ring[:r.keep-1]
	}
	r.ring = append(r.ring, iv)
	r.mu.Unlock()
	return iv
}

// Since returns the closed intervals that start at or after since (unix ms), oldest
// first. The slice is a copy; the samples' maps are shared and never written again.
func (r *Recorder) Since(since int64) []Interval {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Interval
	for _, iv := range r.ring {
		if iv.Start >= since {
			out = append(out, iv)
		}
	}
	return out
}

// PendingFunc reads the pending count per route.
type PendingFunc func(ctx context.Context) (map[string]int64, error)

// PublishFunc hands a closed interval on (to Redis, for the cluster view).
type PublishFunc func(ctx context.Context, iv Interval) error

// Run closes an interval at every boundary until ctx ends: it reads pending (bounded by
// half an interval), closes the interval and publishes it (publish may be nil). A
// failure is logged and the next interval tries again.
func (r *Recorder) Run(ctx context.Context, pending PendingFunc, publish PublishFunc) {
	open := r.start(r.clk.Now())
	t := r.clk.NewTimer(open.Add(r.interval).Sub(r.clk.Now()))
	defer t.Stop()
	var pendingErr, publishErr streak
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		now := r.clk.Now()
		var counts map[string]int64
		if pending != nil {
			pctx, cancel := context.WithTimeout(ctx, r.interval/2)
			c, err := pending(pctx)
			cancel()
			pendingErr.note(r.log, "series: reading the pending counts", err)
			if err == nil {
				counts = c
			}
		}
		iv := r.close(open, counts)
		if publish != nil {
			pctx, cancel := context.WithTimeout(ctx, r.interval/2)
			publishErr.note(r.log, "series: publishing the interval for the cluster view", publish(pctx, iv))
			cancel()
		}
		open = r.start(now)
		if !open.After(time.UnixMilli(iv.Start)) { // a clock step back: keep intervals ordered
			open = time.UnixMilli(iv.Start).Add(r.interval)
		}
		t.Reset(open.Add(r.interval).Sub(r.clk.Now()))
	}
}

// streak logs the first failure of a streak at warn and its end at info.
type streak struct{ failing bool }

func (s *streak) note(log *slog.Logger, what string, err error) {
	switch {
	case err != nil && !s.failing:
		s.failing = true
		log.Warn(what+" failed (the charts miss this interval's part)", "err", err)
	case err == nil && s.failing:
		s.failing = false
		log.Info(what + " works again")
	}
}
