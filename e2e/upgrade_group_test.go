package e2e

import (
	"os"
	"strings"
	"testing"
	"time"
)

// startPrevious runs the previous release's binary as instance in the cluster.
func (c *haCluster) startPrevious(instance, bin string) *bridgeProc {
	c.t.Helper()
	cfg, admin := c.config(instance, "orders.delay", c.group, "")
	// The HA configuration has keys that release does not read (scheduler.cold_horizon).
	raw, err := os.ReadFile(cfg)
	if err == nil {
		err = os.WriteFile(cfg, []byte(coldHorizonKey.ReplaceAllString(string(raw), "")), 0o600)
	}
	if err != nil {
		c.t.Fatal(err)
	}
	p := startBridgeArgv(c.t, cfg, admin, []string{bin, "run", "-c", cfg})
	c.procs[instance] = p
	return p
}

type routesView struct {
	Routes []struct {
		Ingress struct {
			State      string
			Detail     string
			Partitions []int
		}
	}
}

// kafkaPartitions is what GET /v1/routes of p says of the route: the partitions it
// owns, its state and detail.
func kafkaPartitions(t *testing.T, p *bridgeProc) (parts []int, state, detail string) {
	t.Helper()
	var rv routesView
	if code := p.api("GET", "/v1/routes", nil, &rv); code != 200 || len(rv.Routes) != 1 {
		t.Fatalf("GET /v1/routes from %s: %d %+v", p.admin, code, rv)
	}
	in := rv.Routes[0].Ingress
	return in.Partitions, in.State, in.Detail
}

// TestRollingUpgradeFromGroupRelease: two bridges of the previous release (consumer
// group members) run a route under a steady stream; the new release is rolled out the
// way the chart's rolling update does it: a new instance starts (it must be ready, and
// on standby: the group still has members, so it reads no partition), an old one is
// stopped with SIGTERM, a second new one starts, the last old one is stopped. Once the
// group is empty the new instances own the four partitions and resume from the offsets
// the old ones committed. Asserted: every record reaches the target (lost 0), none
// early, none twice (a record the old members parked but did not commit is read again
// by its new owner and refused by the idempotent park), and the new instances acquired
// no partition while an old one was alive. Lateness is logged.
func TestRollingUpgradeFromGroupRelease(t *testing.T) {
	prev := releaseBuild(t, groupRelease).bin
	const ttl = time.Second
	c := startHACluster(t, 4, ttl)
	o1 := c.startPrevious("up-o1", prev)
	o2 := c.startPrevious("up-o2", prev)
	c.waitBalanced(o1, 20*time.Second, "up-o1", "up-o2")
	s := startStream(t, c.writer, "up", 200, 200*time.Millisecond, 2*time.Second)
	time.Sleep(2 * time.Second)

	n1 := c.start("up-n1") // waits for /readyz 200: standby is ready
	time.Sleep(2 * time.Second)
	if parts, state, detail := kafkaPartitions(t, n1); len(parts) != 0 || state != "consuming" || !strings.Contains(detail, "standby") {
		t.Errorf("new instance beside two old ones: partitions %v, state %s (%s); want none, consuming on standby", parts, state, detail)
	}
	o1.stop()
	n2 := c.start("up-n2")
	time.Sleep(2 * time.Second)
	for _, p := range []*bridgeProc{n1, n2} {
		if parts, _, detail := kafkaPartitions(t, p); len(parts) != 0 || !strings.Contains(detail, "standby") {
			t.Errorf("%s beside one old instance: partitions %v (%s); want none, on standby", p.admin, parts, detail)
		}
	}
	for _, p := range []*bridgeProc{n1, n2} {
		if strings.Contains(p.logs(), "partition acquired") {
			t.Errorf("%s acquired a partition while an old instance was a member of the group:\n%s", p.admin, p.logs())
		}
	}
	lastOld := time.Now()
	o2.stop()
	waitUntil(t, "the new instances owning the four partitions", 30*time.Second, func() bool {
		p1, _, _ := kafkaPartitions(t, n1)
		p2, _, _ := kafkaPartitions(t, n2)
		return len(p1)+len(p2) == 4
	})
	tookOver := time.Since(lastOld)
	time.Sleep(3 * time.Second)
	sentMsgs := s.finish(t)
	waitUntil(t, "every record on the target", time.Minute, func() bool { return c.target.uniqueCount() >= len(sentMsgs) })
	time.Sleep(time.Second) // a late duplicate would arrive now
	got := c.target.snapshot()
	dups := ledger(t, sentMsgs, got, "orders.delay")
	if dups != 0 {
		t.Errorf("%d messages published twice during the upgrade, want 0", dups)
	}
	late := lateness(got)
	t.Logf("rolling upgrade from the consumer-group release: %d messages, lost 0, early 0, %d duplicates; partitions owned by the new instances %s after the last old one got SIGTERM; lateness p50 %s p99 %s max %s",
		len(sentMsgs), dups, tookOver.Round(time.Millisecond), percentile(late, 0.5), percentile(late, 0.99), percentile(late, 1))
}
