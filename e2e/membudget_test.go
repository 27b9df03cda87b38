package e2e

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delay-bridge/testkit"
)

// The memory a same-instant burst of large messages costs the bridge is bounded by
// scheduler.max_in_memory_bytes, not by the burst: 2,000 messages of 256 KiB (500 MiB)
// all due at one instant go through a bridge at its default settings, with GOMEMLIMIT
// as the Helm chart sets it for a 256 MiB pod, and the bridge's resident memory
// (VmRSS sampled every 100 ms, and the kernel's high-water mark VmHWM) stays within
// the bound below while every message arrives once, intact and none early. The same
// burst with 100 B payloads runs first, for its lateness beside the large one's.
//
// The bound is the 256 MiB pod the documentation provisions: the default budget (64 MiB)
// plus 192 MiB of stated overhead — the encoded produce requests of the messages being
// published (at most the budget again; Options.RequestBytes per request), the process's
// baseline (35–65 MiB) and the collector's slack up to GOMEMLIMIT (GOGC lets the heap
// reach twice what is live, capped by the limit).
//
// The burst is parked whole before its due time (the test fails if it is not: a claim
// racing the ingress would be paced by parking, not by the budget), so nothing but the
// byte budget keeps the bridge from claiming all of it at once. The last run proves it:
// the same burst through a bridge whose budget is 4 GiB
// (DELAYBRIDGE_SCHEDULER__MAX_IN_MEMORY_BYTES) must exceed the bound — it holds the
// whole 500 MiB — or the test cannot tell a bridge without the budget from one with it.
// That run has no Go memory limit (GOMEMLIMIT=off): under the 256 MiB pod's limit the
// bridge refuses a 4 GiB budget at start (TestMemoryBudgetOverPodRefused).
func TestMemoryBoundedBurst(t *testing.T) {
	const (
		budget    = 64 << 20 // config.DefaultMaxInMemoryBytes
		podLimit  = 256 << 20
		bound     = budget + 192<<20  // = podLimit
		goMemLimt = podLimit * 9 / 10 // the chart's goMemLimitPercent: 90
		lookahead = 2 * time.Second   // scheduler.lookahead's default: claims start this long before due
	)
	bin := noRaceBridge(t)
	for _, tc := range []struct {
		name    string
		n, size int
		ahead   time.Duration // due time after the first record is produced
		env     string        // added to the bridge's environment (GOMEMLIMIT here replaces the pod's)
		over    bool          // the control: resident memory must exceed the bound
	}{
		{"100B", 2000, 100, 5 * time.Second, "", false},
		{"256KiB", 2000, 256 << 10, time.Minute, "", false},
		{"256KiB-budget-4GiB", 2000, 256 << 10, time.Minute, "DELAYBRIDGE_SCHEDULER__MAX_IN_MEMORY_BYTES=4294967296 GOMEMLIMIT=off", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.size > 100 {
				// The two large bursts run side by side: most of each is the wait for its
				// due time, the lead a slow machine has to park the burst (~18 s beside the
				// other, each with its broker in a process of its own: the 1 min lead is
				// more than three times that), and the verdict of each is its own process's
				// resident memory, which the other does not move.
				t.Parallel()
			}
			r := testkit.StartRedis(t)
			// The broker runs outside the race-built test process: in it, moving the
			// 500 MiB took most of the test (parking 51–53 s, the drain 32–36 s).
			kaddr := testkit.StartKafkaProcess(t, 4, "burst.delay", "burst")
			cfg, admin := defaultsConfig(t, r.Addr(), kaddr)
			target := collectSums(t, kaddr, "burst")
			// The burst is in the delay topic before the bridge starts: it then reads it as
			// fast as it can, the ingress's own memory at its highest.
			due := time.Now().Add(tc.ahead).Truncate(time.Millisecond)
			want := produceBurst(t, kaddr, "burst.delay", tc.n, tc.size, due)
			p := newBridge(t, []string{bin, "run", "-c", cfg}, cfg, admin)
			p.env = strings.Fields(tc.env)
			if !strings.Contains(tc.env, "GOMEMLIMIT=") {
				p.env = append(p.env, "GOMEMLIMIT="+strconv.Itoa(goMemLimt))
			}
			p.start()
			rss := sampleRSS(t, p.cmd.Process.Pid)
			waitUntil(t, "every message parked", time.Until(due)+2*time.Minute, func() bool {
				return metricSum(t, p, "messages_parked_total") >= float64(tc.n)
			})
			parkedBy := time.Until(due) // negative: parking ended after the due time (a slow machine); the lateness then includes it
			if tc.size > 100 && parkedBy < lookahead {
				t.Fatalf("the burst was parked %s before its due time, less than the lookahead (%s): claims raced the ingress, so the test cannot show what bounds the bridge's memory (a slow machine)",
					parkedBy.Round(time.Millisecond), lookahead)
			}
			waitUntil(t, "every message delivered", tc.ahead+4*time.Minute, func() bool { return target.count() >= tc.n })
			time.Sleep(500 * time.Millisecond) // a duplicate would arrive now
			peak, hwm := rss.stop()

			// A publish whose outcome stayed unknown (a produce of a batch of large records
			// timed out against a slow broker, as the race-instrumented in-process kfake can
			// be) is fired again after its in-flight lease: at least once, so each such
			// publish may add one copy of its message; so may each message fired again
			// because it was held past its lease (the 4 GiB budget claims the whole burst
			// at once, more than the broker takes in scheduler.inflight_lease). Any other
			// duplicate fails.
			unknown := 0.0
			for _, v := range p.series("publish_failures_total", `reason="timeout"`) {
				unknown += v
			}
			recovered := p.metric("messages_recovered_total", `reason="lease_expired"`)
			unknown += recovered
			late := target.check(t, want, int(unknown))
			t.Logf("%d × %d B due at one instant (parked %s before it)%s: lateness p50 %s, p99 %s, max %s; %.0f fired again at their lease; bridge RSS peak %.1f MiB sampled, VmHWM %.1f MiB (bound %d MiB)",
				tc.n, tc.size, parkedBy.Round(time.Millisecond), strings.TrimSuffix(" "+tc.env, " "), pct(late, 50), pct(late, 99), pct(late, 100), recovered,
				float64(peak)/(1<<20), float64(hwm)/(1<<20), bound>>20)
			switch over := peak > bound || hwm > bound; {
			case over && !tc.over:
				t.Errorf("bridge resident memory peaked at %.1f MiB (VmHWM %.1f MiB), over the bound of %d MiB (max_in_memory_bytes + 192 MiB: the 256 MiB pod)",
					float64(peak)/(1<<20), float64(hwm)/(1<<20), bound>>20)
			case !over && tc.over:
				t.Errorf("with a 4 GiB budget the bridge's resident memory peaked at %.1f MiB (VmHWM %.1f MiB), within the bound of %d MiB: something other than max_in_memory_bytes bounds it, and the runs above do not show the budget does",
					float64(peak)/(1<<20), float64(hwm)/(1<<20), bound>>20)
			}
		})
	}
}

// defaultsConfig is a bridge.yaml with one Kafka route and every scheduler setting at
// its default (writeConfig shortens the leases for failover tests).
// TestMemoryBudgetOverPodRefused: a bridge whose byte budget cannot fit its Go memory
// limit (a 4 GiB budget, GOMEMLIMIT as the chart sets it for a 256 MiB pod) refuses to
// start, naming the key, instead of being killed for memory under a burst.
func TestMemoryBudgetOverPodRefused(t *testing.T) {
	bin := noRaceBridge(t)
	cfg, _ := defaultsConfig(t, "127.0.0.1:1", "127.0.0.1:1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "run", "-c", cfg)
	cmd.Env = append(os.Environ(), "GOMEMLIMIT="+strconv.Itoa(256<<20*9/10),
		"DELAYBRIDGE_SCHEDULER__MAX_IN_MEMORY_BYTES=4294967296")
	out, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("bridge run with a 4 GiB budget under a 256 MiB pod's Go limit: err %v (ctx %v), want a refusal; output:\n%s", err, ctx.Err(), out)
	}
	if !strings.Contains(string(out), "scheduler.max_in_memory_bytes") {
		t.Errorf("the refusal does not name scheduler.max_in_memory_bytes:\n%s", out)
	}
}

func defaultsConfig(t *testing.T, redisAddr, kafkaAddr string) (string, string) {
	t.Helper()
	admin := "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
	cfg := fmt.Sprintf(`cluster: e2e
instance: %s
redis: { addrs: [%q] }
kafka: { brokers: [%q], group_id: %s }
admin: { listen: %q }
log: { level: info, format: text }
routes:
  - name: burst
    from: { kafka: { topic: burst.delay } }
    to:   { kafka: { topic: burst } }
`, testkit.Uniq(t, "inst"), redisAddr, kafkaAddr, testkit.Uniq(t, "group"), admin)
	path := filepath.Join(t.TempDir(), "bridge.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, admin
}

var (
	noRaceOnce sync.Once
	noRaceBin  string
	noRaceErr  error
)

// noRaceBridge is the bridge built without the race detector (which multiplies the
// memory a process uses), built once per test run.
func noRaceBridge(t *testing.T) string {
	t.Helper()
	if os.Getenv("DELAYBRIDGE_TEST_E2E_NORACE") != "" {
		return bridgeBin
	}
	noRaceOnce.Do(func() {
		noRaceBin = filepath.Join(filepath.Dir(bridgeBin), "bridge-norace")
		out, err := exec.Command("go", "build", "-o", noRaceBin, "../cmd/bridge").CombinedOutput()
		if err != nil {
			noRaceErr = fmt.Errorf("building the bridge without -race: %w\n%s", err, out)
		}
	})
	if noRaceErr != nil {
		t.Fatal(noRaceErr)
	}
	return noRaceBin
}

// rssSampler reads a process's VmRSS every 100 ms and keeps the highest.
type rssSampler struct {
	pid    int
	stopCh chan struct{}
	done   chan struct{}
	peak   int64
}

func sampleRSS(t *testing.T, pid int) *rssSampler {
	t.Helper()
	s := &rssSampler{pid: pid, stopCh: make(chan struct{}), done: make(chan struct{})}
	if _, err := procStatus(pid, "VmRSS"); err != nil {
		t.Fatalf("reading the bridge's resident memory: %v", err)
	}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			if v, err := procStatus(pid, "VmRSS"); err == nil {
				s.peak = max(s.peak, v)
			}
			select {
			case <-s.stopCh:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { s.stop() })
	return s
}

// stop ends the sampling and returns the highest VmRSS sampled and the kernel's VmHWM.
func (s *rssSampler) stop() (peak, hwm int64) {
	select {
	case <-s.stopCh:
	default:
		close(s.stopCh)
	}
	<-s.done
	hwm, _ = procStatus(s.pid, "VmHWM")
	return s.peak, hwm
}

// procStatus reads a "kB" field of /proc/<pid>/status, in bytes.
func procStatus(pid int, field string) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}

// burstMsg is what the test knows of one produced message.
type burstMsg struct {
	crc  uint32
	size int
	due  int64
}

// produceBurst sends n messages of size bytes, all with x-deliver-at due, from
// several producers at once.
func produceBurst(t *testing.T, addr, topic string, n, size int, due time.Time) map[string]burstMsg {
	t.Helper()
	base := bytes.Repeat([]byte("0123456789abcdef"), size/16+1)[:size]
	want := make(map[string]burstMsg, n)
	msgs := make([]kafka.Message, n)
	for i := range n {
		id := fmt.Sprintf("burst-%d", i)
		v := slices.Clone(base)
		copy(v, id)
		want[id] = burstMsg{crc: crc32.ChecksumIEEE(v), size: size, due: due.UnixMilli()}
		msgs[i] = kafka.Message{Key: []byte(id), Value: v, Headers: []kafka.Header{
			{Key: "x-deliver-at", Value: []byte(strconv.FormatInt(due.UnixMilli(), 10))},
			{Key: "x-message-id", Value: []byte(id)},
		}}
	}
	const producers = 8
	errs := make(chan error, producers)
	for p := range producers {
		go func() {
			w := newWriter(t, addr, topic)
			defer w.Close()
			for lo := p * 50; lo < n; lo += producers * 50 {
				if err := w.WriteMessages(context.Background(), msgs[lo:min(lo+50, n)]...); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range producers {
		if err := <-errs; err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	return want
}

// sumCollector consumes a topic and keeps a checksum of each payload, not the
// payload: the test process holds the broker's copies already.
type sumCollector struct {
	mu  sync.Mutex
	got []sumArrival
	ids map[string]bool // the distinct ids in got
}

type sumArrival struct {
	id   string
	crc  uint32
	size int
	due  int64
	at   time.Time
}

func collectSums(t *testing.T, addr, topic string) *sumCollector {
	t.Helper()
	// franz-go's direct consumer (no group to join) reads every partition from its start
	// with fetches of up to 64 MiB: a slow collector would show as the bridge's lateness.
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(10*time.Millisecond),
		kgo.FetchMaxBytes(64<<20), kgo.FetchMaxPartitionBytes(16<<20))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &sumCollector{ids: map[string]bool{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(m *kgo.Record) {
				a := sumArrival{crc: crc32.ChecksumIEEE(m.Value), size: len(m.Value), at: now}
				for _, h := range m.Headers {
					switch h.Key {
					case "x-message-id":
						a.id = string(h.Value)
					case "x-delay-due-at":
						a.due, _ = strconv.ParseInt(string(h.Value), 10, 64)
					}
				}
				c.mu.Lock()
				c.got = append(c.got, a)
				c.ids[a.id] = true
				c.mu.Unlock()
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return c
}

// count is how many distinct messages arrived: a publish whose outcome stayed unknown
// is fired again (at least once), so a duplicate must not stand in for a message still
// on its way.
func (c *sumCollector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ids)
}

// check compares the arrivals with what was sent (each once, intact, none early) and
// returns their lateness (arrival minus due), sorted.
func (c *sumCollector) check(t *testing.T, want map[string]burstMsg, unknown int) []time.Duration {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	seen := map[string]int{}
	var late []time.Duration
	dups := 0
	for _, a := range c.got {
		w, ok := want[a.id]
		if !ok {
			t.Errorf("unexpected message %q arrived", a.id)
			continue
		}
		// Each publish whose outcome stayed unknown may have been written and is fired
		// again, so it may add one copy of its message; a message whose publishes timed
		// out twice may arrive three times. More copies in all than such publishes fail.
		if seen[a.id]++; seen[a.id] > 1 {
			if dups++; dups > unknown {
				t.Errorf("%s arrived %d times (%d publishes had an unknown outcome, %d duplicates in all so far)", a.id, seen[a.id], unknown, dups)
			}
		}
		switch {
		case a.crc != w.crc || a.size != w.size || a.due != w.due:
			t.Errorf("%s: %d B crc %x due %d, want %d B crc %x due %d", a.id, a.size, a.crc, a.due, w.size, w.crc, w.due)
		case a.at.UnixMilli() < w.due:
			t.Errorf("%s arrived %d ms early", a.id, w.due-a.at.UnixMilli())
		case seen[a.id] == 1:
			late = append(late, a.at.Sub(time.UnixMilli(w.due)))
		}
	}
	for id := range want {
		if seen[id] == 0 {
			t.Errorf("%s never arrived", id)
		}
	}
	slices.Sort(late)
	return late
}

// pct is the p-th percentile of sorted durations (100: the largest).
func pct(sorted []time.Duration, p int) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, len(sorted)*p/100)].Round(time.Millisecond)
}
