package kafka_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/delaybridge/delay-bridge/ingress"
	kafkain "github.com/delaybridge/delay-bridge/ingress/kafka"
	"github.com/delaybridge/delay-bridge/membership"
	"github.com/delaybridge/delay-bridge/testkit"
	"github.com/delaybridge/delay-bridge/testkit/tcpproxy"
)

// TestPartitionsSplitAndFailover: two sources of one route split four partitions two
// and two (rendezvous over the live members, one lease each), read every record once
// and commit every partition's end offset to the group (OffsetFetch sees it, as
// kafka-consumer-groups does). Then b dies without releasing anything (as with kill
// -9): a takes b's partitions once b's heartbeat aged out and its leases expired, with
// larger fencing tokens, resumes from b's committed offsets and reads every later
// record. The time the takeover took is logged, not asserted.
func TestPartitionsSplitAndFailover(t *testing.T) {
	const parts = 4
	e := newEnv(t, parts)
	a := e.start(t, "a", nil)
	b := e.start(t, "b", nil)
	e.produce(t, 40, parts, "one")
	waitFor(t, "40 records handled, the partitions split 2/2, both consuming", func() bool {
		ha, hb := a.src.Health(), b.src.Health()
		return e.unique() == 40 && len(ha.Partitions) == 2 && len(hb.Partitions) == 2 &&
			ha.State == ingress.StateConsuming && hb.State == ingress.StateConsuming
	})
	ha, hb := a.src.Health(), b.src.Health()
	if all := slices.Sorted(slices.Values(append(slices.Clone(ha.Partitions), hb.Partitions...))); !slices.Equal(all, []int{0, 1, 2, 3}) {
		t.Fatalf("partitions a %v b %v: want a split of 0..3", ha.Partitions, hb.Partitions)
	}
	waitFor(t, "the group's committed offsets at every partition's end", func() bool {
		return slices.Equal(e.committed(t, parts), []int64{10, 10, 10, 10})
	})
	if n := e.handledBy("a") + e.handledBy("b"); n != 40 {
		t.Errorf("a and b handled %d distinct ids together, want 40 (no partition read by both)", n)
	}
	tokens := map[int]string{}
	for _, p := range hb.Partitions {
		k := membership.PartitionLease("kt", e.cluster, "r", e.topic, p)
		tokens[p] = e.rdb.Get(context.Background(), k.Owner).Val()
	}

	kafkain.Abandon(b.src)
	b.stop(t)
	killed := time.Now()
	e.produce(t, 40, parts, "two")
	waitFor(t, "a owns all four partitions and handled every record", func() bool {
		return e.unique() == 80 && len(a.src.Health().Partitions) == 4
	})
	took := time.Since(killed)
	waitFor(t, "every partition committed to its end", func() bool {
		return slices.Equal(e.committed(t, parts), []int64{20, 20, 20, 20})
	})
	for p, old := range tokens {
		k := membership.PartitionLease("kt", e.cluster, "r", e.topic, p)
		now := e.rdb.Get(context.Background(), k.Owner).Val()
		if !strings.HasPrefix(now, kafkain.Holder(a.src)+"|") || fenceOf(now) <= fenceOf(old) {
			t.Errorf("partition %d: owner %q after failover (was %q): want a's holder with a larger token", p, now, old)
		}
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, n := range e.seen {
		if strings.HasPrefix(id, "two-") && n != 1 {
			t.Errorf("record %s handled %d times after the failover, want once (resumed from the committed offset)", id, n)
		}
	}
	t.Logf("failover: every record of the dead source's partitions handled %s after the kill (lease TTL 1s; includes producing 40 records)", took.Round(10*time.Millisecond))
}

func fenceOf(owner string) int {
	i := strings.LastIndexByte(owner, '|')
	var n int
	fmt.Sscan(owner[i+1:], &n)
	return n
}

// TestFencedOwnerCannotCommit: a owns the only partition and is parking a batch when it
// is cut off from Redis (a frozen connection: its renewals stop). Its lease expires; b
// takes the partition, reads from the committed offset (nothing yet), parks all ten
// records and commits 10. Then a comes back and its batch's park returns: a must not
// commit (its lease is gone), so the group's committed offset stays 10 rather than going
// back to a's batch end (5 at most), and a's handler is not called again for that
// tenure. (a, back among the live members, is the partition's rendezvous owner again:
// b hands it over and a takes it with a new token, resuming from 10.)
func TestFencedOwnerCannotCommit(t *testing.T) {
	e := newEnv(t, 1)
	e.produce(t, 5, 1, "r")
	proxy := tcpproxy.Start(t, e.redis.Addr())
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr, MaxRetries: -1, ReadTimeout: 500 * time.Millisecond, WriteTimeout: 500 * time.Millisecond})
	t.Cleanup(func() { viaProxy.Close() })
	release := make(chan struct{})
	e.nextBlock = release
	a := e.start(t, "a", func(c *kafkain.Config) { c.Membership = membership.New(viaProxy, "kt", e.cluster) })
	waitFor(t, "a's handler holding the first batch", func() bool { return a.calls.Load() > 0 })
	proxy.Freeze()
	e.start(t, "b", nil)
	waitFor(t, "b handled the five records", func() bool { return e.handledBy("b") == 5 })
	e.produce(t, 5, 1, "s")
	waitFor(t, "b committed 10", func() bool { return e.committed(t, 1)[0] == 10 })
	proxy.Thaw()
	close(release)
	waitFor(t, "a's held batch parked", func() bool { return a.returned.Load() == 1 })
	for range 20 { // a's commit would come now
		if c := e.committed(t, 1)[0]; c != 10 {
			t.Fatalf("committed offset %d after the fenced owner's park returned, want 10 (b's)", c)
		}
		time.Sleep(50 * time.Millisecond)
	}
	waitFor(t, "a's log says it committed nothing", func() bool { return strings.Contains(e.logs.String(), "nothing committed") })
	if n := a.calls.Load(); n != 1 {
		t.Errorf("a's handler was called %d times, want once (the batch it held when fenced; no retry, nothing after)", n)
	}
}

// TestNewPartitionsPickedUp: partitions added to the topic while the source runs are
// owned and read (metadata poll), without a restart.
func TestNewPartitionsPickedUp(t *testing.T) {
	e := newEnv(t, 1)
	a := e.start(t, "a", nil)
	waitFor(t, "a owns partition 0", func() bool { return slices.Equal(a.src.Health().Partitions, []int{0}) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := e.client(t).CreatePartitions(ctx, &kafka.CreatePartitionsRequest{Topics: []kafka.TopicPartitionsConfig{{Name: e.topic, Count: 3}}})
	if err != nil || res.Errors[e.topic] != nil {
		t.Fatalf("create partitions: %v %v", err, res)
	}
	e.produce(t, 9, 3, "p")
	waitFor(t, "all three partitions owned and every record handled", func() bool {
		return e.unique() == 9 && slices.Equal(a.src.Health().Partitions, []int{0, 1, 2})
	})
	waitFor(t, "every partition committed", func() bool { return slices.Equal(e.committed(t, 3), []int64{3, 3, 3}) })
}

// TestMissingTopicIsNotReady: a delay topic that does not exist (deleted, not created
// yet) is no silent idle: the route is unreachable, saying so, until the topic exists;
// then its partitions are owned and read.
func TestMissingTopicIsNotReady(t *testing.T) {
	e := newEnv(t, 1)
	e.topic = e.topic + "-later"
	a := e.start(t, "a", nil)
	waitFor(t, "unreachable: the topic does not exist", func() bool {
		h := a.src.Health()
		return h.State == ingress.StateUnreachable && strings.Contains(h.Detail, "does not exist")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := e.client(t).CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{Topic: e.topic, NumPartitions: 2, ReplicationFactor: 1}}})
	if err != nil || res.Errors[e.topic] != nil {
		t.Fatalf("create topic: %v %v", err, res)
	}
	e.produce(t, 4, 2, "m")
	waitFor(t, "consuming both partitions, every record handled", func() bool {
		h := a.src.Health()
		return e.unique() == 4 && h.State == ingress.StateConsuming && len(h.Partitions) == 2
	})
}

// TestIdleSourceConsumingAgainAfterOutage: a caught-up source on an idle topic sees
// its broker stop (its reader's reconnections fail) and another start on the same
// address; with no record to read, nothing but its own polls can tell that its reader
// is healthy again: it must turn consuming.
func TestIdleSourceConsumingAgainAfterOutage(t *testing.T) {
	topic := testkit.Uniq(t, "delay")
	port := testkit.FreePort(t)
	start := func() *kfake.Cluster {
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(1, topic))
		if err != nil {
			t.Fatalf("kfake: %v", err)
		}
		return c
	}
	c := start()
	cfg := conf(t, c.ListenAddrs(), testkit.Uniq(t, "g"), topic)
	src, err := kafkain.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- src.Run(ctx, func(context.Context, []ingress.Item) error { return nil }) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor(t, "consuming the idle partition", func() bool {
		h := src.Health()
		return h.State == ingress.StateConsuming && len(h.Partitions) == 1 && h.PartitionStates[0].State == ingress.PartitionFetching
	})
	c.Close()
	waitFor(t, "the partition unreachable", func() bool {
		h := src.Health()
		return len(h.PartitionStates) == 1 && h.PartitionStates[0].State == ingress.PartitionUnreachable
	})
	c = start()
	defer c.Close()
	waitFor(t, "consuming again with no record to read", func() bool {
		h := src.Health()
		return h.State == ingress.StateConsuming && len(h.PartitionStates) == 1 && h.PartitionStates[0].State == ingress.PartitionFetching
	})
}

// TestRestartUnderADeadNameHoldsOff: b dies without releasing anything (kill -9) and
// is restarted at once under the same name. The new b (membership.Admission) takes no
// partition until a has taken the dead b's over (its heartbeat aged out, its leases
// expired), then gets its share back by graceful handover, and every record is
// handled. Without the hold-off the new b would take its partitions back as their
// leases lapsed and a would never own them (in a crash loop, each incarnation took
// them and died before parking what it read).
func TestRestartUnderADeadNameHoldsOff(t *testing.T) {
	const parts = 4
	e := newEnv(t, parts)
	admit := func(c *kafkain.Config) { c.Admission = membership.NewAdmission(c.LeaseTTL) }
	a := e.start(t, "a", admit)
	b := e.start(t, "b", admit)
	waitFor(t, "the partitions split 2/2", func() bool {
		return len(a.src.Health().Partitions) == 2 && len(b.src.Health().Partitions) == 2
	})
	kafkain.Abandon(b.src)
	b.stop(t)
	b2 := e.start(t, "b", admit)
	e.produce(t, 40, parts, "after")
	aHadAll := false
	waitFor(t, "the new b reads its share and every record is handled", func() bool {
		nb := len(b2.src.Health().Partitions)
		if nb > 0 && !aHadAll {
			t.Fatalf("the new b took partitions %v before a had taken the dead b's over (a has %v)",
				b2.src.Health().Partitions, a.src.Health().Partitions)
		}
		if len(a.src.Health().Partitions) == parts {
			aHadAll = true
		}
		return nb == 2 && e.unique() == 40
	})
}
