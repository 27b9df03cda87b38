package main

import (
	"strings"
	"testing"
)

// TestRenderPrevious: with -baseline-rev the markdown carries each figure of both runs
// and the ratio, including the CPU per message at the full-speed drain.
func TestRenderPrevious(t *testing.T) {
	drain := func(rate, redisS, bridgeS float64) DrainResult {
		return DrainResult{N: 100000, Rate: rate, CPU: CPUUse{WallSeconds: 1, CPUSeconds: map[string]float64{"redis": redisS, "bridge": bridgeS}}}
	}
	r := &Results{
		Baseline:    &BaselineResult{BridgeDrain: drain(100000, 1.0, 0.5), DrainRatio: 0.4},
		BaselineRev: "9766fd297adaf5f0b5dea8b501d29a52b8fa060e",
		Previous:    &Results{Baseline: &BaselineResult{BridgeDrain: drain(50000, 2.0, 2.0), DrainRatio: 0.2}},
	}
	md := renderMarkdown(r)
	for _, want := range []string{
		"## Beside the previous layout: the bridge built at 9766fd297adaf5f0b5dea8b501d29a52b8fa060e, same run",
		"| full-speed drain, msgs/s | 100000 | 50000 | 2.00× |",
		"| Redis CPU µs per message at full-speed drain | 10.0 | 20.0 | 0.50× |",
		"| bridge CPU µs per message at full-speed drain | 5.0 | 20.0 | 0.25× |",
		"At the bridge's full-speed drain: 10.0 µs of redis-server CPU and 5.0 µs of bridge CPU per message.",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}
	if strings.Contains(renderMarkdown(&Results{Baseline: r.Baseline}), "Beside the previous layout") {
		t.Error("a run without -baseline-rev renders the comparison")
	}
}
