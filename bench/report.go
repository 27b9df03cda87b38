package main

import (
	"fmt"
	"sort"
	"strings"
)

func mib(b int64) string { return fmt.Sprintf("%.1f", float64(b)/(1<<20)) }

func ms(v float64) string {
	switch {
	case v >= 1000 || v <= -1000:
		return fmt.Sprintf("%.0f", v)
	case v >= 100 || v <= -100:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func ratio(v float64) string {
	if v == 0 {
		return "n/a"
	}
	if v >= 100 {
		return fmt.Sprintf("%.0f×", v)
	}
	return fmt.Sprintf("%.2f×", v)
}

func rate(v float64) string {
	if v == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f", v)
}

// cores renders CPU use as cores per process.
func cores(u CPUUse) string {
	if u.WallSeconds == 0 {
		return ""
	}
	names := make([]string, 0, len(u.CPUSeconds))
	for k := range u.CPUSeconds {
		names = append(names, k)
	}
	sort.Strings(names)
	var parts []string
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, u.CPUSeconds[k]/u.WallSeconds))
	}
	return strings.Join(parts, ", ")
}

type table struct {
	b    *strings.Builder
	cols int
}

func newTable(b *strings.Builder, head ...string) *table {
	fmt.Fprintf(b, "| %s |\n|%s\n", strings.Join(head, " | "), strings.Repeat("---|", len(head)))
	return &table{b: b, cols: len(head)}
}

func (t *table) row(cells ...string) {
	fmt.Fprintf(t.b, "| %s |\n", strings.Join(cells, " | "))
}

func renderMarkdown(r *Results) string {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "# delay-bridge benchmark %s\n\n", r.Started.Format("2006-01-02 15:04 UTC"))
	fmt.Fprintf(&b, "`%s` — %d × %s, %.1f GiB, %s, %s, kernel %s, load average %.2f at start; kfake as %s, %d partitions per topic, redis-server without persistence (appendonly no, no RDB).\n\n",
		r.Command, m.CPUs, m.CPUModel, float64(m.MemTotal)/(1<<30), m.GoVersion, m.Redis, m.Kernel, m.Load1, r.KafkaMode, r.Partitions)
	if len(r.Experiments) > 0 {
		b.WriteString("**Experiment — not the product as shipped.** The bridge was built with these patches (go build -overlay):\n\n")
		for _, x := range r.Experiments {
			fmt.Fprintf(&b, "- %s\n", x)
		}
		b.WriteString("\n")
	}
	if r.BridgeYAML != "" {
		fmt.Fprintf(&b, "**Bridge configuration changed from the defaults:** `%s`\n\n", r.BridgeYAML)
	}
	if r.BridgeEnv != "" {
		fmt.Fprintf(&b, "**Bridge environment added:** `%s`\n\n", r.BridgeEnv)
	}
	if len(r.Errors) > 0 {
		b.WriteString("**Errors:**\n\n")
		for k, v := range r.Errors {
			fmt.Fprintf(&b, "- %s: %s\n", k, v)
		}
		b.WriteString("\n")
	}
	if x := r.RedisBench; x != nil {
		b.WriteString("## Redis limits (redis-benchmark, same machine, same run)\n\n")
		t := newTable(&b, "operation", "pipeline", "ops/s", "p50 ms")
		for _, o := range x.Ops {
			t.row(o.Name, fmt.Sprint(o.Pipeline), rate(o.OpsPerS), ms(o.P50Ms))
		}
		fmt.Fprintf(&b, "\n%d clients.\n\n", x.Clients)
		if len(x.Probes) > 0 {
			writeProbes(&b, x.Probes)
		}
	}
	if x := r.Baseline; x != nil {
		b.WriteString("## 1. Pass-through baseline (Kafka → Kafka, no Redis, no delay)\n\n")
		t := newTable(&b, "path", "offered/s", "produced/s", "arrived", "p50 ms", "p99 ms", "p999 ms", "max ms", "CPU (cores)")
		for _, p := range append(append([]ProbeResult(nil), x.Floor...), x.Passthrough...) {
			t.row(p.Label, rate(p.Offered), rate(p.Produced.Rate), fmt.Sprintf("%d/%d", p.Arrived, p.Produced.Sent),
				ms(p.Lat.P50), ms(p.Lat.P99), ms(p.Lat.P999), ms(p.Lat.Max), cores(p.CPU))
		}
		b.WriteString("\n\"floor\" is producer → kfake → consumer with no hop: the latency every figure below includes.\n\n")
		t = newTable(&b, "full speed (preloaded)", "messages", "seconds", "msgs/s", "vs pass-through", "CPU (cores)")
		t.row("pass-through", fmt.Sprint(x.PassDrain.N), fmt.Sprintf("%.2f", x.PassDrain.Seconds), rate(x.PassDrain.Rate), "1.00×", cores(x.PassDrain.CPU))
		t.row("bridge (x-delay 0)", fmt.Sprint(x.BridgeDrain.N), fmt.Sprintf("%.2f", x.BridgeDrain.Seconds), rate(x.BridgeDrain.Rate), ratio(x.DrainRatio), cores(x.BridgeDrain.CPU))
		if x.IngressOnly.Rate > 0 {
			t.row("bridge ingress only (x-delay 1 h: consume + park)", fmt.Sprint(x.IngressOnly.N), fmt.Sprintf("%.2f", x.IngressOnly.Seconds), rate(x.IngressOnly.Rate), ratio(Ratio(x.IngressOnly.Rate, x.PassDrain.Rate)), cores(x.IngressOnly.CPU))
		}
		fmt.Fprintf(&b, "\nAt the bridge's full-speed drain: %.1f µs of redis-server CPU and %.1f µs of bridge CPU per message.\n\n",
			usPerMsg(x.BridgeDrain, "redis"), usPerMsg(x.BridgeDrain, "bridge"))
	}
	if x := r.Order; x != nil {
		writeOrder(&b, x)
	}
	if x := r.Steady; x != nil {
		fmt.Fprintf(&b, "## 2. Steady state (delays uniform %d–%d ms, %.0f s per rate)\n\n", x.MinDelayMs, x.MaxDelayMs, x.Seconds)
		t := newTable(&b, "offered/s", "produced/s", "arrived", "throughput/s", "p50 ms", "p99 ms", "p999 ms", "max ms", "early", "dups", "sustained", "p99 vs pass-through", "Redis scripts/msg", "Redis CPU µs/msg", "CPU (cores)")
		for _, s := range x.Steps {
			vs := "n/a"
			if pt := passthroughAt(r, s.Offered); pt != nil {
				vs = ratio(Ratio(s.Lat.P99, pt.Lat.P99))
			}
			t.row(rate(s.Offered), rate(s.Produced.Rate), fmt.Sprintf("%d/%d", s.Arrived, s.Produced.Sent), rate(s.Throughput),
				ms(s.Lat.P50), ms(s.Lat.P99), ms(s.Lat.P999), ms(s.Lat.Max), fmt.Sprint(s.Lat.Early), fmt.Sprint(s.Dups),
				yes(s.Sustained), vs, fmt.Sprintf("%.2f", s.Redis.ScriptCallsPerMsg), fmt.Sprintf("%.1f", s.Redis.CPUUsecPerMsg), cores(s.CPU))
		}
		writeStages(&b, x.Steps)
		fmt.Fprintf(&b, "\nMax sustained offered rate: **%s msgs/s** (%s).", rate(x.MaxSustained), x.SustainedRule)
		if r.Baseline != nil && r.Baseline.PassDrain.Rate > 0 {
			fmt.Fprintf(&b, " That is %s of the pass-through's full speed.", ratio(Ratio(x.MaxSustained, r.Baseline.PassDrain.Rate)))
		}
		b.WriteString("\n\n")
	}
	if x := r.Burst; x != nil {
		fmt.Fprintf(&b, "## 3. Same-instant burst (+ trickle %.0f/s due 1 s after sending)\n\n", x.TrickleRate)
		t := newTable(&b, "route", "N", "parked before T0", "park s", "first after T0 s", "drain s", "drain msgs/s", "trickle during drain p50/p99/max ms", "trickle outside p99 ms", "early", "bridge RSS peak MiB", "CPU (cores)", "CPU during the drain (cores)")
		for _, u := range x.Runs {
			t.row(u.Label, fmt.Sprint(u.N), yes(u.ParkedBeforeT0), fmt.Sprintf("%.1f", u.ParkSeconds), fmt.Sprintf("%.2f", u.FirstArrival),
				fmt.Sprintf("%.2f", u.DrainSeconds), rate(u.DrainRate),
				fmt.Sprintf("%s / %s / %s", ms(u.TrickleDuring.P50), ms(u.TrickleDuring.P99), ms(u.TrickleDuring.Max)),
				ms(u.TrickleOutside.P99), fmt.Sprint(u.Burst.Early+u.TrickleDuring.Early+u.TrickleOutside.Early), mib(u.BridgeRSSPeak), cores(u.CPU), cores(u.DrainCPU))
		}
		b.WriteString("\n")
	}
	if x := r.Scale; x != nil {
		fmt.Fprintf(&b, "## 4. Pending scale (%d messages due in an hour; %d-byte payload, %d-byte envelope, %d-byte id)\n\n", x.N, x.PayloadBytes, x.EnvelopeBytes, x.IDBytes)
		t := newTable(&b, "pending", "Redis used_memory MiB", "Redis bytes/msg", "beyond payload", "bridge RSS MiB")
		for _, p := range x.Points {
			t.row(fmt.Sprint(p.Pending), mib(p.RedisUsed), fmt.Sprintf("%.0f", p.BytesPerMsg), fmt.Sprintf("%.0f", p.BeyondPayload), mib(p.BridgeRSS))
		}
		fmt.Fprintf(&b, "\nParked through the product's Store.Park (park.lua, 4 callers × 1000 per call): %.0f msgs/s. Bridge RSS change 0 → %d pending: %+.1f %%. MEMORY USAGE of one shard: %.0f B per `msg` hash entry, %.0f B per `due` zset entry; %.0f %% of its messages in the cold tier at %.0f B per bucket element (envelope included; the id index entry is apart).\n\n",
			x.ParkRate, x.N, 100*x.RSSChange, x.HashBytesPer, x.ZsetBytesPer, 100*x.ColdShare, x.ColdBytesPer)
		t = newTable(&b, "short delays", "offered/s", "arrived", "p50 ms", "p99 ms", "p999 ms", "max ms", "early", "p99 vs no pending")
		s := x.Short
		t.row(s.Label, rate(s.Offered), fmt.Sprintf("%d/%d", s.Arrived, s.Produced.Sent), ms(s.Lat.P50), ms(s.Lat.P99), ms(s.Lat.P999), ms(s.Lat.Max), fmt.Sprint(s.Lat.Early), ratio(x.ShortP99Factor))
		if ref := x.ShortSameRate; ref != nil {
			t.row(ref.Label+" (steady, nothing pending)", rate(ref.Offered), fmt.Sprintf("%d/%d", ref.Arrived, ref.Produced.Sent), ms(ref.Lat.P50), ms(ref.Lat.P99), ms(ref.Lat.P999), ms(ref.Lat.Max), fmt.Sprint(ref.Lat.Early), "1.00×")
		}
		fmt.Fprintf(&b, "\nBridge RSS during the short-delay flow with %d pending: %s MiB. Redis during it: %.2f script calls and %.1f µs of redis-server CPU per message, %.1f µs per script call.\n\n",
			x.N, mib(x.RSSUnderLoad), x.ShortRedis.ScriptCallsPerMsg, x.ShortRedis.CPUUsecPerMsg, x.ShortRedis.UsecPerScriptCall)
	}
	if x := r.Asynq; x != nil {
		fmt.Fprintf(&b, "## 5. Peer: asynq %s on the same Redis (ProcessAt, server concurrency %s)\n\n", x.Version, x.Concurrency)
		t := newTable(&b, "system", "offered/s", "produced/s", "done", "throughput/s", "p50 ms", "p99 ms", "max ms", "early", "asynq p99 / bridge p99", "CPU (cores)")
		shown := map[float64]bool{}
		for _, u := range x.Runs {
			if br := u.Bridge; br != nil && !shown[br.Offered] {
				shown[br.Offered] = true
				t.row("delay-bridge (steady step)", rate(br.Offered), rate(br.Produced.Rate), fmt.Sprintf("%d/%d", br.Arrived, br.Produced.Sent), rate(br.Throughput),
					ms(br.Lat.P50), ms(br.Lat.P99), ms(br.Lat.Max), fmt.Sprint(br.Lat.Early), "1.00×", cores(br.CPU))
			}
			t.row(u.Label, rate(u.Offered), rate(u.Produced.Rate), fmt.Sprintf("%d/%d", u.Arrived, u.Produced.Sent), rate(u.Throughput),
				ms(u.Lat.P50), ms(u.Lat.P99), ms(u.Lat.Max), fmt.Sprint(u.Lat.Early), ratio(u.P99Factor), cores(u.CPU))
		}
		b.WriteString("\nasynq lateness is measured at its handler (in the bench process); the bridge's at a Kafka consumer of the target topic, so it includes a produce → consume hop (see the floor above).\n\n")
	}
	renderTargets(&b, r)
	renderPrevious(&b, r)
	b.WriteString("## Run\n\n")
	t := newTable(&b, "scenario", "seconds", "load average at start → end")
	for _, name := range scenarios {
		if sec, ok := r.Seconds[name]; ok {
			l := r.Load[name]
			t.row(name, fmt.Sprintf("%.0f", sec), fmt.Sprintf("%.2f → %.2f", l[0], l[1]))
		}
	}
	b.WriteString("\n")
	return b.String()
}

func yes(v bool) string {
	if v {
		return "yes"
	}
	return "no"
}

func passthroughAt(r *Results, offered float64) *ProbeResult {
	if r.Baseline == nil {
		return nil
	}
	for i := range r.Baseline.Passthrough {
		if r.Baseline.Passthrough[i].Offered == offered {
			return &r.Baseline.Passthrough[i]
		}
	}
	return nil
}

func steadyAt(r *Results, offered float64) *SteadyStep {
	if r.Steady == nil {
		return nil
	}
	for i := range r.Steady.Steps {
		if r.Steady.Steps[i].Offered == offered {
			return &r.Steady.Steps[i]
		}
	}
	return nil
}

// renderTargets is the harness's list of goals with what this run measured.
func renderTargets(b *strings.Builder, r *Results) {
	b.WriteString("## Targets\n\n")
	t := newTable(b, "target", "measured", "met")
	na := func(name string) { t.row(name, "not measured in this run", "–") }
	for _, c := range []struct {
		rate, limit float64
	}{{10000, 5}, {50000, 20}} {
		name := fmt.Sprintf("p99 lateness ≤ %.0f ms at %.0fk msgs/s", c.limit, c.rate/1000)
		if s := steadyAt(r, c.rate); s != nil {
			t.row(name, ms(s.Lat.P99)+" ms", yes(s.Lat.P99 <= c.limit && s.Sustained))
		} else {
			na(name)
		}
	}
	if r.Steady != nil {
		t.row("≥ 50k msgs/s sustained end to end", rate(r.Steady.MaxSustained)+" msgs/s", yes(r.Steady.MaxSustained >= 50000))
	} else {
		na("≥ 50k msgs/s sustained end to end")
	}
	if x := r.Baseline; x != nil {
		t.row("≥ 0.5× the pass-through baseline (full speed)", fmt.Sprintf("%s (%s vs %s msgs/s)", ratio(x.DrainRatio), rate(x.BridgeDrain.Rate), rate(x.PassDrain.Rate)), yes(x.DrainRatio >= 0.5))
	} else {
		na("≥ 0.5× the pass-through baseline")
	}
	if x := r.Burst; x != nil && len(x.Runs) > 0 {
		u := x.Runs[0]
		got := fmt.Sprintf("%.1f s for %d", u.DrainSeconds, u.N)
		if u.N < 1000000 {
			t.row("1M-message burst drained in ≤ 20 s", got+" (a smaller burst does not measure this)", "–")
		} else {
			t.row("1M-message burst drained in ≤ 20 s", got, yes(u.DrainSeconds <= 20))
		}
	} else {
		na("1M-message burst drained in ≤ 20 s")
	}
	if x := r.Scale; x != nil && len(x.Points) > 1 {
		last := x.Points[len(x.Points)-1]
		t.row("≤ 200 B of Redis per pending message beyond the payload", fmt.Sprintf("%.0f B (at %d pending)", last.BeyondPayload, last.Pending), yes(last.BeyondPayload <= 200))
		rssMet := yes(x.RSSChange <= 0.10 && x.RSSChange >= -0.10)
		if x.N < 10000000 {
			rssMet = "– (fewer than 10M)"
		}
		t.row("bridge RSS flat (±10 %) from 0 to 10M pending", fmt.Sprintf("%+.1f %% from 0 to %d (%s → %s MiB)", 100*x.RSSChange, x.N, mib(x.Points[0].BridgeRSS), mib(last.BridgeRSS)), rssMet)
	} else {
		na("≤ 200 B of Redis per pending message beyond the payload")
		na("bridge RSS flat (±10 %) from 0 to 10M pending")
	}
	if x := r.Asynq; x != nil {
		for _, u := range x.Runs {
			if u.CheckInterval == "default (5s)" && u.Bridge != nil {
				t.row(fmt.Sprintf("≥ 100× lower p99 than asynq defaults (%.0fk/s)", u.Offered/1000),
					fmt.Sprintf("%s (%s vs %s ms)", ratio(u.P99Factor), ms(u.Lat.P99), ms(u.Bridge.Lat.P99)), yes(u.P99Factor >= 100))
			}
		}
	} else {
		na("≥ 100× lower p99 lateness than asynq at its defaults")
	}
	b.WriteString("\n")
}
