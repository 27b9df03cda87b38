package admin

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// Series makes routesFake (the conformance test's working backend) keep a history: the
// query it was asked is kept in lastSeries.
func (f *routesFake) Series(_ context.Context, q SeriesQuery) (Series, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return Series{}, f.failWith
	}
	f.lastSeries = q
	p50, p99, pending := 1.5, 9.0, int64(3)
	return Series{IntervalMs: 10_000, WindowMs: q.Window.Milliseconds(), From: 1_700_000_000_000, To: 1_700_000_020_000,
		Scope: q.Scope, Instances: []string{"a-1"}, Routes: []RouteSeries{{Route: "orders", Points: []SeriesPoint{
			{T: 1_700_000_000_000, ReceivedPerS: 2.5, DeliveredPerS: 2, Pending: &pending, Deliveries: 20, P50Ms: &p50, P99Ms: &p99},
			{T: 1_700_000_010_000, ReceivedPerS: 0.1},
		}}, {Route: "billing"}}}, nil
}

// The query reaches the backend as asked, with the defaults filled in; wrong values
// are refused before it; a backend without history answers 501.
func TestSeriesQuery(t *testing.T) {
	f := &routesFake{fakeBackend: newFake()}
	srv := NewServer(Options{Backend: f, Logger: quiet})
	get := func(path string) (int, Series) {
		t.Helper()
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, httptest.NewRequest(http.MethodGet, path, nil))
		var s Series
		if w.Code == http.StatusOK {
			if err := json.Unmarshal(w.Body.Bytes(), &s); err != nil {
				t.Fatal(err)
			}
		}
		return w.Code, s
	}
	if code, s := get("/v1/series"); code != 200 || f.lastSeries != (SeriesQuery{Window: time.Hour, Scope: ScopeCluster}) ||
		len(s.Routes) != 2 || s.Routes[1].Points == nil {
		t.Fatalf("defaults: %d, asked %+v, answered %+v (points must be [] not null)", code, f.lastSeries, s)
	}
	if code, _ := get("/v1/series?route=orders&window=15m&scope=instance"); code != 200 ||
		f.lastSeries != (SeriesQuery{Route: "orders", Window: 15 * time.Minute, Scope: ScopeInstance}) {
		t.Fatalf("explicit: %d, asked %+v", code, f.lastSeries)
	}
	for _, bad := range []string{"window=30s", "window=2h", "window=x", "scope=everything", "colour=red", "route=a&route=b"} {
		if code, _ := get("/v1/series?" + bad); code != 400 {
			t.Errorf("%s: %d, want 400", bad, code)
		}
	}
	if code, _ := get("/v1/series"); code != 200 {
		t.Fatal(code)
	}
	none := NewServer(Options{Backend: coreOnly{f: newFake()}, Logger: quiet})
	w := httptest.NewRecorder()
	none.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/v1/series", nil))
	if w.Code != http.StatusNotImplemented {
		t.Errorf("a backend without history: %d, want 501", w.Code)
	}
}
