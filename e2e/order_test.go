package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delay-bridge/testkit"
	"github.com/delaybridge/delay-bridge/testkit/tcpproxy"
)

// Strict per-key order (routes with `order: key`, README "Order") through real servers:
// 200 keys x 50 messages per route, due times random over 3 s in 100 ms steps (so many
// of one key's messages share a due time), produced before the first is due; one route
// publishes to Kafka (kfake), one to RabbitMQ. A consumer per target checks that each
// key's messages arrive in (due, send) order, every one, none early.

const (
	orderKeys   = 200
	orderPerKey = 50
	// orderLead is how far ahead of sending the first messages are due: the bridges
	// must have parked all 20,000 before the first are claimed (parkedBefore). About 2 s
	// on an idle machine; CI runs the e2e tests under -race beside other packages, and
	// a 4 s lead once left messages parked after their keys' heads were claimed.
	orderLead = 12 * time.Second
)

// orderRig is one Redis, one kfake broker, one RabbitMQ exchange and queue, and the
// bridges configured alike (two ordered routes).
type orderRig struct {
	t         *testing.T
	redis     string
	kaddr     string
	amqpURL   string
	kProxy    *tcpproxy.Proxy // with proxied: in front of kfake (source and target) and RabbitMQ
	aProxy    *tcpproxy.Proxy
	group     string
	exchange  string
	ttl       time.Duration
	routeYAML string // more keys of both routes (e.g. max_rate)
	kTarget   *collector
	aTarget   *amqpCollector
	bridges   []*bridgeProc // started by start, for parkedBefore
}

func startOrderRig(t *testing.T, ttl time.Duration, proxied bool) *orderRig {
	t.Helper()
	topics := []string{"kord.delay", "kord", "aord.delay"}
	rig := &orderRig{t: t, amqpURL: testkit.AMQPURL()}
	if proxied {
		rig.kaddr, _, rig.kProxy = testkit.StartKafkaBehindProxy(t, 4, topics...)
		rig.aProxy = tcpproxy.Start(t, "127.0.0.1:5672")
		rig.amqpURL = strings.Replace(rig.amqpURL, "127.0.0.1:5672", rig.aProxy.Addr, 1)
	} else {
		rig.kaddr, _ = testkit.StartKafka(t, 4, topics...)
	}
	r := newRabbit(t)
	x := r.exchange("ord", "topic")
	q := r.queue("ord", x, "#")
	rig.redis, rig.group, rig.exchange, rig.ttl = testkit.StartRedis(t).Addr(), testkit.Uniq(t, "group"), x, ttl
	kaddr := rig.kaddr
	rig.kTarget = collectThrough(t, kaddr, "kord")
	rig.aTarget = r.collect(q)
	return rig
}

// lookahead is the bridges' scheduler.lookahead: half the lease TTL.
func (r *orderRig) lookahead() time.Duration { return r.ttl / 2 }

// config writes instance's bridge.yaml (admin "" = a free port).
func (r *orderRig) config(instance, admin string) (string, string) {
	r.t.Helper()
	if admin == "" {
		admin = "127.0.0.1:" + strconv.Itoa(testkit.FreePort(r.t))
	}
	cfg := fmt.Sprintf(`cluster: ord
shards: 16
instance: %s
redis: { addrs: ["%s"] }
kafka: { brokers: ["%s"], group_id: %s }
amqp: { url: "%s", prefetch: 200 }
scheduler: { lookahead: %s, lease_ttl: %s, safety_scan: 200ms }
retry: { max_attempts: 20, backoff: { initial: 100ms, max: 500ms } }
admin: { listen: "%s" }
log: { level: info, format: text }
routes:
  - name: kord
    from: { kafka: { topic: kord.delay } }
    to:   { kafka: { topic: kord } }
    order: key
%[11]s
  - name: aord
    from: { kafka: { topic: aord.delay } }
    to:   { amqp: { exchange: %[10]q } }
    order: key
%[11]s
`, instance, r.redis, r.kaddr, r.group, r.amqpURL, r.lookahead(), r.ttl, admin, "", r.exchange, r.routeYAML)
	path := filepath.Join(r.t.TempDir(), instance+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		r.t.Fatal(err)
	}
	return path, admin
}

func (r *orderRig) start(instance string) *bridgeProc {
	r.t.Helper()
	cfg, admin := r.config(instance, "")
	p := startBridge(r.t, cfg, admin)
	p.waitReady(30 * time.Second)
	r.bridges = append(r.bridges, p)
	return p
}

// orderMsg is one message sent: its key, due time and position in its key's order.
type orderMsg struct {
	id, key string
	due     int64
	pos     int
}

// produceOrdered sends keys x per messages to topic, key-major per round (message j of
// every key, then j+1), due at base + 0..3 s in 100 ms steps, and returns them with
// their expected position in their key's order: by due time, then by send order.
func produceOrdered(t *testing.T, addr, topic, prefix string, base time.Time, seed uint64) map[string]orderMsg {
	t.Helper()
	w := newWriter(t, addr, topic)
	w.BatchSize = 1000
	defer w.Close()
	rng := rand.New(rand.NewPCG(seed, 7))
	byKey := map[string][]*orderMsg{}
	var batch []kafka.Message
	flush := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := w.WriteMessages(ctx, batch...); err != nil {
			t.Fatalf("produce to %s: %v", topic, err)
		}
		batch = batch[:0]
	}
	for j := range orderPerKey {
		for k := range orderKeys {
			m := &orderMsg{id: fmt.Sprintf("%s-%d-%d", prefix, k, j), key: fmt.Sprintf("key-%d", k),
				due: base.Add(time.Duration(rng.IntN(31)) * 100 * time.Millisecond).UnixMilli()}
			byKey[m.key] = append(byKey[m.key], m)
			batch = append(batch, kafka.Message{Key: []byte(m.key), Value: []byte(m.id), Headers: []kafka.Header{
				{Key: "x-deliver-at", Value: []byte(strconv.FormatInt(m.due, 10))},
				{Key: "x-message-id", Value: []byte(m.id)},
			}})
			if len(batch) == 1000 {
				flush()
			}
		}
	}
	if len(batch) > 0 {
		flush()
	}
	out := map[string]orderMsg{}
	for _, ms := range byKey {
		sort.SliceStable(ms, func(a, b int) bool { return ms[a].due < ms[b].due })
		for i, m := range ms {
			m.pos = i
			out[m.id] = *m
		}
	}
	return out
}

// orderArrival is one delivery seen by a target consumer, in consumption order.
type orderArrival struct {
	id string
	at time.Time
}

type orderReport struct {
	violations, lost, early, dups int
	first                         []string
}

// checkOrder checks arrivals against sent: per key, positions never go back (a
// duplicate of the previous message right after it is a duplicate, not a violation;
// one after a later message is a violation), every message arrived, none early.
func checkOrder(sent map[string]orderMsg, got []orderArrival) orderReport {
	var rep orderReport
	last := map[string]int{}
	seen := map[string]bool{}
	for _, a := range got {
		m, ok := sent[a.id]
		if !ok {
			continue
		}
		if p, ok := last[m.key]; ok && m.pos < p {
			rep.violations++
			if len(rep.first) < 5 {
				rep.first = append(rep.first, fmt.Sprintf("%s: %s (position %d) after position %d", m.key, m.id, m.pos, p))
			}
		}
		if p, ok := last[m.key]; !ok || m.pos > p {
			last[m.key] = m.pos
		}
		if seen[a.id] {
			rep.dups++
		}
		seen[a.id] = true
		if a.at.UnixMilli() < m.due {
			rep.early++
		}
	}
	for id := range sent {
		if !seen[id] {
			rep.lost++
		}
	}
	return rep
}

func (r *orderRig) kafkaArrivals() []orderArrival {
	var out []orderArrival
	for _, a := range r.kTarget.snapshot() {
		out = append(out, orderArrival{id: a.headers["x-message-id"], at: a.at})
	}
	return out
}

func (r *orderRig) amqpArrivals() []orderArrival {
	var out []orderArrival
	for _, a := range r.aTarget.snapshot() {
		out = append(out, orderArrival{id: a.id(), at: a.at})
	}
	return out
}

// produceBoth sends the two routes' messages, due from lead on, and returns them.
func (r *orderRig) produceBoth(lead time.Duration) (kSent, aSent map[string]orderMsg) {
	r.t.Helper()
	base := time.Now().Add(lead)
	kSent = produceOrdered(r.t, r.kaddr, "kord.delay", "k", base, 1)
	aSent = produceOrdered(r.t, r.kaddr, "aord.delay", "a", base, 2)
	if late := time.Since(base); late > 0 {
		r.t.Logf("producing took %s past the first due time: order is only promised among messages pending together", late)
	}
	r.parkedBefore(len(kSent)+len(aSent), base.Add(-r.lookahead()))
	return kSent, aSent
}

// parkedBefore waits until the bridges have parked n messages and fails the test if
// that was after by (the first due time less the lookahead): a key's head claimed
// before an earlier-due message of the key is parked is delivered first, as the
// contract says (order holds among messages pending together), so the check would
// count violations the bridge does not promise to avoid.
func (r *orderRig) parkedBefore(n int, by time.Time) {
	r.t.Helper()
	parked := func() int {
		total := 0
		for _, p := range r.bridges {
			for _, route := range []string{"kord", "aord"} {
				if v := p.metric("messages_parked_total", `route="`+route+`"`); v > 0 {
					total += int(v)
				}
			}
		}
		return total
	}
	waitUntil(r.t, fmt.Sprintf("the bridges to park all %d messages", n), time.Minute, func() bool { return parked() >= n })
	if late := time.Since(by); late > 0 {
		r.t.Fatalf("parking the %d messages ended %s after the first were claimed (due less the lookahead): the rig's lead is too short for this machine, and order is only promised among messages pending together", n, late)
	}
	r.t.Logf("all %d messages parked %s before the first due time less the lookahead", n, -time.Since(by))
}

// waitAndCheck waits for every message on both targets and checks the order.
func (r *orderRig) waitAndCheck(kSent, aSent map[string]orderMsg, limit time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(limit)
	for r.kTarget.uniqueCount() < len(kSent) || uniqueIDs(r.amqpArrivals()) < len(aSent) {
		if time.Now().After(deadline) {
			r.t.Fatalf("after %s: %d of %d on the Kafka target, %d of %d on the AMQP target", limit,
				r.kTarget.uniqueCount(), len(kSent), uniqueIDs(r.amqpArrivals()), len(aSent))
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // late duplicates
	for _, c := range []struct {
		name string
		sent map[string]orderMsg
		got  []orderArrival
	}{{"kafka", kSent, r.kafkaArrivals()}, {"amqp", aSent, r.amqpArrivals()}} {
		rep := checkOrder(c.sent, c.got)
		r.t.Logf("%s target: %d messages, %d keys: %d order violations, %d lost, %d early, %d duplicates",
			c.name, len(c.sent), orderKeys, rep.violations, rep.lost, rep.early, rep.dups)
		if rep.violations+rep.lost+rep.early > 0 {
			r.t.Errorf("%s target: %d violations (first: %s), %d lost, %d early", c.name, rep.violations,
				strings.Join(rep.first, "; "), rep.lost, rep.early)
		}
	}
}

func uniqueIDs(got []orderArrival) int {
	seen := map[string]bool{}
	for _, a := range got {
		seen[a.id] = true
	}
	return len(seen)
}

// TestOrderKeyKafkaAndAMQP: one bridge, no faults.
func TestOrderKeyKafkaAndAMQP(t *testing.T) {
	rig := startOrderRig(t, time.Second, false)
	rig.start("ord-a")
	kSent, aSent := rig.produceBoth(orderLead)
	rig.waitAndCheck(kSent, aSent, 90*time.Second)
}

// TestOrderKeyKillOneOfTwo: two bridges; 1 s after the first messages came due, one
// is killed with SIGKILL (its in-flight heads are recovered by the other, which owns its
// shards within the lease TTL). Order holds; duplicates (heads published but not yet
// acknowledged by the victim) are counted, and can only follow their own original.
func TestOrderKeyKillOneOfTwo(t *testing.T) {
	ttl := haLeaseTTL(t)
	rig := startOrderRig(t, ttl, false)
	a := rig.start("ord-a")
	victim := rig.start("ord-b")
	(&haCluster{t: t}).waitBalanced(a, 30*time.Second, "ord-a", "ord-b")
	kSent, aSent := rig.produceBoth(orderLead)
	time.Sleep(time.Until(time.UnixMilli(minDue(kSent)).Add(time.Second)))
	before := rig.kTarget.uniqueCount() + uniqueIDs(rig.amqpArrivals())
	victim.kill()
	t.Logf("SIGKILL to ord-b with %d of %d messages delivered", before, len(kSent)+len(aSent))
	if before == 0 || before >= len(kSent)+len(aSent) {
		t.Errorf("the kill did not fall mid-run (%d of %d delivered)", before, len(kSent)+len(aSent))
	}
	rig.waitAndCheck(kSent, aSent, 2*time.Minute)
}

// TestOrderKeyBrokerOutage: both brokers (Kafka source and target, RabbitMQ) become
// unreachable for 3 s, 1 s after the first messages came due: publishes fail and are
// retried (the head stays the head), confirms are lost with the connections. Order
// holds, nothing is lost or early.
func TestOrderKeyBrokerOutage(t *testing.T) {
	rig := startOrderRig(t, time.Second, true)
	rig.start("ord-a")
	kSent, aSent := rig.produceBoth(orderLead)
	time.Sleep(time.Until(time.UnixMilli(minDue(kSent)).Add(time.Second)))
	before := rig.kTarget.uniqueCount() + uniqueIDs(rig.amqpArrivals())
	for _, p := range []*tcpproxy.Proxy{rig.kProxy, rig.aProxy} {
		p.SetDown(true)
		p.Cut()
	}
	time.Sleep(3 * time.Second)
	for _, p := range []*tcpproxy.Proxy{rig.kProxy, rig.aProxy} {
		p.SetDown(false)
	}
	t.Logf("brokers down for 3 s with %d of %d messages delivered", before, len(kSent)+len(aSent))
	if before == 0 || before >= len(kSent)+len(aSent) {
		t.Errorf("the outage did not fall mid-run (%d of %d delivered)", before, len(kSent)+len(aSent))
	}
	rig.waitAndCheck(kSent, aSent, 2*time.Minute)
}

// collectThrough is collect that keeps reading across read errors (a proxy in front
// of the broker cuts its connections) and records each record (partition, offset)
// once: a consumer that reconnects may read again what it had read, which is the
// consumer's repetition, not a second publish. It is franz-go's direct consumer (no
// group to rejoin after a cut), which resumes from the offsets it holds.
func collectThrough(t *testing.T, addr, topic string) *collector {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(10*time.Millisecond),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &collector{cancel: cancel, done: make(chan struct{})}
	read := map[[2]int64]bool{}
	go func() {
		defer close(c.done)
		defer cl.Close()
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			fs.EachRecord(func(m *kgo.Record) {
				at := [2]int64{int64(m.Partition), m.Offset}
				if read[at] {
					return
				}
				read[at] = true
				a := arrival{key: string(m.Key), value: string(m.Value), headers: map[string]string{}, at: now}
				for _, h := range m.Headers {
					a.headers[h.Key] = string(h.Value)
				}
				c.mu.Lock()
				c.got = append(c.got, a)
				c.mu.Unlock()
			})
		}
	}()
	t.Cleanup(func() { cancel(); <-c.done })
	return c
}

// TestOrderKeyMaxRate: both routes throttled to 2500 msgs/s, so the 10,000 messages
// each has due over 3 s build an egress backlog of about a second: order holds.
func TestOrderKeyMaxRate(t *testing.T) {
	rig := startOrderRig(t, time.Second, false)
	rig.routeYAML = "    max_rate: 2500"
	rig.start("ord-a")
	kSent, aSent := rig.produceBoth(orderLead)
	rig.waitAndCheck(kSent, aSent, 2*time.Minute)
	first := time.UnixMilli(min(minDue(kSent), minDue(aSent)))
	t.Logf("all delivered %s after the first due time", time.Since(first).Round(100*time.Millisecond))
}

func minDue(sent map[string]orderMsg) int64 {
	m := int64(-1)
	for _, s := range sent {
		if m < 0 || s.due < m {
			m = s.due
		}
	}
	return m
}

// TestOrderKeyAdminAPI: GET /v1/keys and bridge ctl keys list a key's pending messages
// in the key's order with its head; a keyed message is found by id (it lives in its
// key's shard); reschedule of one is refused (409); DELETE /v1/keys cancels and
// returns them, after which nothing is pending for the key and nothing is published.
func TestOrderKeyAdminAPI(t *testing.T) {
	rig := startOrderRig(t, time.Second, false)
	p := rig.start("ord-a")
	base := time.Now().Add(time.Minute)
	w := newWriter(t, rig.kaddr, "kord.delay")
	defer w.Close()
	var msgs []kafka.Message
	for i, off := range []time.Duration{3 * time.Second, time.Second, 2 * time.Second} { // ids x-0, x-1, x-2
		msgs = append(msgs, kafka.Message{Key: []byte("key-x"), Value: []byte("v"), Headers: []kafka.Header{
			{Key: "x-deliver-at", Value: []byte(strconv.FormatInt(base.Add(off).UnixMilli(), 10))},
			{Key: "x-message-id", Value: []byte("x-" + strconv.Itoa(i))},
		}})
	}
	if err := w.WriteMessages(context.Background(), msgs...); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Head     string
		Messages []struct{ ID, State string }
	}
	waitUntil(t, "three messages pending for key-x", 30*time.Second, func() bool {
		p.api("GET", "/v1/keys/kord/key-x", nil, &list)
		return len(list.Messages) == 3
	})
	var order []string
	for _, m := range list.Messages {
		order = append(order, m.ID+":"+m.State)
	}
	if strings.Join(order, ",") != "x-1:pending,x-2:pending,x-0:pending" || list.Head != "x-1" {
		t.Fatalf("GET /v1/keys/kord/key-x = %v head %q, want x-1,x-2,x-0 (due order) with head x-1", order, list.Head)
	}
	if code, st := p.state("x-0"); code != 200 || st != "pending" {
		t.Fatalf("GET /v1/messages/x-0 = %d %q, want 200 pending (found in its key's shard)", code, st)
	}
	if code := p.api("POST", "/v1/messages/x-0/reschedule", map[string]any{"delay_ms": 5}, nil); code != 409 {
		t.Fatalf("reschedule of an ordered message: %d, want 409", code)
	}
	code, out, errOut := runBinary(t, nil, "ctl", "--addr", "http://"+p.admin, "keys", "kord", "key-x")
	if code != 0 || !strings.Contains(out, "x-1") || strings.Index(out, "x-1") > strings.Index(out, "x-0") {
		t.Fatalf("bridge ctl keys: exit %d\n%s%s", code, out, errOut)
	}
	t.Logf("bridge ctl keys kord key-x:\n%s", out)
	if code := p.api("GET", "/v1/keys/orders/key-x", nil, nil); code != 400 {
		t.Fatalf("GET /v1/keys of an unknown route: %d, want 400", code)
	}
	if code := p.api("DELETE", "/v1/keys/kord/key-x", nil, &list); code != 200 || len(list.Messages) != 3 {
		t.Fatalf("DELETE /v1/keys/kord/key-x = %d %+v, want the 3 cancelled", code, list)
	}
	p.api("GET", "/v1/keys/kord/key-x", nil, &list)
	if len(list.Messages) != 0 {
		t.Fatalf("after DELETE: %+v still pending", list)
	}
	if code, st := p.state("x-1"); code != 200 || st != "cancelled" {
		t.Fatalf("x-1 after the key's cancel: %d %q", code, st)
	}
}
