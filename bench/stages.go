package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// Stage is one part of the lateness a consumer sees, from the bridge's own histograms
// over one steady step: the wheel's fire lateness (fire − due), the wait in egress
// (publish start − fire), one publish batch until the broker confirmed it, and the
// bridge's delivery lateness (broker-confirmed − due, the sum of the three per
// message). The consumer's own lateness (the step's p50/p99) adds the broker → consumer
// hop. Quantiles are interpolated within the histogram's buckets (as Prometheus'
// histogram_quantile does), so they are as coarse as the buckets.
type Stage struct {
	Name  string  `json:"name"`
	Count float64 `json:"count"`
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	P999  float64 `json:"p999_ms"`
}

// stageMetrics are the histograms of the breakdown, in the order of the path.
var stageMetrics = []struct{ name, metric string }{
	{"wheel fire − due", "delaybridge_fire_lateness_seconds"},
	{"egress wait (queue, max_rate)", "delaybridge_egress_wait_seconds"},
	{"publish batch → broker ack", "delaybridge_publish_duration_seconds"},
	{"bridge delivery lateness (ack − due)", "delaybridge_delivery_lateness_seconds"},
}

// histSnap maps a metric name to its cumulative bucket counts (le → count), summed
// over label sets other than le.
type histSnap map[string]map[float64]float64

// scrape is what a steady step reads of the bridge's /metrics before and after it.
type scrape struct {
	hists histSnap           // the stage histograms' buckets
	calls map[string]float64 // script calls so far by script
}

// scrapeMetrics reads the bridge's /metrics once and parses both.
func scrapeMetrics(admin string) (scrape, error) {
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		return scrape{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return scrape{}, fmt.Errorf("GET /metrics: %s: %s", resp.Status, body)
	}
	text, err := io.ReadAll(resp.Body)
	if err != nil {
		return scrape{}, err
	}
	var sn scrape
	if sn.hists, err = parseHists(bytes.NewReader(text)); err != nil {
		return scrape{}, err
	}
	sn.calls, err = parseScriptCalls(bytes.NewReader(text))
	return sn, err
}

func parseHists(r io.Reader) (histSnap, error) {
	out := histSnap{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "_bucket{")
		if !ok || strings.HasPrefix(line, "#") {
			continue
		}
		_, le, ok := strings.Cut(rest, `le="`)
		if !ok {
			continue
		}
		leText, after, _ := strings.Cut(le, `"`)
		fields := strings.Fields(after)
		if len(fields) == 0 {
			continue
		}
		bound, err1 := strconv.ParseFloat(leText, 64)
		if leText == "+Inf" {
			bound, err1 = math.Inf(1), nil
		}
		n, err2 := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err1 != nil || err2 != nil {
			continue
		}
		if out[name] == nil {
			out[name] = map[float64]float64{}
		}
		out[name][bound] += n
	}
	return out, sc.Err()
}

// stagesBetween turns two scrapes into the stage quantiles of what happened between them.
func stagesBetween(before, after histSnap) []Stage {
	var out []Stage
	for _, sm := range stageMetrics {
		a := after[sm.metric]
		if a == nil {
			continue
		}
		bounds := make([]float64, 0, len(a))
		for b := range a {
			bounds = append(bounds, b)
		}
		sort.Float64s(bounds)
		cum := make([]float64, len(bounds))
		for i, b := range bounds {
			cum[i] = a[b] - before[sm.metric][b]
		}
		total := cum[len(cum)-1]
		if total <= 0 {
			continue
		}
		out = append(out, Stage{Name: sm.name, Count: total,
			P50: 1000 * bucketQuantile(0.5, bounds, cum), P99: 1000 * bucketQuantile(0.99, bounds, cum),
			P999: 1000 * bucketQuantile(0.999, bounds, cum)})
	}
	return out
}

// bucketQuantile interpolates quantile q linearly within cumulative buckets (upper
// bounds ascending, the last +Inf); a quantile in the +Inf bucket is the last finite bound.
func bucketQuantile(q float64, bounds, cum []float64) float64 {
	total := cum[len(cum)-1]
	rank := q * total
	lo, prev := 0.0, 0.0
	for i, b := range bounds {
		if cum[i] >= rank {
			if math.IsInf(b, 1) {
				return lo
			}
			if cum[i] == prev {
				return b
			}
			return lo + (b-lo)*(rank-prev)/(cum[i]-prev)
		}
		lo, prev = b, cum[i]
	}
	return lo
}

// writeStages adds the stage breakdown of the steady steps that have one.
func writeStages(b *strings.Builder, steps []SteadyStep) {
	any := false
	for _, s := range steps {
		any = any || len(s.Stages) > 0
	}
	if !any {
		return
	}
	b.WriteString("\nWhere the lateness comes from (the bridge's own histograms over the step; publish is per batch, the others per message; the consumer's figures add the broker → consumer hop):\n\n")
	t := newTable(b, "offered/s", "stage", "p50 ms", "p99 ms", "p999 ms")
	for _, s := range steps {
		for _, sg := range s.Stages {
			t.row(rate(s.Offered), sg.Name, ms(sg.P50), ms(sg.P99), ms(sg.P999))
		}
		if len(s.Stages) > 0 {
			t.row(rate(s.Offered), "consumer lateness (bench)", ms(s.Lat.P50), ms(s.Lat.P99), ms(s.Lat.P999))
		}
	}
}

// scriptCallsMetric counts the bridge's script calls, one histogram series per script.
const scriptCallsMetric = "delaybridge_redis_script_duration_seconds_count{"

func parseScriptCalls(r io.Reader) (map[string]float64, error) {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), scriptCallsMetric)
		if !ok {
			continue
		}
		_, name, ok := strings.Cut(rest, `script="`)
		if !ok {
			continue
		}
		name, after, _ := strings.Cut(name, `"`)
		fields := strings.Fields(after)
		if len(fields) == 0 {
			continue
		}
		if n, err := strconv.ParseFloat(fields[len(fields)-1], 64); err == nil {
			out[name] += n
		}
	}
	return out, sc.Err()
}

// callsPerMsg is the script calls per message of each script between two scrapes.
func callsPerMsg(before, after map[string]float64, msgs int) map[string]float64 {
	out := map[string]float64{}
	for name, n := range after {
		if d := n - before[name]; d > 0 && msgs > 0 {
			out[name] = d / float64(msgs)
		}
	}
	return out
}

// fmtCalls prints calls per message by script, largest first.
func fmtCalls(m map[string]float64) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return m[names[i]] > m[names[j]] })
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s %.4f", n, m[n])
	}
	return strings.Join(parts, ", ")
}
