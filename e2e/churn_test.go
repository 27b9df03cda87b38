package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
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

// TestKafkaGroupChurnHeals: two bridges share a Kafka route (one consumer group); one is
// killed with SIGKILL and restarted every 3 s, five times, under a steady stream of
// 200 msgs/s. The consumer group churns through rebalances with a dead member each time.
// Afterwards every record must reach the target (none lost, none early, duplicates only
// within the kill windows), and /readyz must have answered 503 on some instance while
// its ingress was not consuming (polled throughout). The log gives the time to heal
// after the last restart: until both instances are ready again, and until every record
// arrived.
func TestKafkaGroupChurnHeals(t *testing.T) {
	const ttl = time.Second
	c := startHACluster(t, 4, ttl)
	a := c.start("cu-a")
	victim := c.start("cu-b")
	c.waitBalanced(a, 20*time.Second, "cu-a", "cu-b")
	probe := probeReadiness(t, 100*time.Millisecond, a, victim)

	s := startStream(t, c.writer, "cu", 200, 200*time.Millisecond, 2*time.Second)
	time.Sleep(2 * time.Second)
	var faults []fault
	var lastRestart time.Time
	for k := 0; k < 5; k++ {
		killed := time.Now()
		victim.kill()
		victim.launch() // restarted at once, not waited for: it is killed again 3 s later
		lastRestart = time.Now()
		time.Sleep(time.Until(killed.Add(3 * time.Second)))
		faults = append(faults, fault{what: fmt.Sprintf("SIGKILL+restart #%d", k+1), start: killed, end: time.Now().Add(ttl)})
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
	waitUntil(t, "every record on the target", 3*time.Minute, func() bool { return c.target.uniqueCount() >= len(sentMsgs) })
	allAt := time.Now()
	probe.halt()

	got := c.target.snapshot()
	dups := ledger(t, sentMsgs, got, "orders.delay")
	perKill := c.checkDuplicates(t, got, faults, 2*ttl+time.Second)

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
		t.Logf("%s ingress states and rebuilds:\n  %s", name, strings.Join(states, "\n  "))
	}
	t.Logf("readiness changes:\n  %s", strings.Join(lines, "\n  "))
	if ingress503 == 0 {
		t.Errorf("/readyz never answered 503 naming a failing ingress check on either instance during the churn")
	}
	t.Logf("churn heal: %d messages, %d duplicates (per kill %v), %d readiness 503s naming ingress; after the last restart: both ready from %s on (first both-ready poll %s), every record on the target after %s (stream ended %s after it)",
		len(sentMsgs), dups, perKill, ingress503, readyForGood.Sub(lastRestart).Round(time.Millisecond), readyAt.Sub(lastRestart).Round(time.Millisecond),
		allAt.Sub(lastRestart).Round(time.Millisecond), streamEnd.Sub(lastRestart).Round(time.Millisecond))
}
