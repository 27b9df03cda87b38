package admin

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"
)

// GET /v1/series: the recent history the console charts, per route and per interval
// (10 s on a running bridge): messages received, delivered and dead-lettered per second,
// pending at the interval's end, delivery lateness p50/p99. The backend keeps it (an
// in-process ring on each instance; the cluster view merges every instance's intervals
// through Redis), so no Prometheus is needed to look.

// Series window limits and scopes.
const (
	DefaultSeriesWindow = time.Hour
	MinSeriesWindow     = time.Minute
	MaxSeriesWindow     = time.Hour

	ScopeCluster  = "cluster"  // every instance's intervals, merged
	ScopeInstance = "instance" // the answering instance's own ring
)

// SeriesQuery selects the history: one route ("" = every route), the window ending now,
// the scope (ScopeCluster or ScopeInstance).
type SeriesQuery struct {
	Route  string
	Window time.Duration
	Scope  string
}

// Series is the body of GET /v1/series. Times are unix milliseconds; a point covers
// [t, t + interval_ms). Intervals no instance recorded (the bridge was not running) have
// no point: a chart breaks its line there.
type Series struct {
	IntervalMs int64  `json:"interval_ms"`
	WindowMs   int64  `json:"window_ms"`
	From       int64  `json:"from"`
	To         int64  `json:"to"`
	Scope      string `json:"scope"`
	// Instances whose intervals are merged (the answering one for ScopeInstance).
	Instances []string      `json:"instances"`
	Routes    []RouteSeries `json:"routes"`
}

// RouteSeries is one route's points, oldest first.
type RouteSeries struct {
	Route  string        `json:"route"`
	Points []SeriesPoint `json:"points"`
}

// SeriesPoint is one interval of one route. Rates are per second over the interval.
// Pending is the route's pending count when the interval closed (absent when it could
// not be read). Deliveries is the number of deliveries behind P50Ms and P99Ms (absent
// when nothing was delivered).
type SeriesPoint struct {
	T                int64    `json:"t"`
	ReceivedPerS     float64  `json:"received_per_s"`
	DeliveredPerS    float64  `json:"delivered_per_s"`
	DeadLetteredPerS float64  `json:"dead_lettered_per_s"`
	Pending          *int64   `json:"pending,omitempty"`
	Deliveries       uint64   `json:"deliveries"`
	P50Ms            *float64 `json:"p50_ms,omitempty"`
	P99Ms            *float64 `json:"p99_ms,omitempty"`
}

// SeriesReader is implemented by backends that keep the history (GET /v1/series; 501
// on backends without it).
type SeriesReader interface {
	Series(ctx context.Context, q SeriesQuery) (Series, error)
}

func (s *Server) handleSeries(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if err := queryParams(q, "route", "window", "scope"); err != nil {
		s.fail(w, r, err)
		return
	}
	sq, err := parseSeriesQuery(q)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	sr, ok := s.opt.Backend.(SeriesReader)
	if !ok {
		s.fail(w, r, fmt.Errorf("%w: this backend keeps no history", ErrNotImplemented))
		return
	}
	ctx, cancel := s.call(r)
	defer cancel()
	out, err := sr.Series(ctx, sq)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if out.Routes == nil {
		out.Routes = []RouteSeries{}
	}
	if out.Instances == nil {
		out.Instances = []string{}
	}
	for i := range out.Routes {
		if out.Routes[i].Points == nil {
			out.Routes[i].Points = []SeriesPoint{}
		}
	}
	writeJSON(w, http.StatusOK, out)
}

func parseSeriesQuery(q url.Values) (SeriesQuery, error) {
	sq := SeriesQuery{Route: q.Get("route"), Window: DefaultSeriesWindow, Scope: ScopeCluster}
	if v := q.Get("window"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < MinSeriesWindow || d > MaxSeriesWindow {
			return sq, Invalid("window", "want a duration from %s to %s (such as 15m), got %q", MinSeriesWindow, MaxSeriesWindow, v)
		}
		sq.Window = d
	}
	switch v := q.Get("scope"); v {
	case "", ScopeCluster:
	case ScopeInstance:
		sq.Scope = v
	default:
		return sq, Invalid("scope", "want %s or %s, got %q", ScopeCluster, ScopeInstance, v)
	}
	return sq, nil
}

// Series fetches the recent history (GET /v1/series); zero fields take the server's
// defaults (every route, 1h, the cluster view).
func (c *Client) Series(ctx context.Context, q SeriesQuery) (Series, error) {
	v := url.Values{}
	if q.Route != "" {
		v.Set("route", q.Route)
	}
	if q.Window > 0 {
		v.Set("window", q.Window.String())
	}
	if q.Scope != "" {
		v.Set("scope", q.Scope)
	}
	path := "/v1/series"
	if len(v) > 0 {
		path += "?" + v.Encode()
	}
	var out Series
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return out, err
}
