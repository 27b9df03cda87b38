package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/internal/testutil"
)

// TestServeEndToEnd runs the service wiring (config -> bridge -> admin server) against a
// real redis-server and an in-process Kafka broker, drives it with `bridge ctl`, and
// checks the message arrives on the target topic and the metrics are exposed.
func TestServeEndToEnd(t *testing.T) {
	rds := testutil.StartRedis(t)
	kaddr, _ := testutil.StartKafka(t, 1, "orders.delay", "orders")
	port := strconv.Itoa(testutil.FreePort(t))
	base := "http://127.0.0.1:" + port
	cfg, err := config.Load(config.LoadOptions{Env: []string{}, Set: []string{
		"redis.addrs=" + rds.Addr(), "kafka.brokers=" + kaddr, "shards=4",
		"prefix=" + testutil.Uniq(t, "e2e"), "admin.listen=127.0.0.1:" + port, "admin.token=tok",
		"routes.0.name=orders", "routes.0.from.kafka.topic=orders.delay", "routes.0.to.kafka.topic=orders",
	}})
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, logger) }()

	ctl := func(args ...string) (int, string, string) {
		return call(t, append([]string{"ctl", "--addr", base, "--token", "tok", "--timeout", "5s"}, args...)...)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, _, errOut := ctl("ready")
		if code == exitOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("bridge not ready after 30s: %s", errOut)
		}
		select {
		case err := <-served:
			t.Fatalf("serve returned early: %v", err)
		case <-time.After(100 * time.Millisecond):
		}
	}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(kaddr), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()

	code, out, errOut := ctl("schedule", "--route", "orders", "--delay", "300ms", "--id", "e2e-1",
		"--payload", "hello", "--key", "k", "--header", "traceparent=00-abc")
	if code != exitOK {
		t.Fatalf("schedule: %d %s %s", code, out, errOut)
	}
	var sched struct {
		ID    string `json:"id"`
		DueAt int64  `json:"due_at"`
	}
	if err := json.Unmarshal([]byte(out), &sched); err != nil || sched.ID != "e2e-1" {
		t.Fatalf("schedule output %q: %v", out, err)
	}

	fctx, fcancel := context.WithTimeout(ctx, 20*time.Second)
	defer fcancel()
	var rec *kgo.Record
	for rec == nil {
		fetches := consumer.PollFetches(fctx)
		if fctx.Err() != nil {
			t.Fatal("the scheduled message never arrived on the target topic")
		}
		fetches.EachRecord(func(r *kgo.Record) { rec = r })
	}
	headers := map[string]string{}
	for _, h := range rec.Headers {
		headers[h.Key] = string(h.Value)
	}
	if string(rec.Value) != "hello" || string(rec.Key) != "k" || headers["x-message-id"] != "e2e-1" || headers["traceparent"] != "00-abc" {
		t.Errorf("received %q key %q headers %v", rec.Value, rec.Key, headers)
	}
	if arrived := time.Now().UnixMilli(); arrived < sched.DueAt {
		t.Errorf("arrived %d ms before its due time", sched.DueAt-arrived)
	}

	if code, out, _ := ctl("stats", "--json"); code != exitOK || !strings.Contains(out, `"shards"`) {
		t.Errorf("stats: %d %s", code, out)
	}
	if code, _, errOut := ctl("get", "no-such-id"); code != exitError || !strings.Contains(errOut, "404") {
		t.Errorf("get unknown: %d %s", code, errOut)
	}

	// /metrics is open (no token) and carries the bridge's metrics.
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`delaybridge_messages_fired_total{route="orders"} 1`, "delaybridge_messages_pending ",
		"delaybridge_build_info{", "delaybridge_fire_lateness_seconds_bucket", "go_goroutines"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	http.DefaultClient.CloseIdleConnections()

	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("serve = %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return after cancel")
	}
}

// An admin listener that cannot bind stops the bridge with an error.
func TestServeAdminListenFails(t *testing.T) {
	rds := testutil.StartRedis(t)
	kaddr, _ := testutil.StartKafka(t, 1, "a.delay", "a")
	cfg, err := config.Load(config.LoadOptions{Env: []string{}, Set: []string{
		"redis.addrs=" + rds.Addr(), "kafka.brokers=" + kaddr, "shards=2", "prefix=" + testutil.Uniq(t, "lf"),
		"admin.listen=203.0.113.1:1", // TEST-NET-3: never a local address, so bind fails
		"routes.0.name=a", "routes.0.from.kafka.topic=a.delay", "routes.0.to.kafka.topic=a",
	}})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- serve(context.Background(), cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "admin API") {
			t.Errorf("serve = %v, want an admin API error", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve kept running without its admin listener")
	}
}
