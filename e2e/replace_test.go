package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/testkit"
)

// Replace by id (x-delay-replace) through the built binary: a replace storm (the same
// id replaced 100 times within 1 s: exactly one delivery, of the last version, none
// early) on Kafka and on RabbitMQ, and the debounce recipe's kcat lines.

const (
	stormN     = 100
	stormBurst = 10
	stormDelay = 2500 * time.Millisecond // longer than the lookahead (1 s): no replace meets it in flight
)

// lookup is GET /v1/messages/{id}, the fields the storm checks.
type lookup struct {
	State   string            `json:"state"`
	DueAt   int64             `json:"due_at"`
	Headers map[string]string `json:"headers"`
}

// TestReplaceStormKafka: 100 records with one id and x-delay-replace within 1 s (ten
// bursts of ten, 90 ms apart), each with its own version; lookup shows the last version; the target topic gets one
// message, the last version, not before the last record's time + x-delay; /metrics
// counts 1 parked and 99 replaced; the receipts topic has 99 "replaced" receipts and
// one "delivered".
func TestReplaceStormKafka(t *testing.T) {
	r := testkit.StartRedis(t)
	kaddr, _ := testkit.StartKafka(t, 1, "rp.delay", "rp.out", "rp.receipts")
	route := `  - name: rp
    from: { kafka: { topic: rp.delay } }
    to:   { kafka: { topic: rp.out } }
    receipts: { kafka: { topic: rp.receipts } }`
	cfg, admin := writeConfig(t, r.Addr(), kaddr, route, "")
	out := collect(t, kaddr, "rp.out")
	receipts := collect(t, kaddr, "rp.receipts")
	bridge := startBridge(t, cfg, admin)
	w := newWriter(t, kaddr, "rp.delay")
	t.Cleanup(func() { w.Close() })

	// Ten bursts of ten records, 90 ms apart: the storm spans most of a second whatever
	// a produce round trip costs on a busy machine; each record has its own timestamp.
	start := time.Now()
	var last time.Time
	for burst := range stormN / stormBurst {
		msgs := make([]kafka.Message, stormBurst)
		for j := range msgs {
			i := burst*stormBurst + j
			last = time.Now().Truncate(time.Millisecond) // a record's timestamp is whole ms: its due time counts from there
			msgs[j] = kafka.Message{Key: []byte("cart-1"), Value: []byte(fmt.Sprintf("v%d", i)), Time: last, Headers: []kafka.Header{
				{Key: "x-delay", Value: []byte(strconv.FormatInt(stormDelay.Milliseconds(), 10))},
				{Key: "x-message-id", Value: []byte("cart-1")}, {Key: "x-delay-replace", Value: []byte("true")},
				{Key: "version", Value: []byte(strconv.Itoa(i))}}}
		}
		write(t, w, msgs...)
		time.Sleep(time.Until(start.Add(time.Duration(burst+1) * 90 * time.Millisecond)))
	}
	if storm := last.Sub(start); storm > time.Second {
		t.Fatalf("the storm took %s, more than 1 s", storm)
	}
	wantDue := last.UnixMilli() + stormDelay.Milliseconds() // record timestamps are ms
	waitUntil(t, "the last version in lookup", 10*time.Second, func() bool {
		var m lookup
		bridge.api("GET", "/v1/messages/cart-1", nil, &m)
		return m.State == "pending" && m.Headers["version"] == strconv.Itoa(stormN-1) && m.DueAt == wantDue
	})
	waitUntil(t, "one delivery", 20*time.Second, func() bool { return len(out.snapshot()) > 0 })
	time.Sleep(1500 * time.Millisecond) // room for a second copy to show up
	got := out.snapshot()
	if len(got) != 1 {
		t.Fatalf("%d deliveries, want exactly 1: %+v", len(got), got)
	}
	a := got[0]
	if a.value != fmt.Sprintf("v%d", stormN-1) || a.headers["version"] != strconv.Itoa(stormN-1) {
		t.Errorf("delivered %q (version %q), want the last version v%d", a.value, a.headers["version"], stormN-1)
	}
	if a.at.Before(last.Add(stormDelay)) || a.headers["x-delay-due-at"] != strconv.FormatInt(wantDue, 10) {
		t.Errorf("delivered at %s after the last record (due-at %s), want ≥ %s and due at %d",
			a.at.Sub(last), a.headers["x-delay-due-at"], stormDelay, wantDue)
	}
	waitUntil(t, "the replace metrics", 10*time.Second, func() bool {
		return bridge.metric("messages_replaced_total", `route="rp"`) == stormN-1 && bridge.metric("messages_parked_total", `route="rp"`) == 1
	})
	valid := testkit.ReceiptSchema(t)
	outcomes := map[string]int{}
	waitUntil(t, "100 receipts", 20*time.Second, func() bool {
		outcomes = map[string]int{}
		for _, rc := range receipts.snapshot() {
			if err := valid([]byte(rc.value)); err != nil {
				t.Fatalf("receipt %s: %v", rc.value, err)
			}
			var v struct{ ID, Outcome string }
			if err := json.Unmarshal([]byte(rc.value), &v); err != nil || v.ID != "cart-1" {
				t.Fatalf("receipt %s: %v", rc.value, err)
			}
			outcomes[v.Outcome]++
		}
		return outcomes["replaced"]+outcomes["delivered"] >= stormN
	})
	if outcomes["replaced"] != stormN-1 || outcomes["delivered"] != 1 {
		t.Errorf("receipts %v, want %d replaced and 1 delivered", outcomes, stormN-1)
	}
}

// TestReplaceStormAMQP: the same storm published to a RabbitMQ delay exchange, the
// header as an AMQP boolean: one delivery of the last version, none early, 99 replaced.
func TestReplaceStormAMQP(t *testing.T) {
	rb := newRabbit(t)
	target := rb.exchange("rp-target", "topic")
	got := rb.collect(rb.queue("rp-consumer", target, "#"))
	srcX, srcQ := testkit.Uniq(t, "rp-delayed"), testkit.Uniq(t, "rp-delay")
	routes := fmt.Sprintf("  - name: rpa\n    from: %s\n    to:   { amqp: { exchange: %q } }", amqpFrom(srcQ, srcX, "topic"), target)
	e := startAMQPBridge(t, rb, "", routes, "", []string{srcX}, []string{srcQ})
	p := rb.publisher()

	// The bursts are handed to the broker at their pace and confirmed after the storm:
	// waiting for each burst's confirms (a disk sync on the broker, persistent messages)
	// stretched the storm past 1 s on a loaded machine.
	start := time.Now()
	var last time.Time
	var confirms []func()
	for burst := range stormN / stormBurst {
		msgs := make([]amqp091.Publishing, stormBurst)
		for j := range msgs {
			i := burst*stormBurst + j
			msgs[j] = amqp091.Publishing{
				MessageId: "cart-a", Body: []byte(fmt.Sprintf("v%d", i)), DeliveryMode: amqp091.Persistent,
				Headers: amqp091.Table{"x-delay": int32(stormDelay.Milliseconds()), "x-delay-replace": true, "version": int32(i)},
			}
		}
		at, confirmed := p.publishAsync(srcX, func(int) string { return "cart" }, msgs)
		last, confirms = at[len(at)-1], append(confirms, confirmed)
		time.Sleep(time.Until(start.Add(time.Duration(burst+1) * 90 * time.Millisecond)))
	}
	storm := last.Sub(start)
	if storm > time.Second {
		t.Fatalf("the storm took %s, more than 1 s", storm)
	}
	for _, confirmed := range confirms {
		confirmed()
	}
	t.Logf("storm handed to the broker in %s, confirmed %s after its start", storm, time.Since(start))
	waitUntil(t, "one delivery", 20*time.Second, func() bool { return got.count() > 0 })
	time.Sleep(1500 * time.Millisecond)
	arr := got.snapshot()
	if len(arr) != 1 {
		var seen []string
		for _, x := range arr {
			seen = append(seen, fmt.Sprintf("%s at +%s", x.d.Body, x.at.Sub(last)))
		}
		t.Fatalf("%d deliveries (%v), want exactly 1", len(arr), seen)
	}
	d := arr[0]
	t.Logf("delivered %s after the last publish (x-delay %s)", d.at.Sub(last), stormDelay)
	if string(d.d.Body) != fmt.Sprintf("v%d", stormN-1) || d.d.Headers["version"] != int32(stormN-1) {
		t.Errorf("delivered %q (version %v), want the last version v%d", d.d.Body, d.d.Headers["version"], stormN-1)
	}
	if d.at.Before(last.Add(stormDelay)) {
		t.Errorf("delivered %s after the last publish, before its x-delay (%s)", d.at.Sub(last), stormDelay)
	}
	if rep, parked := e.bridge.metric("messages_replaced_total", `route="rpa"`), e.bridge.metric("messages_parked_total", `route="rpa"`); rep != stormN-1 || parked != 1 {
		t.Errorf("replaced %v parked %v, want %d and 1", rep, parked, stormN-1)
	}
}

// TestKcatDebounce runs the debounce recipe's kcat lines (README "Replace and
// debounce"): three activity records of one cart, each replacing the last, through the
// built bridge: one message arrives, the last one, not before its delay.
func TestKcatDebounce(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat not found on PATH (Debian package kcat; .ci/run installs it): %v", err)
	}
	r := testkit.StartRedis(t)
	addr, _ := testkit.StartKafka(t, 1, "carts.delay", "carts.abandoned")
	cfg, admin := writeConfig(t, r.Addr(), addr,
		`  - { name: carts, from: { kafka: { topic: carts.delay } }, to: { kafka: { topic: carts.abandoned } } }`, "")
	bridge := startBridge(t, cfg, admin)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var last time.Time
	for _, v := range []string{"v1", "v2", "v3"} {
		last = time.Now().Truncate(time.Millisecond) // a record's timestamp is whole ms: its due time counts from there
		// The recipe's line, with a 1.5 s delay instead of 30 minutes.
		produce := exec.CommandContext(ctx, kcat, "-P", "-b", addr, "-t", "carts.delay", "-K", ":",
			"-H", "x-message-id=cart-42", "-H", "x-delay-replace=true", "-H", "x-delay=1500")
		produce.Stdin = strings.NewReader("cart-42:" + v + "\n")
		if out, err := produce.CombinedOutput(); err != nil {
			t.Fatalf("kcat -P: %v\n%s", err, out)
		}
	}
	consume := exec.CommandContext(ctx, kcat, "-C", "-b", addr, "-t", "carts.abandoned", "-c", "1", "-f", "%k|%s\n")
	out, err := consume.Output()
	arrived := time.Now()
	if err != nil {
		t.Fatalf("kcat -C: %v\n%s", err, out)
	}
	if got := strings.TrimRight(string(out), "\n"); got != "cart-42|v3" {
		t.Errorf("delivered %q, want cart-42|v3", got)
	}
	if arrived.Before(last.Add(1500 * time.Millisecond)) {
		t.Errorf("arrived %s after the last record, before its 1.5 s delay", arrived.Sub(last))
	}
	time.Sleep(1500 * time.Millisecond)
	if n := bridge.metric("messages_published_total", `route="carts"`); n != 1 {
		t.Errorf("messages_published_total = %v, want 1", n)
	}
	if n := bridge.metric("messages_replaced_total", `route="carts"`); n != 2 {
		t.Errorf("messages_replaced_total = %v, want 2", n)
	}

	// Over HTTP: "replace": true answers 200 with replaced, and lookup shows the new
	// version; without it the same id is a duplicate (nothing changes).
	type scheduled struct {
		DueAt     int64 `json:"due_at"`
		Duplicate bool  `json:"duplicate"`
		Replaced  bool  `json:"replaced"`
	}
	post := func(payload string, delayMs int64, replace bool) (int, scheduled) {
		var out scheduled
		code := bridge.api("POST", "/v1/messages", map[string]any{
			"id": "cart-7", "route": "carts", "payload": payload, "delay_ms": delayMs, "replace": replace,
			"headers": map[string]string{"version": payload}}, &out)
		return code, out
	}
	if code, out := post("a", 600_000, true); code != 201 || out.Replaced || out.Duplicate {
		t.Fatalf("first replace of an unknown id: %d %+v, want 201 parked", code, out)
	}
	if code, out := post("b", 900_000, false); code != 200 || !out.Duplicate {
		t.Fatalf("plain POST of a pending id: %d %+v, want 200 duplicate", code, out)
	}
	code, rep := post("c", 1_200_000, true)
	if code != 200 || !rep.Replaced {
		t.Fatalf("replace of a pending id: %d %+v, want 200 replaced", code, rep)
	}
	var m lookup
	bridge.api("GET", "/v1/messages/cart-7", nil, &m)
	if m.State != "pending" || m.Headers["version"] != "c" || m.DueAt != rep.DueAt {
		t.Fatalf("lookup %+v, want pending, version c, due %d", m, rep.DueAt)
	}
}
