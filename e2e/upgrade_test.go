package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/testkit"
)

// Rolling upgrades through the built binaries of two versions: the previous release
// (release_test.go builds it from git) and this tree. The bridges of one cluster are
// replaced one at a time, the way a Kubernetes Deployment rolls with maxSurge 1, while
// messages parked by the old version wait far ahead and new ones keep arriving. A
// ledger judges what reached the target: every message arrived, none before its due
// time, none twice (SIGTERM) or twice only with the same x-message-id inside a kill
// window (SIGKILL); lateness is logged.

// upgradeRig is one bridge cluster during an upgrade: the HA harness's Redis, lease
// TTL, ownership view, bridges by instance (stopped ones too) and duplicate attribution
// (haCluster), with each bridge started from a given release on the scenario's route.
type upgradeRig struct {
	*haCluster
	routes   string             // the YAML list under routes:
	source   string             // the x-delay-source every arrival must carry
	send     func([]sent) error // produces to the route's source
	arrivals func() []arrival   // what the route's target received so far
	live     []string           // running instances, in start order
	rels     map[string]release // the release each instance runs
}

func newUpgradeRig(c *haCluster, routes, source string, send func([]sent) error, arrivals func() []arrival) *upgradeRig {
	return &upgradeRig{haCluster: c, routes: routes, source: source, send: send, arrivals: arrivals,
		rels: map[string]release{}}
}

// releaseConfig writes instance's configuration in rel's format.
func (u *upgradeRig) releaseConfig(rel release, instance string) (path, admin string) {
	u.t.Helper()
	admin = "127.0.0.1:" + strconv.Itoa(testkit.FreePort(u.t))
	cfg := fmt.Sprintf(`cluster: upgrade
shards: %d
instance: %s
redis: { addrs: ["%s"] }
kafka: { brokers: ["%s"], group_id: %s }
amqp: { url: "%s", prefetch: 200 }
scheduler: { lookahead: %s, lease_ttl: %s, safety_scan: 200ms, cold_horizon: 5s }
retry: { max_attempts: 5, backoff: { initial: 100ms, max: 500ms } }
admin: { listen: "%s" }
log: { level: info, format: text }
routes:
%s
`, haShards, instance, strings.Join(u.redis, `", "`), u.kaddr, u.group, testkit.AMQPURL(), u.leaseTTL/2, u.leaseTTL, admin, u.routes)
	path = filepath.Join(u.t.TempDir(), instance+".yaml")
	if err := os.WriteFile(path, []byte(rel.adapt(cfg)), 0o600); err != nil {
		u.t.Fatal(err)
	}
	return path, admin
}

// launch starts instance from rel without waiting for it to be ready.
func (u *upgradeRig) launch(rel release, instance string) {
	u.t.Helper()
	cfg, admin := u.releaseConfig(rel, instance)
	p := newBridge(u.t, rel.argv(cfg), cfg, admin)
	p.launch()
	u.procs[instance], u.rels[instance] = p, rel
	u.live = append(u.live, instance)
}

// ready waits until instance answers /readyz 200 and checks it runs its release.
func (u *upgradeRig) ready(instance string) {
	u.t.Helper()
	p := u.procs[instance]
	p.waitReady(60 * time.Second) // race-enabled binaries, several at once on 2 cores
	checkRelease(u.t, p, u.rels[instance])
}

// start runs instance from rel and waits until it is ready.
func (u *upgradeRig) start(rel release, instance string) {
	u.t.Helper()
	u.launch(rel, instance)
	u.ready(instance)
}

// leave stops instance: SIGTERM and wait for its exit, or SIGKILL.
func (u *upgradeRig) leave(instance string, kill bool) {
	u.t.Helper()
	if kill {
		u.procs[instance].kill()
	} else {
		u.procs[instance].stop()
	}
	u.live = slices.DeleteFunc(u.live, func(s string) bool { return s == instance })
}

// balanced waits until the live instances own the shards evenly and returns how long.
func (u *upgradeRig) balanced() time.Duration {
	u.t.Helper()
	return u.waitBalanced(u.procs[u.live[0]], 10*u.leaseTTL+20*time.Second, u.live...)
}

// roll replaces every running instance, oldest first, by one of rel: with kill false
// the replacement starts, the cluster rebalances over one more instance (maxSurge 1),
// then the old one gets SIGTERM; with kill true the old one is killed with SIGKILL
// while its replacement starts. After the first replacement the cluster holds the
// mixed state (one old and one new) for hold (mixed checks it). It returns the kill
// windows (the faults duplicates may fall in; none with kill false).
func (u *upgradeRig) roll(rel release, kill bool, hold time.Duration) []fault {
	u.t.Helper()
	var faults []fault
	olds := slices.Clone(u.live)
	for i, old := range olds {
		name := fmt.Sprintf("%s-%d", rel.name, i+1)
		began := time.Now()
		if kill {
			u.launch(rel, name)
			u.leave(old, true)
			u.ready(name)
		} else {
			u.start(rel, name)
			u.balanced()
			u.leave(old, false)
		}
		took := u.balanced()
		if kill {
			faults = append(faults, fault{what: "SIGKILL of " + old, start: began, end: time.Now()})
		}
		u.t.Logf("rolled %s -> %s in %s (last rebalance %s): shards %v", old, name,
			time.Since(began).Round(time.Millisecond), took.Round(time.Millisecond), countOwners(u.owners(u.procs[name])))
		if i == 0 && hold > 0 {
			u.mixed(hold)
		}
	}
	return faults
}

// mixed holds the current mixed-version cluster for hold: every live instance must own
// shards throughout, and each must both park (ingress) and publish (fire) messages
// meanwhile.
func (u *upgradeRig) mixed(hold time.Duration) {
	u.t.Helper()
	type counts struct{ parked, published float64 }
	read := func(instance string) counts {
		p := u.procs[instance]
		return counts{p.metric("messages_parked_total", `route="orders"`), p.metric("messages_published_total", `route="orders"`)}
	}
	before := map[string]counts{}
	for _, in := range u.live {
		before[in] = read(in)
	}
	end := time.Now().Add(hold)
	samples, without := 0, map[string]int{} // ownership samples; those where an instance owned none
	for time.Now().Before(end) {
		n := countOwners(u.owners(u.procs[u.live[len(u.live)-1]]))
		for _, in := range u.live {
			if n[in] == 0 {
				without[in]++
			}
		}
		samples++
		time.Sleep(250 * time.Millisecond)
	}
	for in, k := range without {
		u.t.Errorf("mixed versions: %s (%s) owned no shard in %d of %d ownership samples", in, u.rels[in].name, k, samples)
	}
	var report []string
	for _, in := range u.live {
		after := read(in)
		d := counts{after.parked - before[in].parked, after.published - before[in].published}
		switch {
		case d.parked <= 0 || d.published <= 0:
			u.t.Errorf("mixed versions: %s (%s) parked %.0f and published %.0f in %s; want both > 0", in, u.rels[in].name, d.parked, d.published, hold)
		}
		report = append(report, fmt.Sprintf("%s (%s): parked %.0f, published %.0f", in, u.rels[in].version, d.parked, d.published))
	}
	u.t.Logf("mixed versions for %s (%d ownership samples, all live instances owning shards): %s", hold, samples, strings.Join(report, "; "))
}

// stats is the totals of GET /v1/stats.
func (u *upgradeRig) stats() (pending, inflight, dead int64) {
	u.t.Helper()
	var st struct {
		Totals struct{ Pending, Inflight, Dead int64 }
	}
	if code := u.procs[u.live[0]].api("GET", "/v1/stats", nil, &st); code != 200 {
		u.t.Fatalf("GET /v1/stats: status %d", code)
	}
	return st.Totals.Pending, st.Totals.Inflight, st.Totals.Dead
}

// produce sends msgs through the rig in batches of 100 and returns them by id.
func (u *upgradeRig) produce(msgs []sent) map[string]sent {
	u.t.Helper()
	out := make(map[string]sent, len(msgs))
	for len(msgs) > 0 {
		b := msgs[:min(100, len(msgs))]
		if err := u.send(b); err != nil {
			u.t.Fatalf("produce: %v", err)
		}
		for _, m := range b {
			out[m.id] = m
		}
		msgs = msgs[len(b):]
	}
	return out
}

// upgradeScenario is the numbers of one rolling upgrade.
type upgradeScenario struct {
	far            int           // messages parked by the old release, due after the rollout
	farMin, farMax time.Duration // their delays
	rate           int           // the steady stream, msgs/s, delays nearMin..nearMax
	nearMin        time.Duration
	nearMax        time.Duration
	hold           time.Duration // the mixed-version phase
	kill           bool          // SIGKILL instead of SIGTERM
}

var defaultUpgrade = upgradeScenario{far: 400, farMin: 20 * time.Second, farMax: 40 * time.Second, rate: 100,
	nearMin: time.Second, nearMax: 5 * time.Second, hold: 6 * time.Second}

// run is one rolling upgrade from old to next with two bridges: both old ones park the
// far-ahead messages, the stream starts, the rollout replaces them, the stream runs a
// little longer into the new ones, then everything due is awaited and judged.
func (u *upgradeRig) run(old, next release, sc upgradeScenario) {
	u.t.Helper()
	t := u.t
	began := time.Now()
	u.start(old, "old-1")
	u.start(old, "old-2")
	u.balanced()
	farSent := u.parkFar(sc)
	feed := startFeed(t, u.send, "near", sc.rate, sc.nearMin, sc.nearMax)
	time.Sleep(2 * time.Second)

	rollStart := time.Now()
	faults := u.roll(next, sc.kill, sc.hold)
	rolled := time.Since(rollStart)
	farLeft := len(farSent) - len(arrivedOf(farSent, u.arrivals()))
	// Not a timing assertion but the test's premise: messages parked by the old release
	// still pending when the last old bridge leaves. The rollout takes 9-18 s on 2 shared
	// cores; delays of 20-40 s leave room for a machine about twice as slow.
	if farLeft < sc.far/10 {
		t.Errorf("only %d of %d far-ahead messages still pending when the last old bridge left (rollout took %s): "+
			"the test no longer covers messages parked by the old release and fired by the new one", farLeft, sc.far, rolled)
	}
	time.Sleep(2 * time.Second) // the stream into the new release alone
	coldSent := u.parkCold(old.coldTier)
	all := feed.finish(t)
	nearCount := len(all)
	for id, m := range farSent {
		all[id] = m
	}
	for id, m := range coldSent {
		all[id] = m
	}
	// Not fatal: on a timeout the ledger names what is missing.
	const grace = 45 * time.Second
	for deadline := rollStart.Add(sc.farMax + grace); len(arrivedOf(all, u.arrivals())) < len(all); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("%d of %d messages on the target %s after the last due time", len(arrivedOf(all, u.arrivals())), len(all), grace)
			break
		}
	}
	time.Sleep(time.Second) // room for a duplicate to show
	got := u.arrivals()
	dups := ledger(t, all, got, u.source)
	perKill := u.checkDuplicates(t, got, faults, 2*u.leaseTTL+time.Second)
	lost, early := len(all)-len(arrivedOf(all, got)), earlyCount(got)
	u.checkDrained()
	how := "SIGTERM"
	if sc.kill {
		how = "SIGKILL"
	}
	t.Logf("rolling upgrade %s -> %s (%s, lease_ttl %s): rollout %s with %d of %d far-ahead messages still pending when the last old bridge left; "+
		"%d messages (%d far, %d stream): lost %d, early %d, %d duplicates (per kill %v); test took %s",
		old.version, next.version, how, u.leaseTTL, rolled.Round(time.Millisecond), farLeft, sc.far, len(all), sc.far, nearCount,
		lost, early, dups, perKill, time.Since(began).Round(time.Second))
	t.Logf("lateness after due: %s; %s; %s", latenessLine(all, got, "far-"), latenessLine(all, got, "near-"), latenessLine(all, got, "cold-"))
}

// parkCold sends, once only new bridges are members, 200 messages due 8-15 s ahead:
// beyond the rig's cold_horizon (5s); the ledger judges them with the rest.
//
// From a release without the cold tier (oldCold false) they are the first cold messages
// of the store: the new release parks them in cold buckets (level 5), which the old one
// never saw, and the premise is that those buckets exist. From a release with the cold
// tier, the old bridges' far-ahead messages went cold already and their promotion
// advanced each shard's watermark past the bucket they were in (about 65 s buckets,
// promoted 30 s ahead: docs/ARCHITECTURE.md "The cold tier"), so these sooner ones are
// parked in due, as they must be; the premise is then that the tier was used in the
// test, by either release: its state hashes record a watermark.
func (u *upgradeRig) parkCold(oldCold bool) map[string]sent {
	u.t.Helper()
	time.Sleep(2 * u.leaseTTL) // the old bridges' heartbeats age out of the members
	msgs := make([]sent, 0, 200)
	for i := range 200 {
		msgs = append(msgs, newSent("cold", i, 8*time.Second+time.Duration(i)*35*time.Millisecond))
	}
	out := u.produce(msgs)
	rdb := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: u.redis})
	defer rdb.Close()
	ctx := context.Background()
	if !oldCold {
		// The premise, not a timing assertion: the new release used its cold tier.
		waitUntil(u.t, "cold-tier buckets in Redis", 20*time.Second, func() bool {
			keys, err := rdb.Keys(ctx, "*:cb:*").Result()
			return err == nil && len(keys) > 0
		})
		return out
	}
	waitUntil(u.t, "a cold-tier watermark in Redis", 20*time.Second, func() bool {
		keys, err := rdb.Keys(ctx, "*:cw").Result()
		if err != nil {
			return false
		}
		for _, k := range keys {
			if wm, err := rdb.HGet(ctx, k, "wm").Int64(); err == nil && wm > 0 {
				return true
			}
		}
		return false
	})
	return out
}

// parkFar sends the scenario's far-ahead messages (delays spread evenly over
// farMin..farMax) and waits until the running bridges parked them all.
func (u *upgradeRig) parkFar(sc upgradeScenario) map[string]sent {
	u.t.Helper()
	far := make([]sent, 0, sc.far)
	for i := range sc.far {
		d := sc.farMin + time.Duration(i)*(sc.farMax-sc.farMin)/time.Duration(sc.far)
		far = append(far, newSent("far", i, d))
	}
	farSent := u.produce(far)
	waitUntil(u.t, "the far-ahead messages parked", 30*time.Second, func() bool {
		p, f, _ := u.stats()
		return p+f >= int64(sc.far)
	})
	return farSent
}

// checkDrained fails the test unless nothing is left pending or in flight and no
// message was dead-lettered.
func (u *upgradeRig) checkDrained() {
	u.t.Helper()
	waitUntil(u.t, "nothing pending or in flight", 20*time.Second, func() bool {
		p, f, _ := u.stats()
		return p == 0 && f == 0
	})
	if _, _, dead := u.stats(); dead != 0 {
		u.t.Errorf("%d dead letters after the upgrade, want 0", dead)
	}
}

// arrivedOf returns the ids of sentMsgs that arrived at least once.
func arrivedOf(sentMsgs map[string]sent, got []arrival) map[string]bool {
	out := map[string]bool{}
	for _, a := range got {
		if id := a.headers["x-message-id"]; sentMsgs[id].id != "" {
			out[id] = true
		}
	}
	return out
}

// earlyCount counts, for the log, the arrivals before their x-delay-due-at (the ledger
// fails the test for each).
func earlyCount(got []arrival) int {
	n := 0
	for _, a := range got {
		if due, err := strconv.ParseInt(a.headers["x-delay-due-at"], 10, 64); err == nil && a.at.UnixMilli() < due {
			n++
		}
	}
	return n
}

// latenessLine summarises the first arrival's lateness of the messages whose id starts
// with prefix.
func latenessLine(sentMsgs map[string]sent, got []arrival, prefix string) string {
	var late []time.Duration
	for id, as := range arrivalsByID(got) {
		s, ok := sentMsgs[id]
		if !ok || !strings.HasPrefix(id, prefix) {
			continue
		}
		late = append(late, as[0].at.Sub(s.at.Add(s.delay)))
	}
	slices.Sort(late)
	r := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	return fmt.Sprintf("%s* (%d): p50 %s p99 %s max %s", prefix, len(late),
		r(percentile(late, 0.5)), r(percentile(late, 0.99)), r(percentile(late, 1)))
}

// kafkaUpgradeRig is the Kafka scenario: route orders from orders.delay (4 partitions,
// one consumer group) to orders, on kfake.
func kafkaUpgradeRig(t *testing.T) *upgradeRig {
	t.Helper()
	c := startHACluster(t, 4, haLeaseTTL(t))
	routes := "  - name: orders\n    from: { kafka: { topic: orders.delay } }\n    to:   { kafka: { topic: orders } }"
	u := newUpgradeRig(c, routes, "orders.delay", kafkaSender(c.writer), c.target.snapshot)
	return u
}

// amqpUpgradeRig is the RabbitMQ scenario: route orders from a topic delay exchange and
// its queue (consumed by every bridge) to a topic target exchange, names unique to
// the test.
func amqpUpgradeRig(t *testing.T) *upgradeRig {
	t.Helper()
	rb := newRabbit(t)
	target := rb.exchange("upgrade-target", "topic")
	got := rb.collect(rb.queue("upgrade-consumer", target, "#"))
	srcX, srcQ := testkit.Uniq(t, "upgrade-delayed"), testkit.Uniq(t, "upgrade-delay")
	// Registered before the bridges start: runs after they stopped.
	rb.drop([]string{srcX}, []string{srcQ})
	// No Kafka route: kafka.brokers is never dialed.
	c := &haCluster{t: t, redis: []string{testkit.StartRedis(t).Addr()}, kaddr: "127.0.0.1:9",
		group: testkit.Uniq(t, "group"), leaseTTL: haLeaseTTL(t), procs: map[string]*bridgeProc{}}
	routes := fmt.Sprintf("  - name: orders\n    from: %s\n    to:   { amqp: { exchange: %q } }", amqpFrom(srcQ, srcX, "topic"), target)
	pub := rb.publisher()
	send := func(batch []sent) error { return pub.send(srcX, batch) }
	arrivals := func() []arrival {
		var out []arrival
		for _, a := range got.snapshot() {
			h := map[string]string{}
			for k, v := range a.d.Headers {
				h[k] = fmt.Sprint(v)
			}
			out = append(out, arrival{key: a.d.RoutingKey, value: string(a.d.Body), headers: h, at: a.at})
		}
		return out
	}
	return newUpgradeRig(c, routes, srcQ, send, arrivals)
}

// send publishes batch to exchange (routing key = key, body = value, message id = id,
// x-delay in ms, timestamp = at) and waits for every confirm. AMQP timestamps have
// whole seconds: each message's at is truncated to the second first, so the bridge's
// due time is exactly at + delay.
func (p *publisher) send(exchange string, batch []sent) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dcs := make([]*amqp091.DeferredConfirmation, 0, len(batch))
	for i := range batch {
		m := &batch[i]
		m.at = m.at.Truncate(time.Second)
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, exchange, m.key, false, false, amqp091.Publishing{
			Headers: amqp091.Table{"x-delay": int32(m.delay.Milliseconds())}, MessageId: m.id, Timestamp: m.at,
			DeliveryMode: amqp091.Persistent, Body: []byte(m.value)})
		if err != nil {
			return fmt.Errorf("publish %s: %w", m.id, err)
		}
		dcs = append(dcs, dc)
	}
	for i, dc := range dcs {
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			return fmt.Errorf("publish %s: confirm %v %v", batch[i].id, ok, err)
		}
	}
	return nil
}

// TestRollingUpgradeKafka rolls two bridges on a Kafka route from the previous release
// to this tree with SIGTERM, one at a time with one extra instance during each step,
// holding one old and one new side by side for a while: 400 messages parked by the old
// release 20-40 s ahead and a stream of 100 msgs/s due in 1-5 s all arrive, none early,
// none twice (a duplicate fails unless a bridge logged a lease lapse near it).
func TestRollingUpgradeKafka(t *testing.T) {
	old := previousReleaseBuild(t)
	kafkaUpgradeRig(t).run(old, headRelease(), defaultUpgrade)
}

// TestRollingUpgradeAMQP is TestRollingUpgradeKafka on a RabbitMQ route (both bridges
// consume the delay queue; a stopped one's unacknowledged deliveries are redelivered to
// the other).
func TestRollingUpgradeAMQP(t *testing.T) {
	old := previousReleaseBuild(t)
	amqpUpgradeRig(t).run(old, headRelease(), defaultUpgrade)
}

// TestRollingUpgradeKilledKafka is the Kafka rolling upgrade where each old bridge is
// killed with SIGKILL as its replacement starts: nothing lost, nothing early;
// duplicates (a publish confirmed but not yet acknowledged in Redis) only inside a kill
// window, with the same x-message-id, key and payload. The killed consumer stalls its
// partitions until the group's session timeout: the lateness shows it.
func TestRollingUpgradeKilledKafka(t *testing.T) {
	old := previousReleaseBuild(t)
	sc := defaultUpgrade
	sc.kill = true
	kafkaUpgradeRig(t).run(old, headRelease(), sc)
}
