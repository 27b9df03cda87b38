package main

import (
	"fmt"
	"math"
	"strings"
	"testing"
)

func TestPercentileNearestRank(t *testing.T) {
	s := make([]float64, 100)
	for i := range s {
		s[i] = float64(i + 1) // 1..100
	}
	for _, c := range []struct{ p, want float64 }{
		{0.01, 1}, {0.5, 50}, {0.99, 99}, {0.999, 100}, {1, 100}, {0.001, 1},
	} {
		if got := Percentile(s, c.p); got != c.want {
			t.Errorf("Percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if !math.IsNaN(Percentile(nil, 0.5)) {
		t.Error("Percentile of an empty sample should be NaN")
	}
}

func TestSummarizeCountsEarlyAndSorts(t *testing.T) {
	d := Summarize([]float64{5, -1, 3, 2, -0.5, 4})
	if d.N != 6 || d.Early != 2 || d.Min != -1 || d.Max != 5 {
		t.Fatalf("got %+v", d)
	}
	if d.P50 != 2 { // ranks: -1 -0.5 2 3 4 5; ceil(0.5*6)=3 -> 2
		t.Errorf("p50 = %v, want 2", d.P50)
	}
	if math.Abs(d.Mean-12.5/6) > 1e-9 {
		t.Errorf("mean = %v", d.Mean)
	}
}

func TestCDFBoundsAndMonotone(t *testing.T) {
	s := make([]float64, 10000)
	for i := range s {
		s[i] = float64(i) / 10
	}
	c := CDF(s, 50)
	if len(c) < 50 || len(c) > 60 {
		t.Fatalf("%d points", len(c))
	}
	if c[0].X != 0 || c[len(c)-1].F != 1 || c[len(c)-1].X != s[len(s)-1] {
		t.Fatalf("ends: %+v .. %+v", c[0], c[len(c)-1])
	}
	for i := 1; i < len(c); i++ {
		if c[i].F <= c[i-1].F || c[i].X < c[i-1].X {
			t.Fatalf("not monotone at %d: %+v %+v", i, c[i-1], c[i])
		}
	}
	found := false
	for _, p := range c {
		if p.F == 0.999 {
			found = true
		}
	}
	if !found {
		t.Error("p999 rank missing from the CDF")
	}
	if CDF(nil, 10) != nil {
		t.Error("empty sample should give no points")
	}
}

func TestTimelineBuckets(t *testing.T) {
	start := int64(1e12)
	arr := []int64{start, start + 4e8, start + 1.2e9, start + 3.5e9}
	late := []float64{1, 3, 2, 9}
	tl := Timeline(arr, late, start, 1)
	if len(tl) != 3 || tl[0].N != 2 || tl[0].Max != 3 || tl[1].T != 1 || tl[2].T != 3 || tl[2].P99 != 9 {
		t.Fatalf("got %+v", tl)
	}
}

func TestStagesFromHistograms(t *testing.T) {
	text := func(b1, b2, inf int) string {
		return fmt.Sprintf(`# TYPE delaybridge_fire_lateness_seconds histogram
delaybridge_fire_lateness_seconds_bucket{route="a",le="0.001"} %d
delaybridge_fire_lateness_seconds_bucket{route="a",le="0.002"} %d
delaybridge_fire_lateness_seconds_bucket{route="a",le="+Inf"} %d
delaybridge_fire_lateness_seconds_sum{route="a"} 1
`, b1, b2, inf)
	}
	before, err := parseHists(strings.NewReader(text(10, 10, 10)))
	if err != nil {
		t.Fatal(err)
	}
	after, err := parseHists(strings.NewReader(text(60, 110, 110)))
	if err != nil {
		t.Fatal(err)
	}
	st := stagesBetween(before, after)
	if len(st) != 1 || st[0].Count != 100 {
		t.Fatalf("stages %+v, want one with count 100", st)
	}
	// 50 in (0, 1 ms], 50 in (1, 2 ms]: the median is 1 ms, p99 is 1.98 ms.
	if math.Abs(st[0].P50-1) > 1e-9 || math.Abs(st[0].P99-1.98) > 1e-9 {
		t.Fatalf("p50 %v p99 %v, want 1 and 1.98", st[0].P50, st[0].P99)
	}
}
