package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/testkit"
)

// Message ids, duplicates, cancel scope and states, through the built binary.

const twoKafkaRoutes = `  - name: a
    from: { kafka: { topic: a.delay } }
    to:   { kafka: { topic: a.out } }
  - name: b
    from: { kafka: { topic: b.delay } }
    to:   { kafka: { topic: b.out } }`

type twoRouteEnv struct {
	kaddr        string
	bridge       *bridgeProc
	outA, outB   *collector
	delayA, dlyB *kafka.Writer
}

func startTwoRouteEnv(t *testing.T) *twoRouteEnv {
	t.Helper()
	r := testkit.StartRedis(t)
	kaddr, _ := testkit.StartKafka(t, 1, "a.delay", "a.out", "b.delay", "b.out")
	cfg, admin := writeConfig(t, r.Addr(), kaddr, twoKafkaRoutes, "")
	e := &twoRouteEnv{kaddr: kaddr, outA: collect(t, kaddr, "a.out"), outB: collect(t, kaddr, "b.out")}
	e.bridge = startBridge(t, cfg, admin)
	e.delayA, e.dlyB = newWriter(t, kaddr, "a.delay"), newWriter(t, kaddr, "b.delay")
	t.Cleanup(func() { e.delayA.Close(); e.dlyB.Close() })
	return e
}

func kmsg(value string, headers ...string) kafka.Message {
	m := kafka.Message{Value: []byte(value), Time: time.Now()}
	for i := 0; i+1 < len(headers); i += 2 {
		m.Headers = append(m.Headers, kafka.Header{Key: headers[i], Value: []byte(headers[i+1])})
	}
	return m
}

func write(t *testing.T, w *kafka.Writer, msgs ...kafka.Message) {
	t.Helper()
	if err := w.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatalf("produce to %s: %v", w.Topic, err)
	}
}

// metric returns the value of the series of name whose labels include every one of
// labels ("route=\"a\"", ...), or -1 if there is none.
func (p *bridgeProc) metric(name string, labels ...string) float64 {
	p.t.Helper()
	if v := p.series(name, labels...); len(v) > 0 {
		return v[0]
	}
	return -1
}

// seriesCount is how many series of name with labels including every one of labels
// have a value above 0.
func (p *bridgeProc) seriesCount(name string, labels ...string) int {
	p.t.Helper()
	n := 0
	for _, v := range p.series(name, labels...) {
		if v > 0 {
			n++
		}
	}
	return n
}

// series returns the values of the series of name whose labels include every one of
// labels, in the order /metrics lists them.
func (p *bridgeProc) series(name string, labels ...string) []float64 {
	p.t.Helper()
	resp, err := http.Get("http://" + p.admin + "/metrics")
	if err != nil {
		p.t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	var out []float64
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "delaybridge_"+name+"{") && !strings.HasPrefix(line, "delaybridge_"+name+" ") {
			continue
		}
		ok := true
		for _, l := range labels {
			ok = ok && strings.Contains(line, l)
		}
		if !ok {
			continue
		}
		if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
			out = append(out, v)
		}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	return out
}

func (p *bridgeProc) state(id string) (int, string) {
	p.t.Helper()
	var m struct {
		State string `json:"state"`
		Route string `json:"route"`
	}
	code := p.api("GET", "/v1/messages/"+id, nil, &m)
	return code, m.State
}

// TestCancelScopeAndUnknownIDCancel: an x-delay-cancel record on route b leaves route a's
// message alone (it is delivered); route a's early cancel leaves a tombstone that
// suppresses route a's message with that id (counted as a duplicate, reason cancelled)
// but not route b's; DELETE of an unknown id is 404 and does not stop a later message
// with that id. States read delivered and cancelled.
func TestCancelScopeAndUnknownIDCancel(t *testing.T) {
	e := startTwoRouteEnv(t)
	write(t, e.delayA, kmsg("a's", "x-message-id", "sc-1", "x-delay", "2000"))
	waitUntil(t, "sc-1 pending", 20*time.Second, func() bool { _, st := e.bridge.state("sc-1"); return st == "pending" })
	write(t, e.dlyB, kmsg("", "x-delay-cancel", "sc-1"))
	write(t, e.delayA, kmsg("", "x-delay-cancel", "early"))
	waitUntil(t, "the tombstone of early", 20*time.Second, func() bool { _, st := e.bridge.state("early"); return st == "cancelled" })
	write(t, e.delayA, kmsg("a's early", "x-message-id", "early", "x-delay", "500"))
	write(t, e.dlyB, kmsg("b's early", "x-message-id", "early", "x-delay", "3000"))

	if code := e.bridge.api("DELETE", "/v1/messages/ghost", nil, nil); code != 404 {
		t.Fatalf("DELETE of an unknown id: %d, want 404", code)
	}
	var res struct {
		ID        string `json:"id"`
		Duplicate bool   `json:"duplicate"`
	}
	if code := e.bridge.api("POST", "/v1/messages", map[string]any{"id": "ghost", "route": "a", "delay_ms": 300, "payload": "g"}, &res); code != 201 || res.Duplicate {
		t.Fatalf("POST ghost after its cancel: %d %+v, want 201 new", code, res)
	}

	waitUntil(t, "sc-1 and ghost on a.out, early on b.out", 30*time.Second, func() bool {
		return e.outA.uniqueCount() >= 2 && e.outB.uniqueCount() >= 1
	})
	waitUntil(t, "a's early refused", 20*time.Second, func() bool {
		return e.bridge.metric("messages_duplicate_total", `route="a"`, `reason="cancelled"`) == 1
	})
	time.Sleep(time.Second) // a's early was due 500 ms after its park: every chance to (wrongly) arrive
	for _, a := range e.outA.snapshot() {
		if id := a.headers["x-message-id"]; id != "sc-1" && id != "ghost" {
			t.Errorf("%s (%q) arrived on a.out; only sc-1 and ghost should", id, a.value)
		}
	}
	for _, a := range e.outB.snapshot() {
		if id := a.headers["x-message-id"]; id != "early" || a.value != "b's early" {
			t.Errorf("%s (%q) arrived on b.out; only b's early should", id, a.value)
		}
	}
	waitUntil(t, "sc-1 delivered", 10*time.Second, func() bool { _, st := e.bridge.state("sc-1"); return st == "delivered" })
	if code := e.bridge.api("DELETE", "/v1/messages/sc-1", nil, nil); code != 409 {
		t.Errorf("DELETE of a delivered message: %d, want 409", code)
	}
	if v := e.bridge.metric("messages_cancelled_total", `route="a"`); v > 0 {
		t.Errorf("messages_cancelled_total{route=a} = %v, want 0 (nothing of route a was cancelled; the tombstone counts as the duplicate)", v)
	}
	if !strings.Contains(e.bridge.logs(), "another route") {
		t.Errorf("the cross-route cancel was not logged")
	}
}

// TestHTTPScheduleRepliesDueNow: POST /v1/messages of new ids due now answers 201 for
// every one although the pumps claim them at once; a known id answers 200 duplicate.
func TestHTTPScheduleRepliesDueNow(t *testing.T) {
	e := startTwoRouteEnv(t)
	const n = 50
	for i := range n {
		var res struct {
			Duplicate bool `json:"duplicate"`
		}
		id := fmt.Sprintf("now-%d", i)
		if code := e.bridge.api("POST", "/v1/messages", map[string]any{"id": id, "route": "a", "delay_ms": 0, "payload": "p"}, &res); code != 201 || res.Duplicate {
			t.Fatalf("POST %s (new, due now): %d duplicate=%v, want 201", id, code, res.Duplicate)
		}
	}
	waitUntil(t, "all delivered", 30*time.Second, func() bool { return e.outA.uniqueCount() == n })
	// A message reaches the consumer before its acknowledgement reaches Redis (acks are
	// written in batches): until then a repost is a duplicate of one in flight.
	waitUntil(t, "now-7 acknowledged", 10*time.Second, func() bool { _, st := e.bridge.state("now-7"); return st == "delivered" })
	var res struct {
		Duplicate bool `json:"duplicate"`
	}
	if code := e.bridge.api("POST", "/v1/messages", map[string]any{"id": "now-7", "route": "a", "delay_ms": 0}, &res); code != 200 || !res.Duplicate {
		t.Errorf("POST of a delivered id: %d duplicate=%v, want 200 duplicate", code, res.Duplicate)
	}
	if v := e.bridge.metric("messages_duplicate_total", `route="a"`, `reason="delivered"`); v != 1 {
		t.Errorf("messages_duplicate_total{route=a,reason=delivered} = %v, want 1", v)
	}
}

// TestKafkaTopicRecreatedNewRecordParked: a record without x-message-id is parked for an
// hour; with the bridge stopped the topic is deleted and recreated and a different
// record lands at the same offset; the restarted bridge parks it too (2 pending, no
// duplicate counted).
func TestKafkaTopicRecreatedNewRecordParked(t *testing.T) {
	e := startTwoRouteEnv(t)
	write(t, e.delayA, kmsg("first", "x-delay", "3600000"))
	waitUntil(t, "the first record parked", 20*time.Second, func() bool { return e.bridge.metric("messages_parked_total", `route="a"`) == 1 })
	e.bridge.stop()

	c := &kafka.Client{Addr: kafka.TCP(e.kaddr)}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if res, err := c.DeleteTopics(ctx, &kafka.DeleteTopicsRequest{Topics: []string{"a.delay"}}); err != nil || res.Errors["a.delay"] != nil {
		t.Fatalf("delete topic: %v %v", err, res)
	}
	waitUntil(t, "the topic recreated", 20*time.Second, func() bool {
		res, err := c.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: "a.delay", NumPartitions: 1, ReplicationFactor: 1}}})
		return err == nil && res.Errors["a.delay"] == nil
	})
	w := newWriter(t, e.kaddr, "a.delay")
	defer w.Close()
	write(t, w, kmsg("second", "x-delay", "3600000"))
	end, err := kafka.DialLeader(ctx, "tcp", e.kaddr, "a.delay", 0)
	if err != nil {
		t.Fatal(err)
	}
	last, err := end.ReadLastOffset()
	end.Close()
	if err != nil || last != 1 {
		t.Fatalf("recreated topic's end offset %d (%v), want 1: the new record must sit at offset 0", last, err)
	}

	e.bridge.start()
	waitUntil(t, "the second record handled", 30*time.Second, func() bool {
		return max(0, e.bridge.metric("messages_parked_total", `route="a"`))+max(0, e.bridge.metric("messages_duplicate_total", `route="a"`, `reason="pending"`)) == 1
	})
	if v := e.bridge.metric("messages_duplicate_total", `route="a"`, `reason="pending"`); v > 0 {
		t.Errorf("the new record was refused as a duplicate of the parked one")
	}
	var stats struct {
		Totals struct {
			Pending int64 `json:"pending"`
		} `json:"totals"`
	}
	if code := e.bridge.api("GET", "/v1/stats", nil, &stats); code != 200 || stats.Totals.Pending != 2 {
		t.Errorf("GET /v1/stats: %d, pending %d, want 2", code, stats.Totals.Pending)
	}
}
