package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/delaybridge/delay-bridge/admin"
)

// sparkWidth is the most columns a sparkline takes; longer series are squeezed, each
// column showing the largest value of the points it covers (so a spike stays visible).
const sparkWidth = 60

func ctlCharts(o *ctlOpts) *cobra.Command {
	var route, window, scope string
	cmd := &cobra.Command{
		Use:               "charts [--route R] [--window 1h] [--scope cluster|instance]",
		Short:             "the console's charts as sparklines: rates, pending, lateness per route",
		Args:              exactArgs(0),
		ValidArgsFunction: noCompletion,
	}
	cmd.Flags().StringVar(&route, "route", "", "only this route")
	cmd.Flags().StringVar(&window, "window", "1h", "how far back, 1m to 1h")
	cmd.Flags().StringVar(&scope, "scope", admin.ScopeCluster, "cluster (every instance, merged) or instance (the one answering)")
	_ = cmd.RegisterFlagCompletionFunc("route", o.completeRoutes)
	asJSON := addJSONFlag(cmd)
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		d, err := time.ParseDuration(window)
		if err != nil {
			return usageErrorf(cmd, "--window %q: want a duration such as 15m or 1h", window)
		}
		return o.call(func(ctx context.Context, c *admin.Client) error {
			s, err := c.Series(ctx, admin.SeriesQuery{Route: route, Window: d, Scope: scope})
			if err != nil {
				return err
			}
			return render(o.env.stdout, o.format(*asJSON), s, func(w *tabwriter.Writer) { chartsTable(w, s) })
		})
	}
	return cmd
}

// chartLines are the rows printed per route, as the console's charts draw them.
var chartLines = []struct {
	name  string
	value func(admin.SeriesPoint) (float64, bool)
	unit  func(float64) string
}{
	{"received/s", func(p admin.SeriesPoint) (float64, bool) { return p.ReceivedPerS, true }, fmtRate},
	{"delivered/s", func(p admin.SeriesPoint) (float64, bool) { return p.DeliveredPerS, true }, fmtRate},
	{"dead-lettered/s", func(p admin.SeriesPoint) (float64, bool) { return p.DeadLetteredPerS, true }, fmtRate},
	{"pending", func(p admin.SeriesPoint) (float64, bool) { return deref(p.Pending) }, func(v float64) string { return fmt.Sprint(int64(v)) }},
	{"lateness p50", func(p admin.SeriesPoint) (float64, bool) { return derefF(p.P50Ms) }, fmtLateMs},
	{"lateness p99", func(p admin.SeriesPoint) (float64, bool) { return derefF(p.P99Ms) }, fmtLateMs},
}

func chartsTable(w io.Writer, s admin.Series) {
	span := time.Duration(s.WindowMs) * time.Millisecond
	fmt.Fprintf(w, "%s intervals, %s, last %s (oldest left):\n", time.Duration(s.IntervalMs)*time.Millisecond,
		scopeText(s), strings.TrimSuffix(strings.TrimSuffix(span.String(), "0s"), "0m"))
	if len(s.Routes) == 0 {
		fmt.Fprintln(w, "no intervals recorded yet")
		return
	}
	row(w, "ROUTE", "SERIES", "CHART", "LAST", "MAX")
	for _, rs := range s.Routes {
		for i, l := range chartLines {
			name := rs.Route
			if i > 0 {
				name = ""
			}
			// One value per interval from the first point to the last: an interval
			// without a point (nothing recorded) stays NaN, a blank in the line.
			var vals []float64
			last, peak := math.NaN(), math.NaN()
			for _, p := range rs.Points {
				v, ok := l.value(p)
				if !ok {
					continue
				}
				i := 0
				if s.IntervalMs > 0 {
					i = int((p.T - rs.Points[0].T) / s.IntervalMs)
				}
				for len(vals) <= i {
					vals = append(vals, math.NaN())
				}
				vals[i] = v
				last = v
				if math.IsNaN(peak) || v > peak {
					peak = v
				}
			}
			row(w, name, l.name, dash(spark(vals, sparkWidth)), orDash(last, l.unit), orDash(peak, l.unit))
		}
	}
}

func scopeText(s admin.Series) string {
	if s.Scope == admin.ScopeInstance {
		return "instance " + strings.Join(s.Instances, ", ")
	}
	return fmt.Sprintf("cluster of %d (%s)", len(s.Instances), strings.Join(s.Instances, ", "))
}

// spark draws values (NaN = no point: a blank) as a line of block characters scaled
// from 0 to the largest value, at most width columns.
func spark(vals []float64, width int) string {
	const blocks = "▁▂▃▄▅▆▇█"
	levels := []rune(blocks)
	cols := vals
	if len(vals) > width {
		cols = make([]float64, width)
		for c := range cols {
			cols[c] = math.NaN()
			for _, v := range vals[c*len(vals)/width : (c+1)*len(vals)/width] {
				if !math.IsNaN(v) && (math.IsNaN(cols[c]) || v > cols[c]) {
					cols[c] = v
				}
			}
		}
	}
	top := 0.0
	for _, v := range cols {
		if !math.IsNaN(v) && v > top {
			top = v
		}
	}
	var b strings.Builder
	any := false
	for _, v := range cols {
		switch {
		case math.IsNaN(v):
			b.WriteRune(' ')
		case top == 0:
			b.WriteRune(levels[0])
			any = true
		default:
			b.WriteRune(levels[int(math.Round(v/top*float64(len(levels)-1)))])
			any = true
		}
	}
	if !any {
		return ""
	}
	return b.String()
}

func deref(p *int64) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return float64(*p), true
}

func derefF(p *float64) (float64, bool) {
	if p == nil {
		return 0, false
	}
	return *p, true
}

func orDash(v float64, f func(float64) string) string {
	if math.IsNaN(v) {
		return "-"
	}
	return f(v)
}

func fmtRate(v float64) string {
	if v >= 100 || v == math.Trunc(v) {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}

func fmtLateMs(v float64) string {
	if v >= 1000 {
		return fmt.Sprintf("%.2f s", v/1000)
	}
	return fmt.Sprintf("%.2f ms", v)
}
