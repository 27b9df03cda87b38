package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/testkit"
)

// Recurring schedules through the built binary: one publish per slot across a kill -9
// of the slot's owner, and many schedules at once.

// scheduleConfig writes instance's bridge.yaml for an haCluster: the route orders (its
// source an idle topic in a group of the instance's own, so a killed consumer stalls
// nobody) to the topic orders, the scheduler's failover at the cluster's lease TTL, and
// the given schedules: YAML.
func (c *haCluster) scheduleConfig(instance, horizon, schedules string) (path, admin string) {
	c.t.Helper()
	admin = "127.0.0.1:" + strconv.Itoa(testkit.FreePort(c.t))
	cfg := fmt.Sprintf(`cluster: sched
shards: %d
instance: %s
redis: { addrs: ["%s"] }
kafka: { brokers: ["%s"], group_id: %s }
scheduler: { lookahead: %s, lease_ttl: %s, safety_scan: 200ms, schedule_horizon: %s, schedule_interval: 200ms }
retry: { max_attempts: 5, backoff: { initial: 100ms, max: 500ms } }
admin: { listen: "%s" }
log: { level: info, format: text }
routes:
  - name: orders
    from: { kafka: { topic: idle.delay } }
    to:   { kafka: { topic: orders } }
schedules:
%s
`, haShards, instance, strings.Join(c.redis, `", "`), c.kaddr, testkit.Uniq(c.t, c.group+"-"+instance),
		c.leaseTTL/2, c.leaseTTL, horizon, admin, schedules)
	path = filepath.Join(c.t.TempDir(), instance+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		c.t.Fatal(err)
	}
	return path, admin
}

// slotArrivals maps the slot (unix ms) of every arrived occurrence of schedule id to how
// many times it arrived, and checks that none arrived before its slot.
func slotArrivals(t *testing.T, got []arrival, id string) map[int64]int {
	t.Helper()
	out := map[int64]int{}
	for _, a := range got {
		occ := a.headers["x-message-id"]
		sched, rest, ok := strings.Cut(occ, "@")
		if !ok || sched != id {
			continue
		}
		rest, _, _ = strings.Cut(rest, "~") // a later generation's id: <id>@<slot>~<gen>
		slot, err := strconv.ParseInt(rest, 10, 64)
		if err != nil {
			t.Errorf("occurrence id %q: not <id>@<slot ms>[~<gen>]", occ)
			continue
		}
		if a.at.UnixMilli() < slot {
			t.Errorf("%s arrived %d ms before its slot", occ, slot-a.at.UnixMilli())
		}
		out[slot]++
	}
	return out
}

// checkEverySlotOnce fails unless every slot of a period-ms schedule from the first
// arrived to the last arrived exactly once.
func checkEverySlotOnce(t *testing.T, id string, slots map[int64]int, period int64) (n int) {
	t.Helper()
	var keys []int64
	for s := range slots {
		keys = append(keys, s)
	}
	if len(keys) == 0 {
		t.Fatalf("%s: nothing arrived", id)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i] < keys[j] })
	for s := keys[0]; s <= keys[len(keys)-1]; s += period {
		switch slots[s] {
		case 1:
		case 0:
			t.Errorf("%s: slot %s never arrived", id, time.UnixMilli(s).UTC().Format(time.RFC3339Nano))
		default:
			t.Errorf("%s: slot %s arrived %d times", id, time.UnixMilli(s).UTC().Format(time.RFC3339Nano), slots[s])
		}
	}
	return len(keys)
}

// TestScheduleKill9OwnerAtSlot: two bridges share an @every 1s schedule; 50 ms before a
// slot, the instance that plans the schedule and owns the slot's shard (its occurrence
// is in that instance's wheel by then) is killed with SIGKILL. The survivor takes the
// shards over within the lease TTL: every slot, the killed one included, is published
// exactly once, none early.
func TestScheduleKill9OwnerAtSlot(t *testing.T) {
	c := startHACluster(t, 1, haLeaseTTL(t))
	procs := map[string]*bridgeProc{}
	for _, in := range []string{"sched-a", "sched-b"} {
		cfg, admin := c.scheduleConfig(in, "3s", `  - { id: tick, route: orders, spec: "@every 1s" }`)
		procs[in] = startBridge(t, cfg, admin)
	}
	for _, p := range procs {
		p.waitReady(60 * time.Second)
	}
	c.waitBalanced(procs["sched-a"], 30*time.Second, "sched-a", "sched-b")
	owners := c.owners(procs["sched-a"])
	planner := owners[shardOf("tick")]
	// A slot 2 to 32 s ahead whose occurrence lives in a shard of the planner's owner.
	now := time.Now().UnixMilli()
	slot := now - now%1000 + 2000
	for i := 0; i < 30 && owners[shardOf(fmt.Sprintf("tick@%d", slot))] != planner; i++ {
		slot += 1000
	}
	victim := procs[planner]
	time.Sleep(time.Until(time.UnixMilli(slot - 50)))
	victim.kill()
	t.Logf("killed %s (planner of tick, owner of the shard of tick@%d) 50 ms before that slot", planner, slot)
	// Failover (lease TTL), then a few slots planned by the survivor alone.
	time.Sleep(c.leaseTTL + 6*time.Second)
	n := checkEverySlotOnce(t, "tick", slotArrivals(t, c.target.snapshot(), "tick"), 1000)
	if slots := slotArrivals(t, c.target.snapshot(), "tick"); slots[slot] != 1 || slots[slot+5000] != 1 {
		t.Errorf("the killed slot arrived %d times, the one 5 s later %d times; want 1 and 1", slots[slot], slots[slot+5000])
	}
	t.Logf("%d slots, each published once", n)
	for name, p := range procs {
		if name != planner {
			if probs := p.problems(); len(probs) > 0 {
				t.Errorf("%s: %v", name, probs)
			}
		}
	}
}

// TestScheduleThousandEverySecond: 1,000 schedules `@every 1s` on one bridge through
// kfake for DELAYBRIDGE_TEST_SCHEDULE_SOAK (default 15s; a minute by hand):
// every slot of every schedule in the window arrives exactly once (0 duplicates, none
// early); the lateness (arrival at the test's consumer minus the slot) is logged, not
// asserted.
func TestScheduleThousandEverySecond(t *testing.T) {
	soak := 15 * time.Second
	if v := os.Getenv("DELAYBRIDGE_TEST_SCHEDULE_SOAK"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 5*time.Second {
			t.Fatalf("DELAYBRIDGE_TEST_SCHEDULE_SOAK=%q: want a duration of at least 5s", v)
		}
		soak = d
	}
	const n = 1000
	c := startHACluster(t, 1, haLeaseTTL(t))
	var yaml strings.Builder
	for i := range n {
		fmt.Fprintf(&yaml, "  - { id: s%04d, route: orders, spec: \"@every 1s\" }\n", i)
	}
	cfg, admin := c.scheduleConfig("soak", "10s", yaml.String())
	p := startBridge(t, cfg, admin)
	p.waitReady(60 * time.Second)
	// The window starts once the planner's first round has parked every schedule: it
	// plans a new schedule from the moment it reaches it, and a round of 1,000 under
	// -race on a loaded machine can take longer than the two seconds below (CI once saw
	// the last 67 schedules' first checked slot already past when they were planned).
	for deadline := time.Now().Add(60 * time.Second); p.seriesCount("schedule_slots_total", `outcome="parked"`) < n; time.Sleep(100 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the planner's first round did not park all %d schedules within 60s", n)
		}
	}
	start := time.Now()
	time.Sleep(soak)
	end := time.Now()
	time.Sleep(3 * time.Second) // the window's last slots arrive
	got := c.target.snapshot()

	bySched := map[string][]arrival{}
	for _, a := range got {
		id, _, _ := strings.Cut(a.headers["x-message-id"], "@")
		bySched[id] = append(bySched[id], a)
	}
	var late []time.Duration
	total, dups := 0, 0
	first := start.Add(2*time.Second).UnixMilli()/1000*1000 + 1000 // whole seconds from 2 s in
	for i := range n {
		id := fmt.Sprintf("s%04d", i)
		slots := slotArrivals(t, bySched[id], id)
		for s, k := range slots {
			if k > 1 {
				dups += k - 1
			}
			if s >= first && s <= end.UnixMilli() {
				total++
			}
		}
		for s := first; s <= end.UnixMilli(); s += 1000 {
			if slots[s] == 0 {
				t.Errorf("%s: slot %s never arrived", id, time.UnixMilli(s).UTC().Format(time.RFC3339Nano))
			}
		}
		for _, a := range bySched[id] {
			_, rest, _ := strings.Cut(a.headers["x-message-id"], "@")
			slot, _ := strconv.ParseInt(rest, 10, 64)
			if slot >= first && slot <= end.UnixMilli() { // steady state: not the start's first round
				late = append(late, a.at.Sub(time.UnixMilli(slot)))
			}
		}
	}
	if dups != 0 {
		t.Errorf("%d duplicate occurrences", dups)
	}
	sort.Slice(late, func(i, j int) bool { return late[i] < late[j] })
	q := func(f float64) time.Duration { return late[int(f*float64(len(late)-1))] }
	t.Logf("%d schedules @every 1s for %s: %d occurrences arrived (%d in the checked window), %d duplicates; lateness at the consumer in the window p50 %s p99 %s max %s",
		n, soak, len(got), total, dups, q(0.5), q(0.99), late[len(late)-1])
	if probs := p.problems(); len(probs) > 0 {
		t.Errorf("bridge: %v", probs)
	}
}
