package admin

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/delaybridge/delay-bridge/internal/clock"
)

// GET /v1/lateness: delivery lateness per route over recent minutes, from the bridge's
// own delaybridge_delivery_lateness_seconds histogram (the Gatherer of /metrics). The
// server keeps snapshots of the histogram (one per latenessEvery, taken by Serve and by
// each request) and answers with the difference between now and the snapshot that
// starts the window, so the quantiles cover only the recent deliveries.

// LatenessMetric is the histogram GET /v1/lateness reads.
const LatenessMetric = "delaybridge_delivery_lateness_seconds"

// Lateness window limits.
const (
	DefaultLatenessWindow = 5 * time.Minute
	MaxLatenessWindow     = time.Hour
	latenessEvery         = 15 * time.Second
)

// Lateness is the body of GET /v1/lateness. Times are unix milliseconds.
type Lateness struct {
	WindowMs int64 `json:"window_ms"` // the window asked for
	// From is where the data starts: the newest snapshot at or before To - window; 0 =
	// since the server started (its snapshots began less than a window ago).
	From   int64           `json:"from"`
	To     int64           `json:"to"`
	Routes []RouteLateness `json:"routes"`
}

// RouteLateness is one route's delivery lateness in the window. P50Ms and P99Ms are
// interpolated within histogram buckets (as Prometheus' histogram_quantile does) and
// absent when nothing was delivered; a quantile beyond the largest bucket reads as that
// bucket's bound.
type RouteLateness struct {
	Route string   `json:"route"`
	Count uint64   `json:"count"`
	P50Ms *float64 `json:"p50_ms,omitempty"`
	P99Ms *float64 `json:"p99_ms,omitempty"`
}

type histogram struct {
	bounds []float64 // upper bounds, the last +Inf
	cum    []uint64  // cumulative counts per bound
}

type latenessSnap struct {
	at     time.Time
	routes map[string]histogram
}

type latenessWindow struct {
	g   prometheus.Gatherer
	clk clock.Clock

	mu    sync.Mutex
	snaps []latenessSnap // oldest first
}

func newLatenessWindow(g prometheus.Gatherer, clk clock.Clock) *latenessWindow {
	return &latenessWindow{g: g, clk: clk}
}

// read gathers the histogram now.
func (l *latenessWindow) read() (latenessSnap, error) {
	snap := latenessSnap{at: l.clk.Now(), routes: map[string]histogram{}}
	mfs, err := l.g.Gather()
	if err != nil && len(mfs) == 0 {
		return snap, fmt.Errorf("gathering metrics: %w", err)
	}
	for _, mf := range mfs {
		if mf.GetName() != LatenessMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			snap.routes[routeLabel(m)] = histogramOf(m.GetHistogram())
		}
	}
	return snap, nil
}

func routeLabel(m *dto.Metric) string {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == "route" {
			return lp.GetValue()
		}
	}
	return ""
}

func histogramOf(h *dto.Histogram) histogram {
	var out histogram
	for _, b := range h.GetBucket() {
		out.bounds = append(out.bounds, b.GetUpperBound())
		out.cum = append(out.cum, b.GetCumulativeCount())
	}
	if len(out.bounds) == 0 || !math.IsInf(out.bounds[len(out.bounds)-1], 1) {
		out.bounds = append(out.bounds, math.Inf(1))
		out.cum = append(out.cum, h.GetSampleCount())
	}
	return out
}

// keep stores snap unless the newest kept one is younger than latenessEvery, and
// forgets snapshots older than the longest window needs.
func (l *latenessWindow) keep(snap latenessSnap) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.snaps); n == 0 || snap.at.Sub(l.snaps[n-1].at) >= latenessEvery {
		l.snaps = append(l.snaps, snap)
	}
	horizon := snap.at.Add(-MaxLatenessWindow - 2*latenessEvery)
	drop := 0
	for drop < len(l.snaps)-1 && l.snaps[drop+1].at.Before(horizon) {
		drop++
	}
	l.snaps = l.snaps[drop:]
}

// baseline is the newest snapshot at or before start; ok false when there is none (the
// snapshots began less than a window ago, about when the server started: the answer
// then covers everything since the start, never a shorter span than the window).
func (l *latenessWindow) baseline(start time.Time) (latenessSnap, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := sort.Search(len(l.snaps), func(i int) bool { return l.snaps[i].at.After(start) })
	if i == 0 {
		return latenessSnap{}, false
	}
	return l.snaps[i-1], true
}

// sample takes and keeps one snapshot (Serve calls it every latenessEvery).
func (l *latenessWindow) sample() error {
	snap, err := l.read()
	if err != nil {
		return err
	}
	l.keep(snap)
	return nil
}

// run samples every latenessEvery until ctx ends. The first sample waits a period: a
// gather at startup would ask the count collectors before the bridge runs (their cache
// would then serve nothing to /metrics for a while).
func (l *latenessWindow) run(ctx context.Context, log func(error)) {
	t := l.clk.NewTimer(latenessEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
		if err := l.sample(); err != nil {
			log(err)
		}
		t.Reset(latenessEvery)
	}
}

// over answers for the window ending now.
func (l *latenessWindow) over(window time.Duration) (Lateness, error) {
	now, err := l.read()
	if err != nil {
		return Lateness{}, err
	}
	base, ok := l.baseline(now.at.Add(-window))
	l.keep(now)
	out := Lateness{WindowMs: window.Milliseconds(), To: now.at.UnixMilli(), Routes: []RouteLateness{}}
	if ok && base.at.Before(now.at) {
		out.From = base.at.UnixMilli()
	} else {
		base = latenessSnap{}
	}
	for route, h := range now.routes {
		d := h.minus(base.routes[route])
		rl := RouteLateness{Route: route, Count: d.cum[len(d.cum)-1]}
		if rl.Count > 0 {
			p50, p99 := d.quantile(0.5)*1000, d.quantile(0.99)*1000
			rl.P50Ms, rl.P99Ms = &p50, &p99
		}
		out.Routes = append(out.Routes, rl)
	}
	sort.Slice(out.Routes, func(i, j int) bool { return out.Routes[i].Route < out.Routes[j].Route })
	return out, nil
}

// minus is h without the observations of an earlier snapshot b of the same series (a
// counter reset, or no b, leaves h whole).
func (h histogram) minus(b histogram) histogram {
	if len(b.cum) != len(h.cum) {
		return h
	}
	out := histogram{bounds: h.bounds, cum: make([]uint64, len(h.cum))}
	for i := range h.cum {
		if h.cum[i] < b.cum[i] {
			return h
		}
		out.cum[i] = h.cum[i] - b.cum[i]
	}
	return out
}

// quantile interpolates linearly within the bucket holding rank q (seconds).
func (h histogram) quantile(q float64) float64 {
	total := h.cum[len(h.cum)-1]
	rank := q * float64(total)
	i := sort.Search(len(h.cum), func(i int) bool { return float64(h.cum[i]) >= rank })
	if i >= len(h.bounds)-1 { // the +Inf bucket: the largest finite bound
		if len(h.bounds) < 2 {
			return 0
		}
		return h.bounds[len(h.bounds)-2]
	}
	lower, below := 0.0, uint64(0)
	if i > 0 {
		lower, below = h.bounds[i-1], h.cum[i-1]
	}
	in := h.cum[i] - below
	if in == 0 {
		return h.bounds[i]
	}
	return lower + (h.bounds[i]-lower)*(rank-float64(below))/float64(in)
}

func (s *Server) handleLateness(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := queryParams(q, "window"); err != nil {
		s.fail(w, r, err)
		return
	}
	window := DefaultLatenessWindow
	if v := q.Get("window"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < time.Minute || d > MaxLatenessWindow {
			s.fail(w, r, Invalid("window", "want a duration from 1m to %s (such as 5m), got %q", MaxLatenessWindow, v))
			return
		}
		window = d
	}
	if s.opt.Gatherer == nil {
		s.fail(w, r, fmt.Errorf("%w: this server has no metrics registry to read lateness from", ErrNotImplemented))
		return
	}
	out, err := s.lateness.over(window)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
