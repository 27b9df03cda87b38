package e2e

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/testkit"
)

// TestKcatInterop: a message produced by kcat (librdkafka, a third-party client) with an
// x-delay header arrives, through the built bridge, at the target topic as kcat reads
// it: key and payload unchanged, x-delay negated, the bridge's headers added, and not
// before its due time.
func TestKcatInterop(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat not found on PATH (Debian package kcat; .ci/run installs it): %v", err)
	}
	r := testkit.StartRedis(t)
	addr, _ := testkit.StartKafka(t, 1, "kc.delay", "kc.out")
	cfg, admin := writeConfig(t, r.Addr(), addr,
		`  - { name: kc, from: { kafka: { topic: kc.delay } }, to: { kafka: { topic: kc.out } } }`, "")
	startBridge(t, cfg, admin)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	start := time.Now()
	produce := exec.CommandContext(ctx, kcat, "-P", "-b", addr, "-t", "kc.delay", "-K", ":",
		"-H", "x-delay=1500", "-H", "x-message-id=kcat-1", "-H", "traceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")
	produce.Stdin = strings.NewReader("key-1:hello from kcat\n")
	if out, err := produce.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
	consume := exec.CommandContext(ctx, kcat, "-C", "-b", addr, "-t", "kc.out", "-c", "1", "-f", "%k|%s|%h\n")
	out, err := consume.Output()
	arrived := time.Now()
	if err != nil {
		t.Fatalf("kcat -C: %v\n%s", err, out)
	}
	key, rest, _ := strings.Cut(strings.TrimRight(string(out), "\n"), "|")
	payload, hdrText, _ := strings.Cut(rest, "|")
	if key != "key-1" || payload != "hello from kcat" {
		t.Errorf("key %q payload %q, want key-1 / hello from kcat (raw %q)", key, payload, out)
	}
	headers := map[string]string{}
	for _, kv := range strings.Split(hdrText, ",") {
		k, v, _ := strings.Cut(kv, "=")
		headers[k] = v
	}
	for k, want := range map[string]string{
		"x-delay": "-1500", "x-message-id": "kcat-1", "x-delay-source": "kc.delay", "x-delay-attempt": "1",
		"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
	} {
		if headers[k] != want {
			t.Errorf("header %s = %q, want %q (all: %q)", k, headers[k], want, hdrText)
		}
	}
	due, err := strconv.ParseInt(headers["x-delay-due-at"], 10, 64)
	if err != nil {
		t.Fatalf("x-delay-due-at %q: %v", headers["x-delay-due-at"], err)
	}
	if due < start.Add(1500*time.Millisecond).UnixMilli() {
		t.Errorf("due at %d, before the produce start + 1.5 s (%d)", due, start.Add(1500*time.Millisecond).UnixMilli())
	}
	if arrived.Before(start.Add(1500 * time.Millisecond)) {
		t.Errorf("read %s after the produce started: earlier than its 1.5 s delay", arrived.Sub(start))
	}
}
