package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/internal/testkit"
)

// TestServeTargetBrokerDownRetriesNeverDeadLetters runs the service against real Redis
// and Kafka, stops the Kafka broker (connection refused) and schedules messages over
// HTTP: /readyz turns 503 naming the egress broker, the publishes fail as unreachable
// far beyond retry.max_attempts without a single dead letter, and once a broker
// listens again every message arrives.
func TestServeTargetBrokerDownRetriesNeverDeadLetters(t *testing.T) {
	rds := testkit.StartRedis(t)
	kaddr, c := testkit.StartKafka(t, 1, "bd.delay", "bd.out")
	port := strconv.Itoa(testkit.FreePort(t))
	base := "http://127.0.0.1:" + port
	cfg, err := config.Load(config.LoadOptions{Env: []string{}, Set: []string{
		"redis.addrs=" + rds.Addr(), "kafka.brokers=" + kaddr, "shards=4",
		"prefix=" + testkit.Uniq(t, "bd"), "admin.listen=127.0.0.1:" + port,
		"retry.max_attempts=2", "retry.backoff.initial=50ms", "retry.backoff.max=200ms",
		"routes.0.name=bd", "routes.0.from.kafka.topic=bd.delay", "routes.0.to.kafka.topic=bd.out",
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	served := make(chan error, 1)
	go func() { served <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	readyz := func() (int, string) {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	waitReady := func(want func(code int, body string) bool, what string) string {
		t.Helper()
		deadline := time.Now().Add(60 * time.Second)
		for {
			code, body := readyz()
			if want(code, body) {
				return body
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: /readyz still %d %s after 60s", what, code, body)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitReady(func(code int, _ string) bool { return code == http.StatusOK }, "start")

	c.Close()
	body := waitReady(func(code int, body string) bool {
		return code == http.StatusServiceUnavailable && strings.Contains(body, `{"name":"egress kafka","ok":false`)
	}, "broker stopped")
	t.Logf("/readyz with the broker stopped: %s", body)

	ctl := func(args ...string) (int, string, string) {
		return call(t, append([]string{"ctl", "--addr", base, "--timeout", "5s"}, args...)...)
	}
	const n = 5
	for i := range n {
		if code, out, errOut := ctl("schedule", "--route", "bd", "--delay", "100ms", "--id", "bd-"+strconv.Itoa(i), "--payload", "p"); code != exitOK {
			t.Fatalf("schedule: %d %s %s", code, out, errOut)
		}
	}
	unreachable := map[string]string{"route": "bd", "broker": "kafka", "reason": "unreachable"}
	deadline := time.Now().Add(60 * time.Second)
	for {
		m := series(scrape(t, base), "delaybridge_publish_failures_total", unreachable)
		if m != nil && m.GetCounter().GetValue() >= 4*n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("publish_failures_total{unreachable} = %v after 60s, want >= %d (twice max_attempts per message)", m.GetCounter().GetValue(), 4*n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	fams := scrape(t, base)
	if v := series(fams, "delaybridge_messages_dead_lettered_total", map[string]string{"route": "bd"}).GetCounter().GetValue(); v != 0 {
		t.Fatalf("%v messages dead-lettered while the broker was unreachable", v)
	}
	for i := range n {
		if code, out, _ := ctl("get", "bd-"+strconv.Itoa(i)); code != exitOK || strings.Contains(out, `"dead"`) {
			t.Errorf("bd-%d: %d %s", i, code, out)
		}
	}

	_, portText, _ := net.SplitHostPort(kaddr)
	kport, _ := strconv.Atoi(portText)
	c2, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(kport), kfake.SeedTopics(1, "bd.delay", "bd.out"))
	if err != nil {
		t.Fatalf("restart kfake: %v", err)
	}
	defer c2.Close()
	consumer, err := kgo.NewClient(kgo.SeedBrokers(kaddr), kgo.ConsumeTopics("bd.out"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	fctx, fcancel := context.WithTimeout(ctx, 60*time.Second)
	defer fcancel()
	got := map[string]bool{}
	for len(got) < n && fctx.Err() == nil {
		consumer.PollFetches(fctx).EachRecord(func(r *kgo.Record) {
			for _, h := range r.Headers {
				if h.Key == "x-message-id" {
					got[string(h.Value)] = true
				}
			}
		})
	}
	if len(got) != n {
		t.Fatalf("%d of %d messages arrived after the broker came back", len(got), n)
	}
	waitReady(func(code int, body string) bool {
		return code == http.StatusOK || strings.Contains(body, `{"name":"egress kafka","ok":true}`)
	}, "broker back")
	if v := series(scrape(t, base), "delaybridge_messages_dead_lettered_total", map[string]string{"route": "bd"}).GetCounter().GetValue(); v != 0 {
		t.Errorf("%v messages dead-lettered", v)
	}
	http.DefaultClient.CloseIdleConnections()
	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Errorf("serve = %v", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("serve did not return after cancel")
	}
}
