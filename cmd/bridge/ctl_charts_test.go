package main

import (
	"context"
	"io"
	"log/slog"
	"math"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/delaybridge/delay-bridge/admin"
)

// seriesBackend is ctlBackend with a history: route orders with a gap and a spike.
type seriesBackend struct {
	*ctlBackend
	asked admin.SeriesQuery
}

func (b *seriesBackend) Series(_ context.Context, q admin.SeriesQuery) (admin.Series, error) {
	b.asked = q
	var pts []admin.SeriesPoint
	for i := range 8 {
		if i == 3 {
			continue // nothing recorded then
		}
		pending, p50, p99 := int64(10*i), 1.25, 4.5+float64(i)
		pts = append(pts, admin.SeriesPoint{T: int64(i) * 10_000, ReceivedPerS: float64(i), DeliveredPerS: 2.5,
			Pending: &pending, Deliveries: 25, P50Ms: &p50, P99Ms: &p99})
	}
	return admin.Series{IntervalMs: 10_000, WindowMs: q.Window.Milliseconds(), Scope: q.Scope, Instances: []string{"pod-a-1", "pod-b-1"},
		Routes: []admin.RouteSeries{{Route: "orders", Points: pts}, {Route: "idle"}}}, nil
}

func TestCtlCharts(t *testing.T) {
	b := &seriesBackend{ctlBackend: &ctlBackend{}}
	ts := httptest.NewServer(admin.NewServer(admin.Options{Backend: b, Token: "tok", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(ts.Close)
	ctl := func(args ...string) (int, string, string) {
		t.Helper()
		return call(t, append([]string{"ctl", "--addr", ts.URL, "--token", "tok"}, args...)...)
	}
	code, out, errOut := ctl("charts", "--window", "15m", "--route", "orders", "--scope", "instance")
	if code != exitOK || b.asked != (admin.SeriesQuery{Route: "orders", Window: 15 * 60e9, Scope: admin.ScopeInstance}) {
		t.Fatalf("charts: %d %q %q, asked %+v", code, out, errOut, b.asked)
	}
	for _, want := range []string{
		"10s intervals, instance pod-a-1, pod-b-1, last 15m",
		"orders  received/s       ▁▂▃ ▅▆▇█  7         7\n",
		"        delivered/s      ███ ████  2.5       2.5\n",
		"        dead-lettered/s  ▁▁▁ ▁▁▁▁  0         0\n",
		"        pending          ▁▂▃ ▅▆▇█  70        70\n",
		"        lateness p99     ▄▄▅ ▆▇▇█  11.50 ms  11.50 ms\n",
		"idle    received/s       -         -         -\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("charts output lacks %q:\n%s", want, out)
		}
	}
	if code, out, _ := ctl("charts", "-o", "json"); code != exitOK || !strings.Contains(out, `"received_per_s": 7`) || b.asked.Scope != admin.ScopeCluster {
		t.Errorf("charts -o json: %d %q (asked %+v)", code, out, b.asked)
	}
	if code, _, errOut := ctl("charts", "--window", "soon"); code != exitUsage || !strings.Contains(errOut, "--window") {
		t.Errorf("bad window: %d %q", code, errOut)
	}
	if code, _, errOut := ctl("charts", "--window", "2h"); code == exitOK || !strings.Contains(errOut, "window") {
		t.Errorf("window beyond the API's limit: %d %q", code, errOut)
	}
}

// A long series is squeezed to the width, each column keeping its largest value.
func TestSpark(t *testing.T) {
	vals := make([]float64, 360)
	vals[200] = 9
	vals[100] = math.NaN()
	s := []rune(spark(vals, 60))
	if len(s) != 60 || s[200*60/360] != '█' || strings.Count(string(s), "█") != 1 {
		t.Errorf("spark = %q", string(s))
	}
	if got := spark([]float64{math.NaN(), math.NaN()}, 60); got != "" {
		t.Errorf("no points: %q", got)
	}
}
