package main

import (
	"math"
	"slices"
)

// Dist summarises a sample of latencies in milliseconds.
type Dist struct {
	N     int     `json:"n"`
	Early int     `json:"early"` // samples < 0 (arrived before their due time)
	Min   float64 `json:"min_ms"`
	P50   float64 `json:"p50_ms"`
	P90   float64 `json:"p90_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
	Max   float64 `json:"max_ms"`
	Mean  float64 `json:"mean_ms"`
}

// Summarize sorts ms in place and returns its distribution. Percentiles use the
// nearest-rank method: the smallest value with at least p of the sample at or below it.
func Summarize(ms []float64) Dist {
	d := Dist{N: len(ms)}
	if len(ms) == 0 {
		return d
	}
	slices.Sort(ms)
	sum := 0.0
	for _, v := range ms {
		sum += v
		if v < 0 {
			d.Early++
		}
	}
	d.Min, d.Max = ms[0], ms[len(ms)-1]
	d.Mean = sum / float64(len(ms))
	d.P50 = Percentile(ms, 0.50)
	d.P90 = Percentile(ms, 0.90)
	d.P99 = Percentile(ms, 0.99)
	d.P999 = Percentile(ms, 0.999)
	return d
}

// Percentile returns the nearest-rank p-quantile (0 < p <= 1) of sorted.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	rank := int(math.Ceil(p * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

// CDFPoint is one point of an empirical CDF: fraction F of the sample is <= X.
type CDFPoint struct {
	X float64 `json:"x"`
	F float64 `json:"f"`
}

// CDF returns at most points points of the empirical CDF of sorted, evenly spaced in
// rank, always including the minimum and the maximum, plus the tail ranks (p99, p999,
// p9999) that even spacing would skip.
func CDF(sorted []float64, points int) []CDFPoint {
	n := len(sorted)
	if n == 0 || points < 2 {
		return nil
	}
	ranks := map[int]bool{}
	step := max(1, n/(points-1))
	for r := 1; r <= n; r += step {
		ranks[r] = true
	}
	for _, p := range []float64{0.99, 0.999, 0.9999} {
		ranks[max(1, int(math.Ceil(p*float64(n))))] = true
	}
	ranks[n] = true
	keys := make([]int, 0, len(ranks))
	for r := range ranks {
		keys = append(keys, r)
	}
	slices.Sort(keys)
	out := make([]CDFPoint, len(keys))
	for i, r := range keys {
		out[i] = CDFPoint{X: sorted[r-1], F: float64(r) / float64(n)}
	}
	return out
}

// Ratio is a/b, or 0 when b is 0 (printed as "n/a").
func Ratio(a, b float64) float64 {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
		return 0
	}
	return a / b
}

// TimelinePoint summarises the arrivals of one time bucket.
type TimelinePoint struct {
	T   float64 `json:"t_s"` // bucket start, seconds after the run started
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// Timeline buckets samples by arrival time (unix ns) into buckets of width seconds from
// start, and summarises each bucket's lateness.
func Timeline(arrivals []int64, late []float64, start int64, width float64) []TimelinePoint {
	buckets := map[int][]float64{}
	last := 0
	for i, a := range arrivals {
		b := int(float64(a-start) / 1e9 / width)
		if b < 0 {
			b = 0
		}
		buckets[b] = append(buckets[b], late[i])
		last = max(last, b)
	}
	var out []TimelinePoint
	for b := 0; b <= last; b++ {
		v := buckets[b]
		if len(v) == 0 {
			continue
		}
		slices.Sort(v)
		out = append(out, TimelinePoint{T: float64(b) * width, N: len(v), P50: Percentile(v, 0.5), P99: Percentile(v, 0.99), Max: v[len(v)-1]})
	}
	return out
}
