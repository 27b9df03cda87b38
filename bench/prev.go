package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// -baseline-rev: the bridge built at another git revision (the previous release, the
// previous store layout) measured beside this tree's in the same run. Each of
// prevScenarios runs twice, this tree's bridge first (the revision's first with
// -previous-first), the second on a fresh Redis and a fresh kfake (the scenarios' topic
// names are fixed); the markdown ends with a table of both and the ratio
// (renderPrevious).

// prevScenarios are the scenarios that run against both bridges.
var prevScenarios = map[string]bool{"baseline": true, "steady": true, "burst": true, "scale": true}

// buildBridgeAt exports rev of the repository with git archive into dir/prev-src and
// builds its cmd/bridge into dir/prev/bridge (with the pprof overlay under -profile;
// experiments patch this tree only). It returns the binary and the full commit hash.
func buildBridgeAt(repo, rev, dir string, profile bool) (bin, commit string, err error) {
	out, err := exec.Command("git", "-C", repo, "rev-parse", "--verify", rev+"^{commit}").CombinedOutput()
	if err != nil {
		return "", "", fmt.Errorf("-baseline-rev %s: git rev-parse: %w\n%s", rev, err, out)
	}
	commit = strings.TrimSpace(string(out))
	src := filepath.Join(dir, "prev-src")
	binDir := filepath.Join(dir, "prev")
	for _, d := range []string{src, binDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", "", err
		}
	}
	tarball := filepath.Join(dir, "prev.tar")
	if out, err := exec.Command("git", "-C", repo, "archive", "--format=tar", "-o", tarball, commit).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("git archive %s: %w\n%s", commit, err, out)
	}
	if out, err := exec.Command("tar", "-xf", tarball, "-C", src).CombinedOutput(); err != nil {
		return "", "", fmt.Errorf("untar %s: %w\n%s", tarball, err, out)
	}
	// Outside a git checkout: no VCS stamping, and no go.work of this tree.
	bin, err = buildBridgeEnv(src, binDir, profile, nil, []string{"GOWORK=off", "GOFLAGS=-buildvcs=false"})
	return bin, commit, err
}

// runPrevious runs scenario s again with the -baseline-rev bridge, into e.res.Previous.
func (e *env) runPrevious(name string, run func(*env) error) {
	cur, curBin := e.res, e.bridgeBin
	defer func() { e.res, e.bridgeBin = cur, curBin }()
	e.res, e.bridgeBin = cur.Previous, e.prevBin
	logf("== scenario %s again with the bridge at %s", name, cur.BaselineRev)
	if err := e.restartKafka(); err != nil {
		cur.Previous.Errors[name] = err.Error()
		logf("scenario %s (previous): %v", name, err)
		return
	}
	if err := e.fresh(); err != nil {
		cur.Previous.Errors[name] = err.Error()
		logf("scenario %s (previous): %v", name, err)
		return
	}
	if err := run(e); err != nil {
		cur.Previous.Errors[name] = err.Error()
		logf("scenario %s (previous) failed: %v", name, err)
	}
}

// restartKafka replaces the kfake broker with a fresh one (no topics).
func (e *env) restartKafka() error {
	e.kafka.close()
	var err error
	e.kafka, err = startKafka(e.dir, e.res.KafkaMode)
	return err
}

// usPerMsg is proc's CPU in µs per message of a drain.
func usPerMsg(d DrainResult, proc string) float64 {
	if d.N == 0 {
		return 0
	}
	return d.CPU.CPUSeconds[proc] * 1e6 / float64(d.N)
}

// renderPrevious is the table of every figure of this run beside the same figure of
// the -baseline-rev bridge, and the ratio (this tree / previous).
func renderPrevious(b *strings.Builder, r *Results) {
	p := r.Previous
	if p == nil {
		return
	}
	fmt.Fprintf(b, "## Beside the previous layout: the bridge built at %s, same run\n\n", r.BaselineRev)
	order := "this tree's bridge first, then the one at that revision on a fresh Redis and a fresh kfake"
	if r.PreviousFirst {
		order = "the bridge at that revision first (-previous-first), then this tree's, each on a fresh Redis and a fresh kfake"
	}
	fmt.Fprintf(b, "Each scenario ran twice, %s. The order moves the results on a shared machine: compare a run in each order. Ratio = this tree / previous.\n\n", order)
	if len(p.Errors) > 0 {
		for k, v := range p.Errors {
			fmt.Fprintf(b, "- previous, %s: %s\n", k, v)
		}
		b.WriteString("\n")
	}
	t := newTable(b, "figure", "this tree", "previous", "ratio")
	row := func(name string, cur, prev float64, format string) {
		t.row(name, fmt.Sprintf(format, cur), fmt.Sprintf(format, prev), ratio(Ratio(cur, prev)))
	}
	if c, q := r.Baseline, p.Baseline; c != nil && q != nil {
		row("full-speed drain, msgs/s", c.BridgeDrain.Rate, q.BridgeDrain.Rate, "%.0f")
		row("full-speed drain vs its pass-through", c.DrainRatio, q.DrainRatio, "%.2f")
		row("Redis CPU µs per message at full-speed drain", usPerMsg(c.BridgeDrain, "redis"), usPerMsg(q.BridgeDrain, "redis"), "%.1f")
		row("bridge CPU µs per message at full-speed drain", usPerMsg(c.BridgeDrain, "bridge"), usPerMsg(q.BridgeDrain, "bridge"), "%.1f")
		row("ingress only (park), msgs/s", c.IngressOnly.Rate, q.IngressOnly.Rate, "%.0f")
	}
	if c, q := r.Steady, p.Steady; c != nil && q != nil {
		row("max sustained rate, msgs/s", c.MaxSustained, q.MaxSustained, "%.0f")
		for _, s := range c.Steps {
			for _, o := range q.Steps {
				if o.Offered == s.Offered {
					row(fmt.Sprintf("steady %.0f/s: p99 lateness ms", s.Offered), s.Lat.P99, o.Lat.P99, "%.1f")
					row(fmt.Sprintf("steady %.0f/s: Redis CPU µs per message", s.Offered), s.Redis.CPUUsecPerMsg, o.Redis.CPUUsecPerMsg, "%.1f")
				}
			}
		}
	}
	if c, q := r.Burst, p.Burst; c != nil && q != nil {
		for i := range min(len(c.Runs), len(q.Runs)) {
			row(fmt.Sprintf("burst %s: %d drained in s", c.Runs[i].Label, c.Runs[i].N), c.Runs[i].DrainSeconds, q.Runs[i].DrainSeconds, "%.2f")
			row(fmt.Sprintf("burst %s: bridge RSS peak MiB", c.Runs[i].Label), float64(c.Runs[i].BridgeRSSPeak)/(1<<20), float64(q.Runs[i].BridgeRSSPeak)/(1<<20), "%.1f")
		}
	}
	if c, q := r.Scale, p.Scale; c != nil && q != nil && len(c.Points) > 0 && len(q.Points) > 0 {
		cl, ql := c.Points[len(c.Points)-1], q.Points[len(q.Points)-1]
		row(fmt.Sprintf("Redis bytes per pending message beyond the payload (%d pending)", cl.Pending), cl.BeyondPayload, ql.BeyondPayload, "%.0f")
		row("bridge RSS change 0 → N pending, %", 100*c.RSSChange, 100*q.RSSChange, "%+.1f")
		row("short delays while pending: p99 lateness ms", c.Short.Lat.P99, q.Short.Lat.P99, "%.1f")
		row("short delays while pending: Redis CPU µs per message", c.ShortRedis.CPUUsecPerMsg, q.ShortRedis.CPUUsecPerMsg, "%.1f")
		b.WriteString("\n")
		b.WriteString("The scale scenario parks its messages through this tree's `Store.Park` in both runs (the bench links the store package), so its bytes per pending message compare the layouts only where this tree writes what the previous one did (pending messages: the same `due`/`msg` in layouts 2 and 3); the other scale figures are the serving bridge's.\n")
	}
	b.WriteString("\n")
}
