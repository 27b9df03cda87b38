package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delay-bridge/testkit"
	"github.com/delaybridge/delay-bridge/testkit/tcpproxy"
)

// Broker faults through the built binary: the target broker frozen around a SIGTERM,
// and the target broker down while messages are scheduled over HTTP.

const (
	freezeMessages = 1500
	freezeFor      = 20 * time.Second
)

// freezeEnv is one broker-freeze run: a Redis, the Kafka delay source, the proxy in
// front of the target broker, and two bridges sharing the route.
type freezeEnv struct {
	t       *testing.T
	redis   string
	kaddr   string // bootstrap address the bridges use (the proxy's for the Kafka run)
	amqpURL string // amqp.url the bridges use (the proxy's for the AMQP run)
	to      string // the route's to: section
	group   string
	cluster string
}

// start writes instance's configuration (defaults for retry, leases and the publish
// timeout, as in production) and starts the bridge.
func (e *freezeEnv) start(instance string) *bridgeProc {
	e.t.Helper()
	admin := "127.0.0.1:" + strconv.Itoa(testkit.FreePort(e.t))
	cfg := fmt.Sprintf(`cluster: %s
shards: %d
instance: %s
redis: { addrs: [%q] }
kafka: { brokers: [%q], group_id: %s }
amqp: { url: %q }
admin: { listen: %q }
log: { level: info, format: text }
routes:
  - name: r
    from: { kafka: { topic: r.delay } }
    to:   %s
`, e.cluster, haShards, instance, e.redis, e.kaddr, e.group, e.amqpURL, admin, e.to)
	path := filepath.Join(e.t.TempDir(), instance+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		e.t.Fatal(err)
	}
	return startBridge(e.t, path, admin)
}

// terminate sends SIGTERM and returns at once; awaitExit waits for the exit (its status
// is judged by the harness: anything but 0 is a problem).
func (p *bridgeProc) terminate() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatalf("SIGTERM: %v", err)
	}
}

func (p *bridgeProc) awaitExit(limit time.Duration) {
	p.t.Helper()
	select {
	case <-p.done:
		p.cmd = nil
	case <-time.After(limit):
		p.t.Fatalf("bridge %s did not exit within %s of the thaw after SIGTERM:\n%s", p.admin, limit, p.logs())
	}
}

// produceDue writes n records to topic due over spread from due on (x-deliver-at in
// unix milliseconds) and returns the ledger entries.
func produceDue(t *testing.T, w *kafka.Writer, prefix string, n int, due time.Time, spread time.Duration) map[string]sent {
	t.Helper()
	out := make(map[string]sent, n)
	msgs := make([]kafka.Message, 0, n)
	now := time.Now().Truncate(time.Millisecond)
	for i := range n {
		id := prefix + "-" + strconv.Itoa(i)
		at := due.Add(time.Duration(i) * spread / time.Duration(n)).Truncate(time.Millisecond)
		s := sent{id: id, key: "k" + strconv.Itoa(i%50), value: "payload " + id, delay: at.Sub(now), at: now}
		out[id] = s
		msgs = append(msgs, kafka.Message{Key: []byte(s.key), Value: []byte(s.value), Time: now, Headers: []kafka.Header{
			{Key: "x-deliver-at", Value: []byte(strconv.FormatInt(at.UnixMilli(), 10))},
			{Key: "x-message-id", Value: []byte(id)},
		}})
	}
	for len(msgs) > 0 {
		k := min(500, len(msgs))
		if err := w.WriteMessages(context.Background(), msgs[:k]...); err != nil {
			t.Fatalf("produce: %v", err)
		}
		msgs = msgs[k:]
	}
	return out
}

// topicEnd is the number of records on topic (the sum of its partitions' end offsets).
func topicEnd(t *testing.T, addr, topic string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := &kafka.Client{Addr: kafka.TCP(addr)}
	meta, err := c.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{topic}})
	if err != nil || len(meta.Topics) != 1 {
		t.Fatalf("metadata of %s: %v", topic, err)
	}
	req := &kafka.ListOffsetsRequest{Topics: map[string][]kafka.OffsetRequest{}}
	for _, p := range meta.Topics[0].Partitions {
		req.Topics[topic] = append(req.Topics[topic], kafka.LastOffsetOf(p.ID))
	}
	res, err := c.ListOffsets(ctx, req)
	if err != nil {
		t.Fatalf("list offsets of %s: %v", topic, err)
	}
	var sum int64
	for _, p := range res.Topics[topic] {
		if p.Error != nil {
			t.Fatalf("list offsets of %s/%d: %v", topic, p.Partition, p.Error)
		}
		sum += p.LastOffset
	}
	return sum
}

// shardsEmpty reports whether p's view of the shards holds nothing pending or in flight:
// nothing is left that could still be published (again).
func shardsEmpty(p *bridgeProc) bool {
	var stats struct {
		Totals struct{ Pending, Inflight int64 }
	}
	return p.api("GET", "/v1/stats", nil, &stats) == 200 && stats.Totals.Pending == 0 && stats.Totals.Inflight == 0
}

// TestBrokerFreezeAroundSIGTERM: two bridge processes share a route; 1500 messages come
// due over 3 s; 1.5 s into that the target broker freezes for 20 s (a proxy that stops
// forwarding both ways, as a SIGSTOPed broker: what was written is applied after the
// thaw); 2.5 s into the freeze one bridge gets SIGTERM. Every message must arrive, none
// early, and fewer than 1 % twice (a publish whose outcome is unknown is not re-sent
// while the first write can still complete). The stopped bridge must exit with status 0.
//
//	go test -count=1 -run TestBrokerFreezeAroundSIGTERM -v ./e2e/
func TestBrokerFreezeAroundSIGTERM(t *testing.T) {
	t.Parallel() // see the package doc
	// The two runs share nothing (each its own Redis, Kafka, proxy, group and cluster
	// name; unique RabbitMQ names) and spend most of their time in the freeze: they
	// run side by side.
	t.Run("kafka", func(t *testing.T) {
		t.Parallel()
		e := &freezeEnv{t: t, redis: testkit.StartRedis(t).Addr(), amqpURL: testkit.AMQPURL(),
			to: "{ kafka: { topic: r.out } }", group: testkit.Uniq(t, "group"), cluster: testkit.Uniq(t, "frz")}
		// Ingress and egress both through the proxy: the whole broker stalls.
		var frozen *tcpproxy.Proxy
		e.kaddr, _, frozen = testkit.StartKafkaBehindProxy(t, 4, "r.delay", "r.out")
		// Not a group consumer (collect): its session would expire in the freeze and
		// re-read from its last commit, duplicates the bridge did not make.
		target := recordsOf(t, e.kaddr, "r.out")
		got := freezeRun(t, e, frozen, target.unique)
		// Every record on the target read: the duplicates counted are all there are.
		waitUntil(t, "every record on r.out read", 60*time.Second, func() bool {
			return target.records() >= topicEnd(t, e.kaddr, "r.out")
		})
		judgeFreeze(t, "kafka", got, target.snapshot())
	})
	t.Run("amqp", func(t *testing.T) {
		t.Parallel()
		rb := newRabbit(t)
		ex := rb.exchange("frz-x", "topic")
		q := rb.queue("frz-q", ex, "#")
		frozen := tcpproxy.Start(t, "127.0.0.1:5672")
		e := &freezeEnv{t: t, redis: testkit.StartRedis(t).Addr(), amqpURL: frozen.URL(testkit.AMQPURL()),
			to: fmt.Sprintf("{ amqp: { exchange: %q } }", ex), group: testkit.Uniq(t, "group"), cluster: testkit.Uniq(t, "frz")}
		e.kaddr, _ = testkit.StartKafka(t, 4, "r.delay")
		target := rb.collect(q)
		got := freezeRun(t, e, frozen, func() int { n, _ := target.byID(); return len(n) })
		// Every publish the bridges had confirmed is in the queue before a marker
		// published now, and the queue hands them over in order: once the marker
		// arrived, the duplicates counted are all there are.
		rb.publisher().publish(ex, func(int) string { return "marker" }, []amqp091.Publishing{{Headers: amqp091.Table{"x-message-id": "marker"}}})
		waitUntil(t, "the marker after everything", time.Minute, func() bool { all, _ := target.byID(); _, ok := all["marker"]; return ok })
		var arrivals []arrival
		for _, a := range target.snapshot() {
			if a.id() == "marker" {
				continue
			}
			ar := arrival{key: a.d.RoutingKey, value: string(a.d.Body), headers: map[string]string{}, at: a.at}
			for k, v := range a.d.Headers {
				ar.headers[k] = fmt.Sprint(v)
			}
			arrivals = append(arrivals, ar)
		}
		judgeFreeze(t, "amqp", got, arrivals)
	})
}

// recordReader reads a topic from the start without a consumer group and records every
// record once (by partition and offset).
type recordReader struct {
	mu   sync.Mutex
	got  []arrival
	ids  map[string]bool
	seen map[[2]int64]bool
}

func recordsOf(t *testing.T, addr, topic string) *recordReader {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	rr := &recordReader{ids: map[string]bool{}, seen: map[[2]int64]bool{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			now := time.Now()
			rr.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				pos := [2]int64{int64(r.Partition), r.Offset}
				if rr.seen[pos] {
					return
				}
				rr.seen[pos] = true
				a := arrival{key: string(r.Key), value: string(r.Value), headers: map[string]string{}, at: now}
				for _, h := range r.Headers {
					a.headers[h.Key] = string(h.Value)
				}
				rr.got = append(rr.got, a)
				rr.ids[a.headers["x-message-id"]] = true
			})
			rr.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return rr
}

func (rr *recordReader) unique() int {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return len(rr.ids)
}

func (rr *recordReader) records() int64 {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return int64(len(rr.got))
}

func (rr *recordReader) snapshot() []arrival {
	rr.mu.Lock()
	defer rr.mu.Unlock()
	return append([]arrival(nil), rr.got...)
}

type counts struct{ Pending, Inflight int64 }

// heldBy sums, as p sees it, what the shards owned by instance hold.
func heldBy(p *bridgeProc, instance string) counts {
	var stats struct {
		Shards []struct {
			Owner string
			counts
		}
	}
	var sum counts
	if code := p.api("GET", "/v1/stats", nil, &stats); code != 200 {
		p.t.Fatalf("GET /v1/stats: %d", code)
	}
	for _, s := range stats.Shards {
		if s.Owner == instance {
			sum.Pending += s.Pending
			sum.Inflight += s.Inflight
		}
	}
	return sum
}

// freezeRun runs the scenario and returns the ledger once every message arrived once
// (unique() counts distinct ids on the target) and the survivor's shards are empty.
func freezeRun(t *testing.T, e *freezeEnv, frozen *tcpproxy.Proxy, unique func() int) map[string]sent {
	t.Helper()
	a, b := e.start("frz-a"), e.start("frz-b")
	(&haCluster{t: t}).waitBalanced(b, 30*time.Second, "frz-a", "frz-b")

	w := newWriter(t, e.kaddr, "r.delay")
	// Due over 3 s (500 a second); the freeze starts in the middle of that stream, so
	// writes are on the wire when it begins and the rest are written into it.
	due := time.Now().Add(5 * time.Second)
	sentMsgs := produceDue(t, w, "f", freezeMessages, due, 3*time.Second)
	w.Close()
	time.Sleep(time.Until(due.Add(1500 * time.Millisecond)))
	frozen.Freeze()
	frozeAt := time.Now()
	t.Logf("target broker frozen 1.5 s into the 3 s during which %d messages come due; %d arrived before", freezeMessages, unique())
	time.Sleep(2500 * time.Millisecond)
	held := heldBy(b, "frz-a")
	a.terminate() // while its publishes hang
	t.Logf("SIGTERM to frz-a holding %+v; %d arrived so far", held, unique())
	if held.Inflight == 0 {
		t.Errorf("frz-a had nothing in flight when it got SIGTERM: the scenario did not happen")
	}
	time.Sleep(time.Until(frozeAt.Add(freezeFor)))
	frozen.Thaw()
	t.Logf("thawed after %v", time.Since(frozeAt).Round(time.Second))
	a.awaitExit(2 * time.Minute)

	waitUntil(t, "every message on the target", 2*time.Minute, func() bool { return unique() >= freezeMessages })
	waitUntil(t, "the surviving bridge's shards empty", time.Minute, func() bool { return shardsEmpty(b) })
	return sentMsgs
}

func judgeFreeze(t *testing.T, broker string, sentMsgs map[string]sent, got []arrival) {
	t.Helper()
	dups := ledger(t, sentMsgs, got, "r.delay")
	t.Logf("%s: %d messages, %d arrivals, %d duplicates (%.2f %%) under a %v target-broker freeze around a SIGTERM",
		broker, len(sentMsgs), len(got), dups, 100*float64(dups)/freezeMessages, freezeFor)
	if dups*100 >= freezeMessages {
		t.Errorf("%s: %d duplicates, 1 %% or more of the %d in flight", broker, dups, freezeMessages)
	}
}

// readyz returns /readyz's status and body (0 when there is no answer).
func (p *bridgeProc) readyz() (int, string) {
	resp, err := http.Get("http://" + p.admin + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// readyCheck returns the named check of a /readyz body and whether it is there.
func readyCheck(body, name string) (ok, found bool, detail string) {
	var r struct {
		Checks []struct {
			Name   string `json:"name"`
			OK     bool   `json:"ok"`
			Detail string `json:"detail"`
		} `json:"checks"`
	}
	if json.Unmarshal([]byte(body), &r) != nil {
		return false, false, ""
	}
	for _, c := range r.Checks {
		if c.Name == name {
			return c.OK, true, c.Detail
		}
	}
	return false, false, ""
}

// TestTargetBrokerDownRetriesNeverDeadLetters: the target Kafka broker stops (connection
// refused) and messages are scheduled over HTTP: /readyz answers 503 naming the failing
// "egress kafka" check, publish_failures_total{reason="unreachable"} rises well beyond
// retry.max_attempts per message, nothing is dead-lettered and no message reads dead;
// once a broker listens on that address again every message arrives, none early, and
// /readyz answers 200 again.
func TestTargetBrokerDownRetriesNeverDeadLetters(t *testing.T) {
	r := testkit.StartRedis(t)
	kaddr, c := testkit.StartKafka(t, 1, "orders.delay", "orders")
	cfg, admin := writeConfig(t, r.Addr(), kaddr, kafkaRoute, "")
	p := startBridge(t, cfg, admin)
	const maxAttempts = 3 // retry.max_attempts in writeConfig

	c.Close()
	var body string
	waitUntil(t, "/readyz 503 naming egress kafka", time.Minute, func() bool {
		var code int
		code, body = p.readyz()
		ok, found, _ := readyCheck(body, "egress kafka")
		return code == 503 && found && !ok
	})
	t.Logf("/readyz with the broker stopped: %s", strings.TrimSpace(body))

	const n = 5
	sentMsgs := map[string]sent{}
	for i := range n {
		id := "bd-" + strconv.Itoa(i)
		var res struct {
			ID    string `json:"id"`
			DueAt int64  `json:"due_at"`
		}
		if code := p.api("POST", "/v1/messages", map[string]any{"id": id, "route": "orders", "delay_ms": 100, "key": "k", "payload": "payload " + id}, &res); code != 201 || res.ID != id {
			t.Fatalf("POST %s: %d %+v, want 201", id, code, res)
		}
		sentMsgs[id] = sent{id: id, key: "k", value: "payload " + id}
	}
	unreachable := []string{`route="orders"`, `broker="kafka"`, `reason="unreachable"`}
	waitUntil(t, "publish failures well beyond max_attempts", time.Minute, func() bool {
		return p.metric("publish_failures_total", unreachable...) >= 2*maxAttempts*n
	})
	if v := p.metric("messages_dead_lettered_total", `route="orders"`); v != 0 {
		t.Fatalf("messages_dead_lettered_total{route=orders} = %v while the broker was unreachable, want 0", v)
	}
	for id := range sentMsgs {
		if code, st := p.state(id); code != 200 || (st != "pending" && st != "inflight") {
			t.Errorf("%s while the broker is down: %d %q, want pending or inflight", id, code, st)
		}
	}
	t.Logf("publish_failures_total{unreachable} = %v for %d messages", p.metric("publish_failures_total", unreachable...), n)

	// A broker on the same address again (kfake keeps nothing across a restart).
	_, portText, _ := net.SplitHostPort(kaddr)
	kport, _ := strconv.Atoi(portText)
	c2, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(kport), kfake.SeedTopics(1, "orders.delay", "orders"))
	if err != nil {
		t.Fatalf("restart kfake on %s: %v", kaddr, err)
	}
	t.Cleanup(c2.Close)
	target := collect(t, kaddr, "orders")
	waitUntil(t, "every message after the broker came back", 2*time.Minute, func() bool { return target.uniqueCount() >= n })
	waitUntil(t, "/readyz 200 again", time.Minute, func() bool { code, _ := p.readyz(); return code == 200 })
	waitUntil(t, "shards empty", time.Minute, func() bool { return shardsEmpty(p) })
	waitUntil(t, "every record on the target read", time.Minute, func() bool {
		return int64(len(target.snapshot())) >= topicEnd(t, kaddr, "orders")
	})
	dups := ledger(t, sentMsgs, target.snapshot(), "http")
	if v := p.metric("messages_dead_lettered_total", `route="orders"`); v != 0 {
		t.Errorf("messages_dead_lettered_total{route=orders} = %v, want 0", v)
	}
	for id := range sentMsgs {
		if code, st := p.state(id); code != 200 || st != "delivered" {
			t.Errorf("%s after the broker came back: %d %q, want delivered", id, code, st)
		}
	}
	t.Logf("broker down: %d messages delivered after the outage, %d duplicates", n, dups)
}
