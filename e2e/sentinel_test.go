package e2e

import (
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/testkit"
)

// Sentinel tests: the bridge binary with redis.addrs = three real sentinels and
// redis.master_name, a Kafka → Kafka route, a steady stream of delayed messages, and a
// Redis primary failover in the middle: forced (SENTINEL FAILOVER, the planned case) or
// after SIGKILL of the primary (unplanned). A ledger checks that every message
// produced arrives, none before its due time (x-delay-due-at), and counts duplicates.
//
// redis.min_replicas is 1 (every park waits for the replica before the Kafka offset is
// committed), or DELAYBRIDGE_TEST_SENTINEL_MIN_REPLICAS to measure another value: with
// 0, parks the old primary took after the replica was promoted (or had not yet
// replicated when it was killed) are lost, and the ledger says which.
// DELAYBRIDGE_TEST_SENTINEL_REPLICAS (default 1) sets the number of replicas.

const (
	sentinelRate     = 50 // messages per second
	sentinelMaxDelay = 5 * time.Second
)

// sentinelEnvInt reads a number from the environment: def when unset, at least least.
func sentinelEnvInt(t *testing.T, name string, def, least int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < least {
		t.Fatalf("%s=%q: want a number >= %d", name, v, least)
	}
	return n
}

// sentinelConfig writes the e2e bridge.yaml (writeConfig) with the sentinels as
// redis.addrs, plus master_name and min_replicas.
func sentinelConfig(t *testing.T, s *testkit.RedisSentinel, kaddr string, minReplicas int) (string, string) {
	t.Helper()
	more := fmt.Sprintf(", master_name: %s, min_replicas: %d", s.MasterName, minReplicas)
	return writeConfigRedis(t, redisSection(s.Addrs(), more), kaddr, kafkaRoute, "")
}

func TestSentinelFailoverKafkaToKafka(t *testing.T) { runSentinelFailover(t, false) }

func TestSentinelPrimaryKilledKafkaToKafka(t *testing.T) { runSentinelFailover(t, true) }

func runSentinelFailover(t *testing.T, kill bool) {
	minReplicas := sentinelEnvInt(t, "DELAYBRIDGE_TEST_SENTINEL_MIN_REPLICAS", 1, 0)
	replicas := sentinelEnvInt(t, "DELAYBRIDGE_TEST_SENTINEL_REPLICAS", 1, 1)
	s := testkit.StartRedisSentinelReplicas(t, replicas)
	kaddr, _ := testkit.StartKafka(t, 4, "orders.delay", "orders")
	cfg, admin := sentinelConfig(t, s, kaddr, minReplicas)
	e := &kafkaEnv{kaddr: kaddr}
	e.target = collect(t, kaddr, "orders")
	e.bridge = startBridge(t, cfg, admin)
	e.writer = newWriter(t, kaddr, "orders.delay")
	t.Cleanup(func() { e.writer.Close() })

	prefix := "sf"
	if kill {
		prefix = "sk"
	}
	st := startStream(t, e.writer, prefix, sentinelRate, 0, sentinelMaxDelay)
	time.Sleep(2 * time.Second)

	faultAt := time.Now()
	var old, promoted *testkit.Redis
	if kill {
		old = s.KillPrimary()
		promoted = s.WaitNewPrimary(old, 30*time.Second)
	} else {
		old, promoted = s.Failover()
	}
	switchedAt := time.Now()
	if kill {
		old.Restart() // with its append-only file; the sentinels make it a replica
	}
	s.WaitReplicaSynced(60 * time.Second)
	replicatedAt := time.Now()
	time.Sleep(2 * time.Second)
	sentMsgs := st.finish(t)

	// Every message within a generous bound; the ledger names any that did not come.
	deadline := time.Now().Add(60 * time.Second)
	for e.target.uniqueCount() < len(sentMsgs) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	var stats struct {
		Totals struct{ Pending, Inflight, Dead int64 }
	}
	// Leases, claims and acks written to the old primary after its last replication
	// are gone; what they had moved is in flight again on the new one until the
	// bridge recovers it. Wait for the shards to drain so late duplicates are counted.
	drained := false
	for {
		e.bridge.api("GET", "/v1/stats", nil, &stats)
		if stats.Totals.Pending == 0 && stats.Totals.Inflight == 0 {
			drained = true
			break
		}
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	got := e.target.snapshot()
	dups := ledger(t, sentMsgs, got, "orders.delay")
	if !drained {
		t.Errorf("shards not drained 60 s after the stream ended: %+v", stats.Totals)
	}
	if stats.Totals.Dead != 0 {
		t.Errorf("%d messages dead-lettered", stats.Totals.Dead)
	}

	what := "SENTINEL FAILOVER"
	if kill {
		what = "SIGKILL of the primary"
	}
	t.Logf("%s (%d replicas, min_replicas %d): %s -> %s; sentinels agreed on the new primary %s after the fault, old primary a synced replica %s after",
		what, replicas, minReplicas, old.Addr(), promoted.Addr(), switchedAt.Sub(faultAt).Round(time.Millisecond), replicatedAt.Sub(faultAt).Round(time.Millisecond))
	t.Logf("%d messages produced, %d arrived (%d unique), %d duplicates %v", len(sentMsgs), len(got), e.target.uniqueCount(), dups, duplicateIDs(got))
	reportFailoverLateness(t, sentMsgs, got, faultAt, replicatedAt)
	t.Logf("bridge warnings and errors: %s", logSummary(e.bridge.logs()))
}

// duplicateIDs lists the ids that arrived more than once, with their count.
func duplicateIDs(got []arrival) []string {
	var out []string
	for id, as := range arrivalsByID(got) {
		if len(as) > 1 {
			out = append(out, fmt.Sprintf("%s×%d", id, len(as)))
		}
	}
	sort.Strings(out)
	return out
}

// reportFailoverLateness logs the lateness (first arrival − due) of the messages
// produced before the fault (parked already: how long firing paused), produced while the
// primary was switching or had no synced replica (how long parking paused: with
// min_replicas ≥ 1 a park needs a replica), and produced after; and the longest stretch
// without any arrival around the fault.
func reportFailoverLateness(t *testing.T, sentMsgs map[string]sent, got []arrival, from, to time.Time) {
	t.Helper()
	type phase struct {
		n        int
		max, sum time.Duration
		overSec  int
	}
	var before, during, after phase
	for id, as := range arrivalsByID(got) {
		a, s := as[0], sentMsgs[id]
		dueMs, err := strconv.ParseInt(a.headers["x-delay-due-at"], 10, 64)
		if err != nil {
			continue
		}
		late := a.at.Sub(time.UnixMilli(dueMs))
		p := &after
		switch {
		case s.at.Before(from):
			p = &before
		case s.at.Before(to):
			p = &during
		}
		p.n++
		p.sum += late
		p.max = max(p.max, late)
		if late > time.Second {
			p.overSec++
		}
	}
	times := make([]time.Time, 0, len(got))
	for _, a := range got {
		times = append(times, a.at)
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	var gap time.Duration
	var gapAt time.Time
	for i := 1; i < len(times); i++ {
		if times[i].Before(from.Add(-time.Second)) || times[i-1].After(to.Add(2*time.Second)) {
			continue
		}
		if d := times[i].Sub(times[i-1]); d > gap {
			gap, gapAt = d, times[i-1]
		}
	}
	show := func(name string, p phase) string {
		if p.n == 0 {
			return name + ": none"
		}
		return fmt.Sprintf("%s: %d msgs, mean %s, max %s, %d over 1 s", name, p.n,
			(p.sum / time.Duration(p.n)).Round(time.Millisecond), p.max.Round(time.Millisecond), p.overSec)
	}
	t.Logf("lateness of messages produced %s; %s; %s", show("before the fault", before),
		show("until a replica was synced again", during), show("after", after))
	t.Logf("longest pause between arrivals around the fault: %s, starting %s after the fault",
		gap.Round(time.Millisecond), gapAt.Sub(from).Round(time.Millisecond))
}

var logMsg = regexp.MustCompile(`level=(WARN|ERROR) msg=("(?:[^"\\]|\\.)*"|\S+)`)

// logSummary counts the bridge's WARN and ERROR log lines by message.
func logSummary(logs string) string {
	counts := map[string]int{}
	for _, m := range logMsg.FindAllStringSubmatch(logs, -1) {
		counts[m[1]+" "+m[2]]++
	}
	if len(counts) == 0 {
		return "none"
	}
	var out []string
	for k, n := range counts {
		out = append(out, fmt.Sprintf("%d× %s", n, k))
	}
	sort.Strings(out)
	return strings.Join(out, "; ")
}
