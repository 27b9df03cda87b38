package series

import (
	"encoding/json"
	"fmt"
	"sort"
)

// Encode is an interval's wire form for the cluster view (compact JSON: short field
// names, histograms without trailing empty buckets).
func Encode(iv Interval) ([]byte, error) {
	b, err := json.Marshal(iv)
	if err != nil {
		return nil, fmt.Errorf("series: encoding interval %d: %w", iv.Start, err)
	}
	return b, nil
}

// Decode reads what Encode wrote.
func Decode(b []byte) (Interval, error) {
	var iv Interval
	if err := json.Unmarshal(b, &iv); err != nil {
		return Interval{}, fmt.Errorf("series: decoding an interval: %w", err)
	}
	if len(iv.Routes) > 0 {
		for name, s := range iv.Routes {
			s.Lateness = s.Lateness.trim()
			iv.Routes[name] = s
		}
	}
	return iv, nil
}

// Slot is the ring position of the interval starting at start (unix ms): the cluster
// view keeps one field per slot per instance, so it never holds more than keep fields.
func Slot(start int64, interval int64, keep int) int {
	if interval <= 0 || keep <= 0 {
		return 0
	}
	return int((start / interval) % int64(keep))
}

// Merge sums the intervals of several instances by start time, oldest first: counters
// and lateness histograms add up; pending, a cluster-wide count that every instance
// read at about the same moment, is the largest reading (-1 when none could read it).
func Merge(sets ...[]Interval) []Interval {
	byStart := map[int64]Interval{}
	for _, set := range sets {
		for _, iv := range set {
			m, ok := byStart[iv.Start]
			if !ok {
				m = Interval{Start: iv.Start, Routes: map[string]RouteSample{}}
			}
			for name, s := range iv.Routes {
				t, seen := m.Routes[name]
				if !seen {
					t.Pending = -1
				}
				t.Received += s.Received
				t.Delivered += s.Delivered
				t.DeadLettered += s.DeadLettered
				t.Pending = max(t.Pending, s.Pending)
				t.Lateness = append(Hist(nil), t.Lateness...).Add(s.Lateness)
				m.Routes[name] = t
			}
			byStart[iv.Start] = m
		}
	}
	out := make([]Interval, 0, len(byStart))
	for _, iv := range byStart {
		out = append(out, iv)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// Point is one route's sample in one interval.
type Point struct {
	Start int64
	RouteSample
}

// ByRoute splits intervals into each route's points, oldest first; a route missing from
// an interval has no point there. route "" means every route.
func ByRoute(ivs []Interval, route string) map[string][]Point {
	out := map[string][]Point{}
	for _, iv := range ivs {
		for name, s := range iv.Routes {
			if route != "" && name != route {
				continue
			}
			out[name] = append(out[name], Point{Start: iv.Start, RouteSample: s})
		}
	}
	return out
}
