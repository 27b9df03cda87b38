package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/testkit"
)

var (
	skewBinOnce sync.Once
	skewBin     string
	skewBinErr  error
)

// skewableBinary builds the bridge with -tags e2eclock (once): its clock is the real
// one shifted by the duration in the file DELAYBRIDGE_TEST_CLOCK_FILE names
// (cmd/bridge/clock_e2e.go). Like the main binary, with -race unless
// DELAYBRIDGE_TEST_E2E_NORACE is set.
func skewableBinary(t *testing.T) string {
	t.Helper()
	skewBinOnce.Do(func() {
		skewBin = filepath.Join(filepath.Dir(bridgeBin), "bridge-e2eclock")
		args := []string{"build", "-tags", "e2eclock", "-o", skewBin}
		if os.Getenv("DELAYBRIDGE_TEST_E2E_NORACE") == "" {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, "../cmd/bridge")...).CombinedOutput()
		if err != nil {
			skewBinErr = err
			t.Logf("%s", out)
		}
	})
	if skewBinErr != nil {
		t.Fatalf("building the bridge with -tags e2eclock: %v", skewBinErr)
	}
	return skewBin
}

// TestClockAheadOfRedisFiresNothingEarly runs the built bridge with its clock stepped
// 5 s ahead of Redis's (same machine, so Redis's clock is the true one): /readyz fails
// the check "clock" and delaybridge_clock_offset_seconds says 5; twenty messages due
// 1–3 s later on Redis's clock are not delivered by the time the last is due (a bridge
// trusting its own clock delivered every one at once, up to 5 s early); with the clock
// right again /readyz and the gauge come back and every message arrives, none before
// its due time on Redis's clock.
func TestClockAheadOfRedisFiresNothingEarly(t *testing.T) {
	t.Parallel() // its own Redis, kfake and binary; it asserts no time: see the package doc
	bin := skewableBinary(t)
	rds := testkit.StartRedis(t)
	kaddr, _ := testkit.StartKafka(t, 1, "skew.delay", "skew.out")
	cfgPath, admin := writeConfig(t, rds.Addr(), kaddr, `  - name: skew
    from: { kafka: { topic: skew.delay } }
    to:   { kafka: { topic: skew.out } }`, "")
	clockFile := filepath.Join(t.TempDir(), "clock-offset")
	setOffset := func(d string) {
		if err := os.WriteFile(clockFile, []byte(d), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	setOffset("0s")
	p := startBridgeArgv(t, cfgPath, admin, []string{"/usr/bin/env", "DELAYBRIDGE_TEST_CLOCK_FILE=" + clockFile, bin, "run", "-c", cfgPath})
	arrivals := recordsOf(t, kaddr, "skew.out")
	rdb := rds.Client()
	redisNow := func() time.Time {
		tm, err := rdb.Time(context.Background()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}

	setOffset("5s")
	waitUntil(t, "/readyz failing the clock check with the clock 5 s ahead", 30*time.Second, func() bool {
		code, body := p.readyz()
		ok, found, detail := readyCheck(body, "clock")
		return code == 503 && found && !ok && strings.Contains(detail, "max_clock_offset")
	})
	if v := p.metric("clock_offset_seconds"); v < 4.5 || v > 5.5 {
		t.Fatalf("delaybridge_clock_offset_seconds = %v with the clock 5 s ahead", v)
	}
	w := newWriter(t, kaddr, "skew.delay")
	defer w.Close()
	start := redisNow().Add(time.Second)
	sent := produceDue(t, w, "skew", 20, start, 2*time.Second)
	last := start.Add(2 * time.Second)
	for redisNow().Before(last.Add(500 * time.Millisecond)) {
		time.Sleep(100 * time.Millisecond)
	}
	if n := arrivals.unique(); n != 0 {
		t.Fatalf("%d of 20 messages delivered while the bridge's clock ran 5 s ahead of Redis's", n)
	}

	setOffset("0s")
	waitUntil(t, "/readyz passing with the clock right", 30*time.Second, func() bool { code, _ := p.readyz(); return code == 200 })
	if v := p.metric("clock_offset_seconds"); v < -0.5 || v > 0.5 {
		t.Errorf("delaybridge_clock_offset_seconds = %v with the clock right", v)
	}
	waitUntil(t, "all 20 delivered", 30*time.Second, func() bool { return arrivals.unique() == 20 })
	for _, a := range arrivals.snapshot() {
		due, err := strconv.ParseInt(a.headers["x-delay-due-at"], 10, 64)
		if err != nil || sent[a.headers["x-message-id"]].id == "" {
			t.Fatalf("arrival %v: bad x-delay-due-at or unknown id", a.headers)
		}
		// a.at is the test's clock, Redis's here (same machine): received after due.
		if a.at.UnixMilli() < due {
			t.Errorf("%s delivered %d ms before its due time", a.headers["x-message-id"], due-a.at.UnixMilli())
		}
	}
	if !strings.Contains(p.logs(), "clock disagrees with Redis's") || !strings.Contains(p.logs(), "claiming resumes") {
		t.Errorf("no log line on entering and leaving the clock state:\n%s", p.logs())
	}
}
