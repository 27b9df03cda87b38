package e2e

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/testkit"
)

// TestReplaceStormOrderedKafka: the replace storm on a route with `order: key`
// (README "Order"): one key's messages around a stormed id — "first" due before it,
// "after1" and "after2" (equal due times) after it. The stormed id is delivered once,
// the last version, not early, and the key's messages come in their order.
func TestReplaceStormOrderedKafka(t *testing.T) {
	r := testkit.StartRedis(t)
	kaddr, _ := testkit.StartKafka(t, 1, "ro.delay", "ro.out")
	route := `  - name: ro
    from: { kafka: { topic: ro.delay } }
    to:   { kafka: { topic: ro.out } }
    order: key`
	cfg, admin := writeConfig(t, r.Addr(), kaddr, route, "")
	out := collect(t, kaddr, "ro.out")
	bridge := startBridge(t, cfg, admin)
	w := newWriter(t, kaddr, "ro.delay")
	t.Cleanup(func() { w.Close() })
	rec := func(id, value string, delay time.Duration, replace bool) kafka.Message {
		h := []kafka.Header{{Key: "x-delay", Value: []byte(strconv.FormatInt(delay.Milliseconds(), 10))},
			{Key: "x-message-id", Value: []byte(id)}}
		if replace {
			h = append(h, kafka.Header{Key: "x-delay-replace", Value: []byte("true")})
		}
		return kafka.Message{Key: []byte("cart-1"), Value: []byte(value), Time: time.Now(), Headers: h}
	}
	write(t, w, rec("first", "first", 500*time.Millisecond, false))
	start := time.Now()
	var last time.Time
	for burst := range stormN / stormBurst {
		msgs := make([]kafka.Message, stormBurst)
		for j := range msgs {
			last = time.Now().Truncate(time.Millisecond) // a record's timestamp is whole ms: its due time counts from there
			msgs[j] = rec("storm", fmt.Sprintf("v%d", burst*stormBurst+j), stormDelay, true)
		}
		write(t, w, msgs...)
		time.Sleep(time.Until(start.Add(time.Duration(burst+1) * 90 * time.Millisecond)))
	}
	if storm := last.Sub(start); storm > time.Second {
		t.Fatalf("the storm took %s, more than 1 s", storm)
	}
	write(t, w, rec("after1", "after1", stormDelay+500*time.Millisecond, false), rec("after2", "after2", stormDelay+500*time.Millisecond, false))
	want := []string{"first", fmt.Sprintf("v%d", stormN-1), "after1", "after2"}
	deadline := time.Now().Add(30 * time.Second)
	for len(out.snapshot()) < len(want) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if n := len(out.snapshot()); n < len(want) {
		for _, id := range []string{"first", "storm", "after1", "after2"} {
			var m lookup
			bridge.api("GET", "/v1/messages/"+id, nil, &m)
			t.Logf("%s: %+v", id, m)
		}
		t.Fatalf("%d deliveries after 30 s (%v), want %d", n, out.snapshot(), len(want))
	}
	time.Sleep(1500 * time.Millisecond) // room for a second copy to show up
	var got []string
	var stormAt time.Time
	for _, m := range out.snapshot() {
		got = append(got, m.value)
		if m.value == want[1] {
			stormAt = m.at
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("deliveries %v, want %v (one delivery of the last version, the key in order)", got, want)
	}
	if stormAt.Before(last.Add(stormDelay)) {
		t.Errorf("the stormed id delivered %s after the last record, want ≥ %s", stormAt.Sub(last), stormDelay)
	}
	waitUntil(t, "the replace metrics", 10*time.Second, func() bool {
		return bridge.metric("messages_replaced_total", `route="ro"`) == stormN-1
	})
}
