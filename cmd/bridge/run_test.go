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

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/testkit"
)

// served is a bridge running serve in process against real servers.
type served struct {
	base string          // http://127.0.0.1:port of its admin API
	ctx  context.Context // ends at cleanup, which then checks serve returned nil
}

// startServe loads a configuration from the --set values (plus admin.listen on a free
// port), runs serve in the background until the test ends, and waits until the admin
// server answers. At cleanup serve must return nil within 30 s.
func startServe(t *testing.T, set ...string) *served {
	t.Helper()
	port := strconv.Itoa(testkit.FreePort(t))
	cfg, err := config.Load(config.LoadOptions{Env: []string{}, Set: append(set, "admin.listen=127.0.0.1:"+port)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{base: "http://127.0.0.1:" + port, ctx: ctx}
	done := make(chan error, 1)
	go func() { done <- serve(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil))) }()
	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("serve = %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("serve did not return after cancel")
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.base + "/healthz")
		if err == nil {
			resp.Body.Close()
			return s
		}
		select {
		case err := <-done:
			t.Fatalf("serve returned early: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("admin server not up after 30s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestServeEndToEnd runs the service wiring (config -> bridge -> admin server) against a
// real redis-server and an in-process Kafka broker, drives it with `bridge ctl`, and
// checks the message arrives on the target topic and the metrics are exposed.
func TestServeEndToEnd(t *testing.T) {
	rds := testkit.StartRedis(t)
	kaddr, _ := testkit.StartKafka(t, 1, "orders.delay", "orders")
	srv := startServe(t, "redis.addrs="+rds.Addr(), "kafka.brokers="+kaddr, "shards=4",
		"prefix="+testkit.Uniq(t, "e2e"), "admin.token=tok",
		"routes.0.name=orders", "routes.0.from.kafka.topic=orders.delay", "routes.0.to.kafka.topic=orders")
	base, ctx := srv.base, srv.ctx
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
		time.Sleep(100 * time.Millisecond)
	}

	consumer, err := kgo.NewClient(kgo.SeedBrokers(kaddr), kgo.ConsumeTopics("orders"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()

	code, out, errOut := ctl("schedule", "--route", "orders", "--delay", "300ms", "--id", "e2e-1",
		"--payload", "hello", "--key", "k", "--header", "traceparent=00-abc", "-o", "json")
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

	// The default output is a table: the delivered message, the route, the shards.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for end := time.Now().Add(20 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(end) {
				t.Fatalf("%s: not after 20s", what)
			}
		}
	}
	waitFor("get e2e-1 shows delivered", func() bool {
		code, out, _ := ctl("get", "e2e-1")
		return code == exitOK && strings.Contains(out, "STATE:") && strings.Contains(out, "delivered")
	})
	if code, out, _ := ctl("routes"); code != exitOK || !strings.Contains(out, "orders") || !strings.Contains(out, "kafka:orders") {
		t.Errorf("routes table: %d\n%s", code, out)
	}
	if code, out, _ := ctl("stats"); code != exitOK || !strings.Contains(out, "SHARD") || !strings.Contains(out, "TOTAL") {
		t.Errorf("stats table: %d\n%s", code, out)
	}
	// ls and jobs against the real store: a message an hour out is listed, a dry run
	// counts it, a cancel job (--yes, --wait) cancels it.
	if code, out, errOut := ctl("schedule", "--route", "orders", "--delay", "1h", "--id", "later-1", "--payload", "x"); code != exitOK {
		t.Fatalf("schedule later-1: %d %s %s", code, out, errOut)
	}
	if code, out, errOut := ctl("ls", "--route", "orders", "--id-prefix", "later-"); code != exitOK ||
		!strings.Contains(out, "later-1") || !strings.Contains(out, "(in ") || !strings.Contains(out, "1 message(s)") {
		t.Errorf("ls: %d %s\n%s", code, errOut, out)
	}
	if code, out, errOut := ctl("jobs", "start", "cancel", "--id-prefix", "later-", "--dry-run"); code != exitOK ||
		!strings.Contains(out, "would touch 1 message(s)") {
		t.Errorf("jobs dry run: %d %s\n%s", code, errOut, out)
	}
	if code, out, errOut := ctl("jobs", "start", "cancel", "--id-prefix", "later-", "--yes", "--wait"); code != exitOK ||
		!strings.Contains(out, "STATE:") || !strings.Contains(out, "done") || !strings.Contains(out, "1 done, 0 failed of 1 matched") {
		t.Errorf("jobs cancel --wait: %d %s\n%s", code, errOut, out)
	}
	if code, out, _ := ctl("get", "later-1", "-o", "json"); code != exitOK || !strings.Contains(out, `"state": "cancelled"`) {
		t.Errorf("later-1 after the job: %d %s", code, out)
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
	for _, want := range []string{`delaybridge_messages_fired_total{route="orders"} 1`, `delaybridge_messages_pending{route="orders"} 0`,
		"delaybridge_build_info{", "delaybridge_fire_lateness_seconds_bucket", "go_goroutines"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// An admin listener that cannot bind stops the bridge with an error.
func TestServeAdminListenFails(t *testing.T) {
	rds := testkit.StartRedis(t)
	kaddr, _ := testkit.StartKafka(t, 1, "a.delay", "a")
	cfg, err := config.Load(config.LoadOptions{Env: []string{}, Set: []string{
		"redis.addrs=" + rds.Addr(), "kafka.brokers=" + kaddr, "shards=2", "prefix=" + testkit.Uniq(t, "lf"),
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

// scrape reads /metrics of base into metric families by name.
func scrape(t *testing.T, base string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// series finds the sample of family name whose labels are exactly want.
func series(fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	f := fams[name]
	if f == nil {
		return nil
	}
next:
	for _, m := range f.GetMetric() {
		if len(m.GetLabel()) != len(want) {
			continue
		}
		for _, l := range m.GetLabel() {
			if want[l.GetName()] != l.GetValue() {
				continue next
			}
		}
		return m
	}
	return nil
}

// lateAtLeast counts the observations of a histogram above bound seconds (bound must be
// a bucket boundary).
func lateAtLeast(t *testing.T, m *dto.Metric, bound float64) uint64 {
	t.Helper()
	h := m.GetHistogram()
	for _, b := range h.GetBucket() {
		if b.GetUpperBound() == bound {
			return h.GetSampleCount() - b.GetCumulativeCount()
		}
	}
	t.Fatalf("no bucket with upper bound %v", bound)
	return 0
}

// TestServeMetricsFromStartAndDeliveryLateness checks, through the service wiring with
// real Redis and Kafka, that (1) a fresh scrape lists every labelled series of the
// configured route at 0 before any message was seen, and (2) delivery_lateness_seconds
// shows the wait a route's max_rate imposes after the wheel fired, which
// fire_lateness_seconds does not: 60 messages due at the same moment on a route limited
// to 20 msgs/s are published over about three seconds.
func TestServeMetricsFromStartAndDeliveryLateness(t *testing.T) {
	rds := testkit.StartRedis(t)
	kaddr, _ := testkit.StartKafka(t, 1, "slow.delay", "slow")
	srv := startServe(t, "redis.addrs="+rds.Addr(), "kafka.brokers="+kaddr, "shards=4",
		"prefix="+testkit.Uniq(t, "lat"),
		"routes.0.name=slow", "routes.0.from.kafka.topic=slow.delay", "routes.0.to.kafka.topic=slow",
		"routes.0.max_rate=20")
	base, ctx := srv.base, srv.ctx

	fresh := scrape(t, base)
	route := map[string]string{"route": "slow"}
	withReason := func(reason string) map[string]string { return map[string]string{"route": "slow", "reason": reason} }
	want := map[string][]map[string]string{
		"delaybridge_messages_received_total":      {route},
		"delaybridge_messages_parked_total":        {route},
		"delaybridge_messages_fired_total":         {route},
		"delaybridge_messages_dead_lettered_total": {route},
		"delaybridge_messages_cancelled_total":     {route},
		"delaybridge_messages_rescheduled_total":   {route},
		"delaybridge_publish_retries_total":        {route},
		"delaybridge_messages_published_total":     {{"route": "slow", "broker": "kafka"}},
	}
	for _, r := range ingress.InvalidReasons {
		want["delaybridge_messages_invalid_total"] = append(want["delaybridge_messages_invalid_total"], withReason(r))
	}
	for _, r := range observe.DuplicateReasons {
		want["delaybridge_messages_duplicate_total"] = append(want["delaybridge_messages_duplicate_total"], withReason(r))
	}
	for _, r := range observe.FailReasons {
		want["delaybridge_messages_dropped_total"] = append(want["delaybridge_messages_dropped_total"], withReason(r))
		want["delaybridge_publish_failures_total"] = append(want["delaybridge_publish_failures_total"],
			map[string]string{"route": "slow", "broker": "kafka", "reason": r})
	}
	for name, labelSets := range want {
		for _, ls := range labelSets {
			m := series(fresh, name, ls)
			if m == nil {
				t.Errorf("fresh scrape lacks %s%v", name, ls)
			} else if v := m.GetCounter().GetValue(); v != 0 {
				t.Errorf("fresh scrape: %s%v = %v, want 0", name, ls, v)
			}
		}
	}
	for _, name := range []string{"delaybridge_delivery_lateness_seconds", "delaybridge_fire_lateness_seconds"} {
		if m := series(fresh, name, route); m == nil || m.GetHistogram().GetSampleCount() != 0 {
			t.Errorf("fresh scrape: %s{route=slow} = %v, want present and empty", name, m)
		}
	}

	// 60 messages due together, 1.5 s from now.
	prod, err := kgo.NewClient(kgo.SeedBrokers(kaddr))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	consumer, err := kgo.NewClient(kgo.SeedBrokers(kaddr), kgo.ConsumeTopics("slow"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	const n = 60
	deliverAt := strconv.FormatInt(time.Now().Add(1500*time.Millisecond).UnixMilli(), 10)
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: "slow.delay", Value: []byte(strconv.Itoa(i)),
			Headers: []kgo.RecordHeader{{Key: "x-deliver-at", Value: []byte(deliverAt)}, {Key: "x-message-id", Value: []byte("lat-" + strconv.Itoa(i))}}})
	}
	if err := prod.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	fctx, fcancel := context.WithTimeout(ctx, 60*time.Second)
	defer fcancel()
	got := 0
	for got < n {
		fetches := consumer.PollFetches(fctx)
		if fctx.Err() != nil {
			t.Fatalf("%d of %d messages arrived", got, n)
		}
		fetches.EachRecord(func(*kgo.Record) { got++ })
	}

	// The limiter lets 20/s through (burst 2): the last ~10 messages cannot have been
	// confirmed less than 2.5 s after their due time, however fast the machine.
	var fams map[string]*dto.MetricFamily
	for end := time.Now().Add(10 * time.Second); ; {
		fams = scrape(t, base)
		if m := series(fams, "delaybridge_delivery_lateness_seconds", route); m != nil && m.GetHistogram().GetSampleCount() == n {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("delivery_lateness_seconds did not reach %d observations", n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	delivery := series(fams, "delaybridge_delivery_lateness_seconds", route)
	fire := series(fams, "delaybridge_fire_lateness_seconds", route)
	lateDelivered, lateFired := lateAtLeast(t, delivery, 2.5), lateAtLeast(t, fire, 2.5)
	t.Logf("messages more than 2.5 s late: %d by delivery_lateness, %d by fire_lateness; sums %.1f s vs %.1f s",
		lateDelivered, lateFired, delivery.GetHistogram().GetSampleSum(), fire.GetHistogram().GetSampleSum())
	if lateDelivered < 5 {
		t.Errorf("delivery_lateness_seconds shows %d messages more than 2.5 s late; max_rate holds back at least 5", lateDelivered)
	}
	if lateFired >= lateDelivered {
		t.Errorf("fire_lateness_seconds shows %d messages more than 2.5 s late, delivery %d: the max_rate wait is not told apart", lateFired, lateDelivered)
	}
	if fire.GetHistogram().GetSampleCount() != n {
		t.Errorf("fire_lateness_seconds has %d observations, want %d", fire.GetHistogram().GetSampleCount(), n)
	}
}
