package series

import (
	"math"
	"time"
)

// The lateness histogram: fixed log-scale buckets, 4 per octave (each bound 19 % above
// the previous), from 0.25 ms up to 70 minutes; bucket 0 holds everything at or under
// 0.25 ms (early included), the last bucket everything beyond the largest bound.
// Quantiles interpolate within a bucket, so their error is under a bucket's width
// (< 19 %), enough for a chart; merging two histograms is adding their counts.

const (
	bucketsPerOctave = 4
	firstBound       = 250 * time.Microsecond
	// NumBuckets is the number of lateness buckets (the last one open-ended).
	NumBuckets = 98
)

// bounds are the buckets' upper bounds in nanoseconds (NumBuckets-1 finite ones).
var bounds = func() [NumBuckets - 1]int64 {
	var b [NumBuckets - 1]int64
	for i := range b {
		b[i] = int64(math.Round(float64(firstBound) * math.Pow(2, float64(i)/bucketsPerOctave)))
	}
	return b
}()

// bucketOf returns the bucket of d: the first whose bound is >= d (a binary search over
// a fixed array: no allocation).
func bucketOf(d time.Duration) int {
	v := int64(d)
	lo, hi := 0, len(bounds)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if bounds[mid] < v {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// Hist is a lateness histogram: counts per bucket, trailing empty buckets cut off.
type Hist []uint64

// Count is the number of observations.
func (h Hist) Count() uint64 {
	var n uint64
	for _, c := range h {
		n += c
	}
	return n
}

// Add returns h with o's counts added (h may be reused).
func (h Hist) Add(o Hist) Hist {
	if len(o) > len(h) {
		h = append(h, make(Hist, len(o)-len(h))...)
	}
	for i, c := range o {
		h[i] += c
	}
	return h
}

// trim cuts trailing empty buckets.
func (h Hist) trim() Hist {
	n := len(h)
	for n > 0 && h[n-1] == 0 {
		n--
	}
	if n > NumBuckets {
		n = NumBuckets
	}
	return h[:n]
}

// Quantile returns the q-quantile (0 < q <= 1) in milliseconds, interpolated linearly
// within its bucket; ok is false for an empty histogram. A quantile in the open last
// bucket reads as the largest bound.
func (h Hist) Quantile(q float64) (ms float64, ok bool) {
	total := h.Count()
	if total == 0 {
		return 0, false
	}
	rank := q * float64(total)
	var below uint64
	for i, c := range h {
		if c == 0 || float64(below+c) < rank {
			below += c
			continue
		}
		if i >= len(bounds) {
			return nsToMs(bounds[len(bounds)-1]), true
		}
		lower := int64(0)
		if i > 0 {
			lower = bounds[i-1]
		}
		frac := (rank - float64(below)) / float64(c)
		return nsToMs(lower) + (nsToMs(bounds[i])-nsToMs(lower))*frac, true
	}
	return nsToMs(bounds[len(bounds)-1]), true
}

func nsToMs(ns int64) float64 { return float64(ns) / 1e6 }
