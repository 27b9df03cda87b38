package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/testkit"
)

// Redis as a database, seen from outside through the built binary: an evicting
// maxmemory-policy keeps the bridge not ready (naming the node, the policy and the fix)
// unless redis.allow_eviction accepts it, the policy is read from INFO where CONFIG is
// renamed, and a full Redis fails /readyz's store check while it refuses writes.

// launchBridge starts a bridge without waiting for it to be ready.
func launchBridge(t *testing.T, cfgPath, admin string) *bridgeProc {
	t.Helper()
	p := newBridge(t, nil, cfgPath, admin)
	p.launch()
	return p
}

// waitCheck waits until /readyz answers with the named check in the state ok (a passing
// check shows only while another one fails; ok true also accepts a 200) and, when
// failing, a detail containing want; it returns the status and the check's detail.
func waitCheck(t *testing.T, p *bridgeProc, name string, ok bool, want string, limit time.Duration) (int, string) {
	t.Helper()
	var code int
	var detail, body string
	waitUntil(t, fmt.Sprintf("/readyz check %q ok=%v %q", name, ok, want), limit, func() bool {
		code, body = p.readyz()
		if ok && code == 200 {
			return true
		}
		got, found, d := readyCheck(body, name)
		detail = d
		return found && got == ok && strings.Contains(detail, want)
	})
	return code, detail
}

// stayReady polls /readyz for d and fails on any answer but 200.
func stayReady(t *testing.T, p *bridgeProc, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if code, body := p.readyz(); code != 200 {
			t.Fatalf("/readyz %d: %s", code, body)
		}
	}
}

// stillNotReady polls /readyz for d and fails on any 200.
func stillNotReady(t *testing.T, p *bridgeProc, d time.Duration) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if code, body := p.readyz(); code == 200 {
			t.Fatalf("/readyz answered 200 with an evicting Redis: %s", body)
		}
	}
}

func policySeries(p *bridgeProc, node, policy string) []float64 {
	return p.series("redis_maxmemory_policy", `node="`+node+`"`, `policy="`+policy+`"`)
}

// TestRedisEvictionPolicyNotReady: a Redis configured as a cache (maxmemory 256mb,
// allkeys-lru) keeps the bridge not ready: /readyz fails "eviction" naming the policy,
// the node and the fix (every other check passing), the metric shows the policy, and
// the error log line names it. CONFIG SET maxmemory-policy noeviction makes the bridge
// ready within a few ownership rounds, with an info line, and the metric follows.
func TestRedisEvictionPolicyNotReady(t *testing.T) {
	r := testkit.StartRedis(t, "--maxmemory", "256mb", "--maxmemory-policy", "allkeys-lru")
	kaddr, _ := testkit.StartKafka(t, 1, "orders.delay", "orders")
	cfg, admin := writeConfig(t, r.Addr(), kaddr, kafkaRoute, "")
	p := launchBridge(t, cfg, admin)

	waitUntil(t, "shards owned", 30*time.Second, func() bool {
		_, body := p.readyz()
		ok, _, _ := readyCheck(body, "shards")
		return ok
	})
	code, detail := waitCheck(t, p, "eviction", false, "allkeys-lru", 10*time.Second)
	if code != 503 {
		t.Errorf("/readyz %d with an evicting Redis, want 503", code)
	}
	for _, want := range []string{"allkeys-lru", r.Addr(), "CONFIG SET maxmemory-policy noeviction", "redis.allow_eviction"} {
		if !strings.Contains(detail, want) {
			t.Errorf("eviction check %q does not name %q", detail, want)
		}
	}
	stillNotReady(t, p, 2*time.Second)
	if v := policySeries(p, r.Addr(), "allkeys-lru"); len(v) != 1 || v[0] != 1 {
		t.Errorf("redis_maxmemory_policy{policy=allkeys-lru} = %v, want [1]", v)
	}
	if !logHas(p, "level=ERROR", "Redis may evict pending messages", "policy=allkeys-lru", "node="+r.Addr()) {
		t.Errorf("no error line naming the policy and the node:\n%s", p.logs())
	}

	if err := r.Client().ConfigSet(context.Background(), "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	p.waitReady(5 * time.Second) // ownership rounds come every lease_ttl/3 (333 ms here)
	if !logHas(p, "level=INFO", "maxmemory-policy is noeviction again", "was=allkeys-lru") {
		t.Errorf("no info line on leaving the state:\n%s", p.logs())
	}
	if v := policySeries(p, r.Addr(), "noeviction"); len(v) != 1 || v[0] != 1 {
		t.Errorf("redis_maxmemory_policy{policy=noeviction} = %v, want [1]", v)
	}
	if v := policySeries(p, r.Addr(), "allkeys-lru"); len(v) != 0 {
		t.Errorf("redis_maxmemory_policy{policy=allkeys-lru} still there: %v", v)
	}
}

// TestRedisEvictionAllowed: with redis.allow_eviction the same Redis makes the bridge
// ready and keeps it ready, one warning names the policy (once, over many rounds) and
// the metric still shows it.
func TestRedisEvictionAllowed(t *testing.T) {
	r := testkit.StartRedis(t, "--maxmemory", "256mb", "--maxmemory-policy", "allkeys-lru")
	kaddr, _ := testkit.StartKafka(t, 1, "orders.delay", "orders")
	cfg, admin := writeConfigRedis(t, redisSection([]string{r.Addr()}, ", allow_eviction: true"), kaddr, kafkaRoute, "")
	p := startBridge(t, cfg, admin)
	stayReady(t, p, 2*time.Second) // several ownership rounds
	if n := strings.Count(p.logs(), "ready anyway because redis.allow_eviction is set"); n != 1 || !logHas(p, "level=WARN", "policy=allkeys-lru") {
		t.Errorf("%d warnings about the allowed policy, want 1:\n%s", n, p.logs())
	}
	if v := policySeries(p, r.Addr(), "allkeys-lru"); len(v) != 1 || v[0] != 1 {
		t.Errorf("redis_maxmemory_policy{policy=allkeys-lru} = %v, want [1]", v)
	}
}

// TestRedisEvictionPolicyFromInfo: with CONFIG renamed away (as managed services do)
// the policy is read from INFO memory: an evicting one still keeps the bridge not
// ready. With INFO gone too the policy is unknown: ready, one warning, the metric says
// unknown.
func TestRedisEvictionPolicyFromInfo(t *testing.T) {
	kaddr, _ := testkit.StartKafka(t, 1, "orders.delay", "orders")
	t.Run("info", func(t *testing.T) {
		r := testkit.StartRedis(t, "--maxmemory-policy", "volatile-lru", "--rename-command", "CONFIG", "")
		cfg, admin := writeConfig(t, r.Addr(), kaddr, kafkaRoute, "")
		p := launchBridge(t, cfg, admin)
		code, detail := waitCheck(t, p, "eviction", false, "volatile-lru", 30*time.Second)
		if code != 503 || !strings.Contains(detail, "volatile-lru") || !strings.Contains(detail, r.Addr()) {
			t.Errorf("/readyz %d, eviction check %q: want 503 naming volatile-lru on %s", code, detail, r.Addr())
		}
		if v := policySeries(p, r.Addr(), "volatile-lru"); len(v) != 1 {
			t.Errorf("redis_maxmemory_policy{policy=volatile-lru} = %v, want [1]", v)
		}
	})
	t.Run("unknown", func(t *testing.T) {
		r := testkit.StartRedis(t, "--rename-command", "CONFIG", "", "--rename-command", "INFO", "")
		cfg, admin := writeConfig(t, r.Addr(), kaddr, kafkaRoute, "")
		p := startBridge(t, cfg, admin)
		stayReady(t, p, time.Second)
		if n := strings.Count(p.logs(), "cannot read Redis's maxmemory-policy"); n != 1 || !logHas(p, "level=WARN", "node="+r.Addr()) {
			t.Errorf("%d warnings about the unreadable policy, want 1:\n%s", n, p.logs())
		}
		if v := policySeries(p, r.Addr(), "unknown"); len(v) != 1 {
			t.Errorf("redis_maxmemory_policy{policy=unknown} = %v, want [1]", v)
		}
	})
}

// TestRedisClusterEvictionPolicyNamesNode: on Redis Cluster every master is checked;
// one with an evicting policy makes the bridge not ready naming that node only.
func TestRedisClusterEvictionPolicyNamesNode(t *testing.T) {
	c := testkit.StartRedisCluster(t, 3)
	bad := c.Nodes[1]
	if err := bad.Client().ConfigSet(context.Background(), "maxmemory-policy", "allkeys-random").Err(); err != nil {
		t.Fatal(err)
	}
	kaddr, _ := testkit.StartKafka(t, 1, "orders.delay", "orders")
	cfg, admin := writeConfigRedis(t, redisSection(c.Addrs(), ""), kaddr, kafkaRoute, "")
	p := launchBridge(t, cfg, admin)
	code, detail := waitCheck(t, p, "eviction", false, "allkeys-random", 30*time.Second)
	if code != 503 || !strings.Contains(detail, "allkeys-random on "+bad.Addr()) {
		t.Errorf("/readyz %d, eviction check %q: want 503 naming allkeys-random on %s", code, detail, bad.Addr())
	}
	for _, n := range []*testkit.Redis{c.Nodes[0], c.Nodes[2]} {
		if strings.Contains(detail, n.Addr()) {
			t.Errorf("eviction check %q names %s, whose policy is noeviction", detail, n.Addr())
		}
		if v := policySeries(p, n.Addr(), "noeviction"); len(v) != 1 {
			t.Errorf("redis_maxmemory_policy{node=%s,policy=noeviction} = %v, want [1]", n.Addr(), v)
		}
	}
	if err := bad.Client().ConfigSet(context.Background(), "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	p.waitReady(10 * time.Second)
}

// TestRedisFullFailsStoreCheck: under a stream of messages, Redis (noeviction) gets a
// maxmemory below what it holds: parks are refused with OOM, /readyz fails "store"
// naming OOM, redis_oom_refusals_total rises and an error line says so. Raising
// maxmemory brings readiness back (an info line); every message is delivered, none
// early.
func TestRedisFullFailsStoreCheck(t *testing.T) {
	e := startKafkaEnv(t, "")
	rc := e.redis.Client()
	ctx := context.Background()
	if v := e.bridge.series("redis_oom_refusals_total"); len(v) != 1 || v[0] != 0 {
		t.Fatalf("redis_oom_refusals_total = %v before any refusal, want [0]", v)
	}
	var mu sync.Mutex
	sentMsgs := map[string]sent{}
	stop := make(chan struct{})
	streamed := make(chan struct{})
	var stopOnce sync.Once
	halt := func() { stopOnce.Do(func() { close(stop) }); <-streamed }
	t.Cleanup(halt) // before the writer closes (cleanups run last-in first-out)
	// 20 messages every 50 ms, delays 0.5-2.5 s.
	go func() {
		defer close(streamed)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			msgs := make([]kafka.Message, 0, 20)
			now := time.Now().Truncate(time.Millisecond)
			mu.Lock()
			for j := 0; j < 20; j++ {
				s := sent{id: fmt.Sprintf("s%d-%d", i, j), key: fmt.Sprint("k", j), delay: time.Duration(500+100*j) * time.Millisecond, at: now}
				s.value = "payload " + s.id
				sentMsgs[s.id] = s
				msgs = append(msgs, kafka.Message{Key: []byte(s.key), Value: []byte(s.value), Time: now, Headers: []kafka.Header{
					{Key: "x-delay", Value: []byte(fmt.Sprint(s.delay.Milliseconds()))}, {Key: "x-message-id", Value: []byte(s.id)}}})
			}
			mu.Unlock()
			if err := e.writer.WriteMessages(context.Background(), msgs...); err != nil {
				t.Errorf("produce: %v", err)
				mu.Lock()
				for _, m := range msgs {
					delete(sentMsgs, string(m.Headers[1].Value))
				}
				mu.Unlock()
				return
			}
		}
	}()
	time.Sleep(time.Second)
	used := memoryField(t, rc, "used_memory")
	if err := rc.ConfigSet(ctx, "maxmemory", fmt.Sprint(used*9/10)).Err(); err != nil {
		t.Fatal(err)
	}
	code, detail := waitCheck(t, e.bridge, "store", false, "OOM", 15*time.Second)
	if code != 503 || !strings.Contains(detail, "OOM") || !strings.Contains(detail, e.redis.Addr()) {
		t.Errorf("/readyz %d, store check %q: want 503 naming OOM on %s", code, detail, e.redis.Addr())
	}
	first := metricSum(t, e.bridge, "redis_oom_refusals_total")
	time.Sleep(2 * time.Second)
	if later := metricSum(t, e.bridge, "redis_oom_refusals_total"); first <= 0 || later <= first {
		t.Errorf("redis_oom_refusals_total %v then %v while Redis is full, want rising", first, later)
	}
	if !logHas(e.bridge, "level=ERROR", "Redis is out of memory", "node="+e.redis.Addr()) {
		t.Errorf("no error line for the full Redis:\n%s", e.bridge.logs())
	}
	if err := rc.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	waitCheck(t, e.bridge, "store", true, "", 10*time.Second)
	e.bridge.waitReady(10 * time.Second)
	if !logHas(e.bridge, "level=INFO", "Redis accepts writes again") {
		t.Errorf("no info line when Redis accepts writes again:\n%s", e.bridge.logs())
	}
	time.Sleep(500 * time.Millisecond)
	halt()
	mu.Lock()
	defer mu.Unlock()
	waitAllArrived(t, e.target, sentMsgs, 60*time.Second)
	dups := ledger(t, sentMsgs, e.target.snapshot(), "orders.delay")
	t.Logf("%d messages, %.0f OOM refusals, %d duplicates", len(sentMsgs), metricSum(t, e.bridge, "redis_oom_refusals_total"), dups)
}

func memoryField(t *testing.T, rc *redis.Client, name string) int64 {
	t.Helper()
	info, err := rc.Info(context.Background(), "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			var n int64
			if _, err := fmt.Sscan(v, &n); err == nil {
				return n
			}
		}
	}
	t.Fatalf("INFO memory has no %s:\n%s", name, info)
	return 0
}

// logHas reports whether one line of the bridge's log contains every one of parts.
func logHas(p *bridgeProc, parts ...string) bool {
	for _, line := range strings.Split(p.logs(), "\n") {
		all := true
		for _, s := range parts {
			all = all && strings.Contains(line, s)
		}
		if all {
			return true
		}
	}
	return false
}
