package e2e

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/testkit"
)

// TestReceiptsThroughTheBinary: the built binary with routes[].receipts on a Kafka
// topic publishes one receipt per outcome — 20 delivered, one dead_lettered (invalid
// x-delay), one cancelled over HTTP — each matching docs/receipt.schema.json and keyed
// by the message id; /metrics shows delaybridge_receipts_published_total{target="kafka"}
// counting them and delaybridge_receipts_backlog{target="kafka"} back at 0.
func TestReceiptsThroughTheBinary(t *testing.T) {
	r := testkit.StartRedis(t)
	kaddr, _ := testkit.StartKafka(t, 4, "orders.delay", "orders", "orders.receipts")
	cfg, admin := writeConfig(t, r.Addr(), kaddr, kafkaRoute+"\n    receipts: { kafka: { topic: orders.receipts } }", "")
	receipts := collect(t, kaddr, "orders.receipts")
	bridge := startBridge(t, cfg, admin)
	w := newWriter(t, kaddr, "orders.delay")
	t.Cleanup(func() { w.Close() })
	valid := testkit.ReceiptSchema(t)

	now := time.Now()
	var msgs []kafka.Message
	for i := range 20 {
		msgs = append(msgs, kafka.Message{Key: []byte("k" + strconv.Itoa(i)), Value: []byte("v"), Time: now, Headers: []kafka.Header{
			{Key: "x-delay", Value: []byte("300")}, {Key: "x-message-id", Value: []byte(fmt.Sprintf("r-%02d", i))},
			{Key: "x-correlation-id", Value: []byte("corr-" + strconv.Itoa(i))}}})
	}
	msgs = append(msgs,
		kafka.Message{Value: []byte("bad"), Time: now, Headers: []kafka.Header{{Key: "x-delay", Value: []byte("soon")}, {Key: "x-message-id", Value: []byte("r-bad")}}},
		kafka.Message{Value: []byte("later"), Time: now, Headers: []kafka.Header{{Key: "x-delay", Value: []byte("3600000")}, {Key: "x-message-id", Value: []byte("r-cancel")}}})
	write(t, w, msgs...)
	waitUntil(t, "r-cancel pending", 20*time.Second, func() bool { _, st := bridge.state("r-cancel"); return st == "pending" })
	if code := bridge.api("DELETE", "/v1/messages/r-cancel", nil, nil); code != 200 {
		t.Fatalf("DELETE r-cancel: %d", code)
	}

	outcome := map[string]string{}
	waitUntil(t, "22 receipts", 60*time.Second, func() bool {
		for _, a := range receipts.snapshot() {
			if err := valid([]byte(a.value)); err != nil {
				t.Fatalf("receipt %s: %v", a.value, err)
			}
			var rc struct{ ID, Outcome string }
			if err := json.Unmarshal([]byte(a.value), &rc); err != nil || rc.ID != a.key {
				t.Fatalf("receipt %s keyed %q: %v", a.value, a.key, err)
			}
			outcome[rc.ID] = rc.Outcome
		}
		return len(outcome) >= 22
	})
	for i := range 20 {
		if o := outcome[fmt.Sprintf("r-%02d", i)]; o != "delivered" {
			t.Errorf("r-%02d: %q, want delivered", i, o)
		}
	}
	if outcome["r-bad"] != "dead_lettered" || outcome["r-cancel"] != "cancelled" {
		t.Errorf("r-bad %q (want dead_lettered), r-cancel %q (want cancelled)", outcome["r-bad"], outcome["r-cancel"])
	}
	waitUntil(t, "the receipts metrics", 10*time.Second, func() bool {
		return bridge.metric("receipts_published_total", `target="kafka"`) >= 22 && bridge.metric("receipts_backlog", `target="kafka"`) == 0
	})
}
