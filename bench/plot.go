package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// drawPlots writes docs/bench-*.png for the scenarios that ran.
func drawPlots(r *Results, dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	type fig struct {
		name string
		p    *plot.Plot
		side bool // legend beside the plot (many lines)
	}
	var figs []fig
	add := func(name string, p *plot.Plot, err error) {
		if err != nil {
			logf("plot %s: %v", name, err)
			return
		}
		if p != nil {
			figs = append(figs, fig{name, p, strings.HasSuffix(name, "-cdf.png")})
		}
	}
	p, err := steadyCDF(r)
	add("bench-steady-cdf.png", p, err)
	p, err = throughputPlot(r)
	add("bench-throughput.png", p, err)
	p, err = burstTricklePlot(r)
	add("bench-burst-trickle.png", p, err)
	p, err = burstDrainPlot(r)
	add("bench-burst-drain.png", p, err)
	p, err = asynqCDF(r)
	add("bench-asynq-cdf.png", p, err)
	p, err = scalePlot(r)
	add("bench-scale.png", p, err)
	for _, f := range figs {
		path := filepath.Join(dir, f.name)
		var err error
		if f.side {
			err = saveSideLegend(f.p, path, 24*vg.Centimeter, 12*vg.Centimeter, 7*vg.Centimeter)
		} else {
			err = f.p.Save(20*vg.Centimeter, 12*vg.Centimeter, path)
		}
		if err != nil {
			return err
		}
		logf("wrote %s", path)
	}
	return nil
}

// saveSideLegend draws p with its legend in a column of width legW on the right, so
// that many lines stay readable.
func saveSideLegend(p *plot.Plot, path string, w, h, legW vg.Length) error {
	leg := p.Legend
	p.Legend = plot.NewLegend()
	img := vgimg.New(w, h)
	dc := draw.New(img)
	dc.SetColor(color.White)
	dc.Fill(dc.Rectangle.Path())
	p.Draw(draw.Crop(dc, 0, -legW, 0, 0))
	leg.Top, leg.Left = true, true
	leg.XOffs, leg.YOffs = vg.Millimeter, -vg.Centimeter
	leg.Draw(draw.Crop(dc, w-legW, 0, 0, 0))
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = x
	p.Y.Label.Text = y
	p.Add(plotter.NewGrid())
	p.Legend.Top = false
	p.Legend.Left = false
	return p
}

// cdfLine draws a CDF with x clamped to at least floor (for log axes).
func cdfLine(p *plot.Plot, i int, label string, pts []CDFPoint, floor float64) error {
	if len(pts) == 0 {
		return nil
	}
	xy := make(plotter.XYs, 0, len(pts))
	for _, c := range pts {
		xy = append(xy, plotter.XY{X: math.Max(c.X, floor), Y: c.F})
	}
	l, err := plotter.NewLine(xy)
	if err != nil {
		return err
	}
	l.Color = plotutil.Color(i)
	l.Dashes = plotutil.Dashes(i / 7)
	l.Width = vg.Points(1.5)
	p.Add(l)
	p.Legend.Add(label, l)
	return nil
}

func steadyCDF(r *Results) (*plot.Plot, error) {
	if r.Steady == nil && r.Baseline == nil {
		return nil, nil
	}
	p := newPlot("Lateness CDF at the consumer (steady state)", "lateness: arrival − due (ms, log)", "fraction of messages")
	p.X.Scale = plot.LogScale{}
	p.X.Tick.Marker = plot.LogTicks{Prec: -1}
	i := 0
	if b := r.Baseline; b != nil {
		for _, f := range b.Floor {
			if err := cdfLine(p, i, f.Label+" (no hop)", f.CDF, 0.1); err != nil {
				return nil, err
			}
			i++
		}
		for _, f := range b.Passthrough {
			if err := cdfLine(p, i, f.Label, f.CDF, 0.1); err != nil {
				return nil, err
			}
			i++
		}
	}
	if s := r.Steady; s != nil {
		for _, st := range s.Steps {
			if err := cdfLine(p, i, st.Label+"/s", st.CDF, 0.1); err != nil {
				return nil, err
			}
			i++
		}
	}
	if sc := r.Scale; sc != nil && len(sc.Short.CDF) > 0 {
		if err := cdfLine(p, i, sc.Short.Label, sc.Short.CDF, 0.1); err != nil {
			return nil, err
		}
	}
	p.X.Min = 0.1
	return p, nil
}

func throughputPlot(r *Results) (*plot.Plot, error) {
	s := r.Steady
	if s == nil || len(s.Steps) == 0 {
		return nil, nil
	}
	p := newPlot("Throughput vs offered rate", "offered (k msgs/s)", "k msgs/s")
	var got, prod plotter.XYs
	maxX := 0.0
	for _, st := range s.Steps {
		x := st.Offered / 1000
		maxX = math.Max(maxX, x)
		tp := st.Throughput
		if tp == 0 && st.Arrived >= st.Produced.Sent {
			tp = st.Produced.Rate
		}
		got = append(got, plotter.XY{X: x, Y: tp / 1000})
		prod = append(prod, plotter.XY{X: x, Y: st.Produced.Rate / 1000})
	}
	ideal, _ := plotter.NewLine(plotter.XYs{{X: 0, Y: 0}, {X: maxX, Y: maxX}})
	ideal.Color = color.Gray{Y: 160}
	ideal.Dashes = []vg.Length{vg.Points(3), vg.Points(3)}
	p.Add(ideal)
	p.Legend.Add("offered", ideal)
	lp, sp, err := plotter.NewLinePoints(got)
	if err != nil {
		return nil, err
	}
	lp.Color, sp.Color = plotutil.Color(0), plotutil.Color(0)
	p.Add(lp, sp)
	p.Legend.Add("bridge: delivered (steady window)", lp, sp)
	pp, err := plotter.NewScatter(prod)
	if err != nil {
		return nil, err
	}
	pp.Shape = draw.CrossGlyph{}
	pp.Color = plotutil.Color(2)
	p.Add(pp)
	p.Legend.Add("producer achieved", pp)
	if b := r.Baseline; b != nil {
		for i, h := range []struct {
			label string
			v     float64
		}{{"pass-through full speed", b.PassDrain.Rate}, {"bridge full speed (x-delay 0)", b.BridgeDrain.Rate}} {
			if h.v == 0 {
				continue
			}
			l, _ := plotter.NewLine(plotter.XYs{{X: 0, Y: h.v / 1000}, {X: maxX, Y: h.v / 1000}})
			l.Color = plotutil.Color(3 + i)
			l.Width = vg.Points(1.5)
			p.Add(l)
			p.Legend.Add(h.label, l)
		}
	}
	p.Legend.Top, p.Legend.Left = true, true
	return p, nil
}

func burstTricklePlot(r *Results) (*plot.Plot, error) {
	b := r.Burst
	if b == nil || len(b.Runs) == 0 {
		return nil, nil
	}
	p := newPlot(fmt.Sprintf("Trickle lateness around a %d-message burst due at T0", b.Runs[0].N), "trickle message due time − T0 (s)", "lateness (ms, log)")
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	for i, u := range b.Runs {
		xy := make(plotter.XYs, 0, len(u.TrickleSeries))
		for _, v := range u.TrickleSeries {
			xy = append(xy, plotter.XY{X: v[0], Y: math.Max(v[1], 0.1)})
		}
		if len(xy) == 0 {
			continue
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return nil, err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(u.Label, l)
	}
	p.Legend.Top = true
	return p, nil
}

func burstDrainPlot(r *Results) (*plot.Plot, error) {
	b := r.Burst
	if b == nil || len(b.Runs) == 0 {
		return nil, nil
	}
	p := newPlot(fmt.Sprintf("Burst drain: %d messages due at T0", b.Runs[0].N), "time since T0 (s)", "fraction of the burst delivered")
	for i, u := range b.Runs {
		xy := make(plotter.XYs, 0, len(u.DrainSeries)+1)
		xy = append(xy, plotter.XY{X: 0, Y: 0})
		for _, v := range u.DrainSeries {
			xy = append(xy, plotter.XY{X: v[0], Y: v[1]})
		}
		l, err := plotter.NewLine(xy)
		if err != nil {
			return nil, err
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(fmt.Sprintf("%s: %.1f s", u.Label, u.DrainSeconds), l)
	}
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.YOffs = vg.Centimeter
	return p, nil
}

func asynqCDF(r *Results) (*plot.Plot, error) {
	a := r.Asynq
	if a == nil || len(a.Runs) == 0 {
		return nil, nil
	}
	p := newPlot("Lateness CDF: delay-bridge vs asynq (same Redis, same workload)", "lateness: arrival − due (ms)", "fraction of messages")
	i := 0
	seen := map[float64]bool{}
	for _, u := range a.Runs {
		if br := u.Bridge; br != nil && !seen[br.Offered] {
			seen[br.Offered] = true
			if err := cdfLine(p, i, "delay-bridge "+rate(br.Offered)+"/s", br.CDF, math.Inf(-1)); err != nil {
				return nil, err
			}
			i++
		}
		if err := cdfLine(p, i, u.Label, u.CDF, math.Inf(-1)); err != nil {
			return nil, err
		}
		i++
	}
	p.Legend.Top, p.Legend.Left = false, false
	p.Legend.YOffs = vg.Centimeter
	return p, nil
}

func scalePlot(r *Results) (*plot.Plot, error) {
	s := r.Scale
	if s == nil || len(s.Points) < 2 {
		return nil, nil
	}
	p := newPlot("Memory vs pending messages (due in an hour)", "pending messages (millions)", "MiB (log)")
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	var redisXY, rssXY plotter.XYs
	for _, pt := range s.Points {
		x := float64(pt.Pending) / 1e6
		redisXY = append(redisXY, plotter.XY{X: x, Y: math.Max(float64(pt.RedisUsed)/(1<<20), 0.1)})
		rssXY = append(rssXY, plotter.XY{X: x, Y: math.Max(float64(pt.BridgeRSS)/(1<<20), 0.1)})
	}
	for i, l := range []struct {
		label string
		xy    plotter.XYs
	}{{"Redis used_memory", redisXY}, {"bridge RSS", rssXY}} {
		lp, sp, err := plotter.NewLinePoints(l.xy)
		if err != nil {
			return nil, err
		}
		lp.Color, sp.Color = plotutil.Color(i), plotutil.Color(i)
		lp.Width = vg.Points(1.5)
		p.Add(lp, sp)
		p.Legend.Add(l.label, lp, sp)
	}
	p.Legend.Top, p.Legend.Left = true, true
	return p, nil
}
