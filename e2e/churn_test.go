package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/config"
)

// readyProbe polls GET /readyz of some bridges until stopped and records every change of
// status per bridge (with the body naming the failing check).
type readyProbe struct {
	mu      sync.Mutex
	changes []readyChange
	last    map[string]int
	stop    chan struct{}
	done    chan struct{}
}

type readyChange struct {
	at     time.Time
	admin  string
	status int // 0: no answer (process down)
	body   string
}

func probeReadiness(t *testing.T, every time.Duration, procs ...*bridgeProc) *readyProbe {
	t.Helper()
	rp := &readyProbe{last: map[string]int{}, stop: make(chan struct{}), done: make(chan struct{})}
	client := &http.Client{Timeout: time.Second}
	go func() {
		defer close(rp.done)
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			for _, p := range procs {
				status, body := 0, ""
				if resp, err := client.Get("http://" + p.admin + "/readyz"); err == nil {
					b, _ := io.ReadAll(resp.Body)
					resp.Body.Close()
					status, body = resp.StatusCode, strings.TrimSpace(string(b))
				}
				rp.mu.Lock()
				if prev, seen := rp.last[p.admin]; !seen || prev != status {
					rp.changes = append(rp.changes, readyChange{at: time.Now(), admin: p.admin, status: status, body: body})
					rp.last[p.admin] = status
				}
				rp.mu.Unlock()
			}
			select {
			case <-rp.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(rp.halt)
	return rp
}

// failingIngress returns the detail of the first failing "ingress <route>" check in a
// /readyz body, or "".
func failingIngress(body string) string {
	var r struct {
		Checks []struct {
			Name   string
			OK     bool
			Detail string
		}
	}
	if json.Unmarshal([]byte(body), &r) != nil {
		return ""
	}
	for _, c := range r.Checks {
		if strings.HasPrefix(c.Name, "ingress ") && !c.OK {
			return c.Name + ": " + c.Detail
		}
	}
	return ""
}

func (rp *readyProbe) halt() {
	select {
	case <-rp.stop:
	default:
		close(rp.stop)
	}
	<-rp.done
}

func (rp *readyProbe) snapshot() []readyChange {
	rp.mu.Lock()
	defer rp.mu.Unlock()
	return append([]readyChange(nil), rp.changes...)
}

// TestKafkaKillChurn is the kill -9 loop: two bridges share a Kafka route
// (its four partitions owned by lease, like the shards); one is killed with SIGKILL and
// restarted at once every 3 s, five times, under a steady stream of 200 msgs/s with
// delays of 0.2–2 s, at lease_ttl 1 s. Asserted: every record reaches the target (lost
// 0), none early, every duplicate falls in a kill window (a message the victim had
// published but not acknowledged; an ingress replay after a failover is suppressed by
// the idempotent park, so it adds none), and /readyz answered 503 naming the ingress
// while partitions waited for their leases (a dead member's, or the survivor's
// handover once the restarted process stopped holding off; polled throughout). Logged,
// never asserted: the lateness after the due time (p50, p99, max, and the latest
// messages with the kill before their due time), and the time to heal after the last
// restart.
func TestKafkaKillChurn(t *testing.T) {
	kafkaChurn(t, "kill -9", func(p *bridgeProc) { p.kill() }, true, false)
}

// TestKafkaKillChurnAtDefaults is the same loop at the scheduler's defaults (lease_ttl
// 3 s, lookahead 2 s, safety scan 1 s), the victim killed alternately lease_ttl and
// lease_ttl + 2 s after its restart: a process that dies about when its predecessor's
// leases lapse (a crash loop), and one that lives long enough to take its share back
// and is killed holding it. Asserted as TestKafkaKillChurn except the 503s, and the
// product's failover promise: no message later than lease_ttl + 1 s (plus a margin,
// see kafkaChurn), and at most maxDupsPerKill duplicates per kill. A restarted
// process holds off from taking its share until the others have taken the dead
// incarnation's over (membership.Admission); without that, each new incarnation took
// the shards and partitions as their leases lapsed and died before firing them, and a
// message waited through several failovers.
func TestKafkaKillChurnAtDefaults(t *testing.T) {
	kafkaChurn(t, "kill -9", func(p *bridgeProc) { p.kill() }, false, true)
}

// TestKafkaKillChurnClaimingAhead is TestKafkaKillChurn with
// scheduler.park_claim_horizon at 3 s, beyond every delay of the stream (0.2-2 s): each
// message is claimed by its own park, in flight from its arrival until it fires, so a
// kill leaves the victim's whole wheel in flight rather than pending. Asserted as
// there: nothing lost, none early, every duplicate in a kill window; and the instance
// never killed claimed more of its messages at park than its pumps did (without the
// horizon, only those due within the 0.5 s lookahead are: about a sixth).
func TestKafkaKillChurnClaimingAhead(t *testing.T) {
	a := kafkaChurnWith(t, "kill -9", func(p *bridgeProc) { p.kill() }, false, false, "park_claim_horizon: 3s, ")
	atPark := a.metric("messages_claimed_total", `via="park"`)
	byPump := a.metric("messages_claimed_total", `via="claim"`)
	t.Logf("cu-a claimed %.0f messages at park, %.0f by its pumps", atPark, byPump)
	if atPark <= byPump {
		t.Errorf("cu-a claimed %.0f messages at park and %.0f by its pumps; with park_claim_horizon beyond every delay, want most at park", atPark, byPump)
	}
}

// TestKafkaRollingRestartChurn is the same loop with SIGTERM (a rolling restart): the
// victim commits what it parked, releases its partitions and shards and leaves; it is
// started again at once. Asserted as above except the 503s (a graceful handover may
// be quicker than the probe); the lateness target is p99 <= 0.5 s.
func TestKafkaRollingRestartChurn(t *testing.T) {
	kafkaChurn(t, "SIGTERM", func(p *bridgeProc) { p.stop() }, false, false)
}

// Bounds of TestKafkaKillChurnAtDefaults.
const (
	// lateMargin is added to the promised failover (lease_ttl + 1 s) for what the
	// measured lateness holds besides it: the publish through the in-process Kafka
	// broker and the collector's fetch of the target, on a 2-core machine shared with
	// other test processes (and a race-enabled binary when DELAYBRIDGE_TEST_E2E_NORACE
	// is unset). Measured failovers stay about 0.3 s under the promise.
	lateMargin = 500 * time.Millisecond
	// maxDupsPerKill bounds the duplicates of one kill. Each is a message the victim
	// published (the broker confirmed it) whose acknowledgement had not reached Redis
	// when it died: the next owner recovers it from the in-flight set and publishes it
	// again. Acknowledgements are batched every 250 ms, so that is what the last
	// quarter second or so before the kill published: at 200 msgs/s, half of them the
	// victim's, about 25 (measured 25–30 per kill that hit a process holding shards),
	// more when a recovered backlog was being fired. (A record replayed by ingress
	// after a failover is refused by the idempotent park and adds none.)
	maxDupsPerKill = 100
)

// kafkaChurn runs the loop of TestKafkaKillChurn, ending the victim with end; with
// defaults, at the scheduler's defaults, killed alternately lease_ttl and lease_ttl + 2 s
// after each restart, with the lateness and the duplicates judged.
func kafkaChurn(t *testing.T, what string, end func(*bridgeProc), want503, defaults bool) {
	kafkaChurnWith(t, what, end, want503, defaults, "")
}

// kafkaChurnWith is kafkaChurn with more scheduler settings (haCluster.sched); it
// returns the bridge that was never ended, still running.
func kafkaChurnWith(t *testing.T, what string, end func(*bridgeProc), want503, defaults bool, sched string) *bridgeProc {
	ttl := time.Second
	periods := []time.Duration{3 * time.Second, 3 * time.Second, 3 * time.Second, 3 * time.Second, 3 * time.Second}
	if defaults {
		ttl = config.Default().Scheduler.LeaseTTL
		periods = []time.Duration{ttl, ttl + 2*time.Second, ttl, ttl + 2*time.Second, ttl}
	}
	c := startHACluster(t, 4, ttl)
	c.defaults, c.sched = defaults, sched
	a := c.start("cu-a")
	victim := c.start("cu-b")
	c.waitBalanced(a, 20*time.Second, "cu-a", "cu-b")
	probe := probeReadiness(t, 100*time.Millisecond, a, victim)

	s := startStream(t, c.writer, "cu", 200, 200*time.Millisecond, 2*time.Second)
	time.Sleep(2 * time.Second)
	var faults []fault
	var lastRestart time.Time
	for k, period := range periods {
		killed := time.Now()
		end(victim)
		victim.launch() // restarted at once, not waited for: it is killed again a period later
		lastRestart = time.Now()
		time.Sleep(time.Until(killed.Add(period)))
		faults = append(faults, fault{what: fmt.Sprintf("%s+restart #%d", what, k+1), start: killed, end: time.Now().Add(ttl)})
	}
	t.Logf("churn: 5 kills done; the stream keeps running 5 s more")
	time.Sleep(5 * time.Second)
	sentMsgs := s.finish(t)
	streamEnd := time.Now()

	// Heal: both instances ready again, and every record on the target. Generous bounds:
	// the figures are logged, not asserted.
	var readyAt time.Time
	waitUntil(t, "both bridges ready after the churn", 3*time.Minute, func() bool {
		for _, p := range []*bridgeProc{a, victim} {
			resp, err := http.Get("http://" + p.admin + "/readyz")
			if err != nil {
				return false
			}
			resp.Body.Close()
			if resp.StatusCode != 200 {
				return false
			}
		}
		readyAt = time.Now()
		return true
	})
	waitAllArrived(t, c.target, sentMsgs, 3*time.Minute)
	allAt := time.Now()
	probe.halt()

	got := c.target.snapshot()
	dups := ledger(t, sentMsgs, got, "orders.delay")
	perKill := c.checkDuplicates(t, got, faults, 2*ttl+time.Second)
	late := lateness(got)

	var lines []string
	ingress503 := 0
	var readyForGood time.Time // the last change to 200 (both stayed ready after it)
	for _, ch := range probe.snapshot() {
		lines = append(lines, fmt.Sprintf("%s %s %d %s", ch.at.Format("15:04:05.000"), ch.admin, ch.status, ch.body))
		if ch.status == 503 && failingIngress(ch.body) != "" {
			ingress503++
		}
		if ch.status == 200 && ch.at.After(readyForGood) {
			readyForGood = ch.at
		}
	}
	for name, p := range map[string]*bridgeProc{"cu-a": a, "cu-b": victim} {
		var states []string
		for _, line := range strings.Split(p.logs(), "\n") {
			if strings.Contains(line, "kafka ingress") {
				states = append(states, strings.TrimSpace(line))
			}
		}
		t.Logf("%s ingress states, partitions acquired and released:\n  %s", name, strings.Join(states, "\n  "))
	}
	t.Logf("readiness changes:\n  %s", strings.Join(lines, "\n  "))
	if defaults {
		bound := ttl + time.Second + lateMargin
		if over := len(late) - sort.Search(len(late), func(i int) bool { return late[i] > bound }); over > 0 {
			t.Errorf("%d messages later than lease_ttl + 1 s + %s = %s after their due time (max %s): a failover took longer than promised",
				over, lateMargin, bound, percentile(late, 1))
		}
		for k, n := range perKill {
			if n > maxDupsPerKill {
				t.Errorf("kill #%d: %d duplicates, more than the %d the messages published but not yet acknowledged explain", k+1, n, maxDupsPerKill)
			}
		}
	}
	if want503 && ingress503 == 0 {
		t.Errorf("/readyz never answered 503 naming a failing ingress check on either instance during the churn")
	}
	t.Logf("%s churn (lease_ttl %s, kills %v after each restart): %d messages, lost 0, early 0 (ledger), %d duplicates (per kill %v); lateness after due p50 %s p99 %s max %s; the latest %s; %d readiness 503s naming ingress; after the last restart: both ready from %s on (first both-ready poll %s), every record on the target after %s (stream ended %s after it)",
		what, ttl, periods, len(sentMsgs), dups, perKill, percentile(late, 0.5), percentile(late, 0.99), percentile(late, 1),
		latest(got, sentMsgs, faults, 3), ingress503,
		readyForGood.Sub(lastRestart).Round(time.Millisecond), readyAt.Sub(lastRestart).Round(time.Millisecond),
		allAt.Sub(lastRestart).Round(time.Millisecond), streamEnd.Sub(lastRestart).Round(time.Millisecond))
	return a
}

// lateness is, sorted, each message's first arrival after its due time (x-delay-due-at).
func lateness(got []arrival) []time.Duration {
	first := map[string]time.Duration{}
	for _, a := range got {
		due, err := strconv.ParseInt(a.headers["x-delay-due-at"], 10, 64)
		if err != nil {
			continue
		}
		id := a.headers["x-message-id"]
		if _, seen := first[id]; !seen {
			first[id] = a.at.Sub(time.UnixMilli(due))
		}
	}
	out := make([]time.Duration, 0, len(first))
	for _, d := range first {
		out = append(out, d)
	}
	slices.Sort(out)
	return out
}

// latest describes the n latest messages: id, shard, lateness, and when each was due
// relative to the last kill before it.
func latest(got []arrival, sentMsgs map[string]sent, faults []fault, n int) string {
	type late struct {
		id   string
		due  time.Time
		late time.Duration
	}
	first := map[string]late{}
	for _, a := range got {
		id := a.headers["x-message-id"]
		m, ok := sentMsgs[id]
		if _, seen := first[id]; seen || !ok {
			continue
		}
		due := m.at.Add(m.delay)
		first[id] = late{id: id, due: due, late: a.at.Sub(due)}
	}
	all := make([]late, 0, len(first))
	for _, l := range first {
		all = append(all, l)
	}
	slices.SortFunc(all, func(x, y late) int { return int(y.late - x.late) })
	var out []string
	for _, l := range all[:min(n, len(all))] {
		rel := "before the first kill"
		for _, f := range faults {
			if !f.start.After(l.due) {
				rel = fmt.Sprintf("due %s after %s", l.due.Sub(f.start).Round(time.Millisecond), f.what)
			}
		}
		out = append(out, fmt.Sprintf("%s (shard %d) %s late, %s", l.id, shardOf(l.id), l.late.Round(time.Millisecond), rel))
	}
	return strings.Join(out, "; ")
}
