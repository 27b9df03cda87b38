package e2e

import (
	"strconv"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/testkit"
)

// lostClaimBound is how late a message of the claim whose reply was lost may arrive: its
// owner sends the claim again (go-redis once at once on the reset connection, then the
// pump after its backoff from 50 ms) and fires what it finds, so each arrives within
// about a second of due on an idle machine; 15 s leaves room for a loaded one and is still half the 30 s in-flight lease
// (scheduler.inflight_lease, the default, as in production). Left to that lease, the
// claimed messages are recovered at the claim's deadline, 30 s after it was made (a
// claim is made at most a lookahead before due), so at least about 29 s late.
const lostClaimBound = 15 * time.Second

// A claim that Redis ran but whose reply the bridge never got (the connection reset
// between the two: what a timeout, a failover or a migrating slot does) does not leave
// its messages in flight until the in-flight lease, which is for dead owners: the owner
// sends the claim again, finds them in flight, fires them and counts it
// (delaybridge_lost_claims_healed_total). Through the built binary, Redis behind a proxy
// that loses the first claim reply carrying one of the test's messages: every message
// arrives once, none early, each within lostClaimBound of its due time. Lost once, the
// Redis client's own retry of the pipeline may find the claim again; lost on that retry
// too, the pump's resend of the claim must.
func TestLostClaimReplyHealedByItsOwnerE2E(t *testing.T) {
	t.Run("lost once", func(t *testing.T) { lostClaimReplyE2E(t, 1) })
	t.Run("lost on the client's retry too", func(t *testing.T) { lostClaimReplyE2E(t, 2) })
}

// lostClaimReplyE2E runs the bridge with the proxy cutting a claim's reply cuts times
// (the first claim reply carrying a test message, then that same request sent again).
func lostClaimReplyE2E(t *testing.T, cuts int) {
	r := testkit.StartRedis(t)
	const marker = "heal-"
	cut := testkit.StartClaimCut(t, r.Addr(), marker)
	kaddr, _ := testkit.StartKafka(t, 4, "orders.delay", "orders", "dlq")
	cfg, admin := writeConfig(t, cut.Addr, kaddr, kafkaRoute, "")
	e := &kafkaEnv{redis: r, kaddr: kaddr}
	e.target = collect(t, kaddr, "orders")
	e.bridge = startBridge(t, cfg, admin)
	e.bridge.waitReady(30 * time.Second)
	e.writer = newWriter(t, kaddr, "orders.delay")
	t.Cleanup(func() { e.writer.Close() })
	if v := e.bridge.metric("lost_claims_healed_total"); v != 0 {
		t.Fatalf("lost_claims_healed_total = %v before any fault, want 0", v)
	}

	cut.Arm(cuts)
	const n = 300
	sentMsgs := e.produce(t, marker+"m", n, func(i int) time.Duration {
		return 2*time.Second + time.Duration(i%20)*100*time.Millisecond
	})
	// Past the bound, so that a message left to the lease shows up as late (with its
	// lateness) rather than as a timeout.
	waitUntil(t, "all messages on the target", 90*time.Second, func() bool { return e.target.uniqueCount() >= n })
	got := e.target.snapshot()
	if dups := ledger(t, sentMsgs, got, "orders.delay"); dups != 0 {
		t.Errorf("%d duplicates: a claim sent again answers what it claimed, it does not fire twice", dups)
	}
	var late int
	var worst, worstAll time.Duration
	for _, a := range got {
		due, err := strconv.ParseInt(a.headers["x-delay-due-at"], 10, 64)
		if err != nil {
			continue // the ledger reported it
		}
		l := a.at.Sub(time.UnixMilli(due))
		worstAll = max(worstAll, l)
		if l > lostClaimBound {
			late++
			worst = max(worst, l)
		}
	}
	if late > 0 {
		t.Errorf("%d messages arrived more than %s after due (worst %s): the lost claim's messages waited for the in-flight lease", late, lostClaimBound, worst.Round(time.Millisecond))
	}
	if v := e.bridge.metric("lost_claims_healed_total"); v < 1 {
		t.Errorf("lost_claims_healed_total = %v after a lost claim reply, want at least 1", v)
	}
	if c := cut.Cuts(); c != cuts {
		t.Errorf("the proxy lost %d claim replies, want %d", c, cuts)
	}
	t.Logf("%d messages, %d claim replies lost, lost_claims_healed_total %v, latest arrival %s after due",
		n, cut.Cuts(), e.bridge.metric("lost_claims_healed_total"), worstAll.Round(time.Millisecond))
}
