package metrics

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// The ready gauges follow the checks: absent before SetChecks, 0 overall and per failing
// check while one fails, 1 again once all pass (after the cache TTL).
func TestReadyGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg, "test", quiet)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := testutil.GatherAndCount(reg, "delaybridge_ready", "delaybridge_ready_check"); err != nil || n != 0 {
		t.Fatalf("before SetChecks: %d series, %v", n, err)
	}
	now := time.Unix(1000, 0)
	m.ready.now = func() time.Time { return now }
	calls := 0
	failing := true
	m.SetChecks(func(context.Context) []admin.Check {
		calls++
		return []admin.Check{{Name: "redis", OK: true}, {Name: "ingress orders", OK: !failing, Detail: "stalled"}}
	})
	want := `
# HELP delaybridge_ready 1 when every readiness check passes (what /readyz answers 200 for), else 0.
# TYPE delaybridge_ready gauge
delaybridge_ready 0
# HELP delaybridge_ready_check 1 per passing readiness check, 0 per failing one (redis, shards, ingress <route>, egress <broker>, amqp ...).
# TYPE delaybridge_ready_check gauge
delaybridge_ready_check{check="ingress orders"} 0
delaybridge_ready_check{check="redis"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "delaybridge_ready", "delaybridge_ready_check"); err != nil {
		t.Fatal(err)
	}
	failing = false
	// Within the TTL the cached answer is served.
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "delaybridge_ready", "delaybridge_ready_check"); err != nil {
		t.Fatal(err)
	}
	now = now.Add(StatsCacheTTL)
	want = strings.ReplaceAll(want, "delaybridge_ready 0", "delaybridge_ready 1")
	want = strings.ReplaceAll(want, `{check="ingress orders"} 0`, `{check="ingress orders"} 1`)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "delaybridge_ready", "delaybridge_ready_check"); err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Errorf("checks ran %d times, want 2 (one per TTL)", calls)
	}
}
