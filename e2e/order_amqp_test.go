package e2e

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/delaybridge/delay-bridge/testkit"
)

// TestOrderKeyAMQPSource: an AMQP → AMQP route with order: key. The ordering key is the
// routing key, except that messages carrying x-delay-key use that (two routing keys
// share one x-delay-key, so their messages form one order). 50 routing keys x 40
// messages, due times random over 2 s in 100 ms steps, published before the first is
// due: each ordering key's messages arrive in (due, publish) order, all, none early.
func TestOrderKeyAMQPSource(t *testing.T) {
	rb := newRabbit(t)
	target := rb.exchange("ord-out", "topic")
	got := rb.collect(rb.queue("ord-consumer", target, "#"))
	srcX, srcQ := testkit.Uniq(t, "ord-delayed"), testkit.Uniq(t, "ord-delay")
	routes := fmt.Sprintf("  - name: billing\n    from: %s\n    to:   { amqp: { exchange: %q } }\n    order: key",
		amqpFrom(srcQ, srcX, "topic"), target)
	startAMQPBridge(t, rb, "", routes, "", []string{srcX}, []string{srcQ})

	const keys, per = 50, 40
	base := time.Now().Add(4 * time.Second)
	rng := rand.New(rand.NewPCG(3, 9))
	var msgs []amqp091.Publishing
	var rks []string
	byKey := map[string][]*orderMsg{}
	for j := range per {
		for k := range keys {
			id := fmt.Sprintf("q-%d-%d", k, j)
			rk := fmt.Sprintf("rk.%d", k)
			due := base.Add(time.Duration(rng.IntN(21)) * 100 * time.Millisecond).UnixMilli()
			hdr := amqp091.Table{"x-deliver-at": due, "x-message-id": id}
			okey := rk
			if k < 20 { // rk.0 and rk.1 share grp-0, ...
				okey = fmt.Sprintf("grp-%d", k/2)
				hdr["x-delay-key"] = okey
			}
			m := &orderMsg{id: id, key: okey, due: due}
			byKey[okey] = append(byKey[okey], m)
			msgs = append(msgs, amqp091.Publishing{Headers: hdr, Body: []byte(id)})
			rks = append(rks, rk)
		}
	}
	rb.publisher().publish(srcX, func(i int) string { return rks[i] }, msgs)
	if late := time.Since(base); late > 0 {
		t.Logf("publishing took %s past the first due time", late)
	}
	sent := map[string]orderMsg{}
	for _, ms := range byKey {
		sort.SliceStable(ms, func(a, b int) bool { return ms[a].due < ms[b].due })
		for i, m := range ms {
			m.pos = i
			sent[m.id] = *m
		}
	}
	arrivals := func() []orderArrival {
		var out []orderArrival
		for _, a := range got.snapshot() {
			out = append(out, orderArrival{id: a.id(), at: a.at})
		}
		return out
	}
	waitUntil(t, "every message on the target", time.Minute, func() bool { return uniqueIDs(arrivals()) >= len(sent) })
	time.Sleep(300 * time.Millisecond)
	rep := checkOrder(sent, arrivals())
	t.Logf("AMQP source: %d messages, %d ordering keys: %d order violations, %d lost, %d early, %d duplicates",
		len(sent), len(byKey), rep.violations, rep.lost, rep.early, rep.dups)
	if rep.violations+rep.lost+rep.early > 0 {
		t.Errorf("%d violations (first: %v), %d lost, %d early", rep.violations, rep.first, rep.lost, rep.early)
	}
}
