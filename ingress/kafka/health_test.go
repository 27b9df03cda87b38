package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/delaybridge/delay-bridge/ingress"
	kafkain "github.com/delaybridge/delay-bridge/ingress/kafka"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/internal/testkit"
)

// stateObserver records the ingress events a source reports.
type stateObserver struct {
	observe.Nop
	mu        sync.Mutex
	consuming []bool
	lags      []int64
}

func (o *stateObserver) IngressConsuming(_ string, c bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.consuming = append(o.consuming, c)
}

func (o *stateObserver) IngressLag(_ string, n int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.lags = append(o.lags, n)
}

func (o *stateObserver) events() ([]bool, []int64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.consuming), slices.Clone(o.lags)
}

// healthEnv is one topic on a kfake cluster and a source with a short stall timeout.
type healthEnv struct {
	topic string
	kc    *kfake.Cluster
	src   *kafkain.Source
	obs   *stateObserver
	logs  *testkit.Buffer
	// seen counts handler deliveries per record id; fail makes the handler fail.
	mu   sync.Mutex
	seen map[string]int
	fail atomic.Bool
	// states records every state Health reported (polled by watchStates).
	states []string
}

func newHealthEnv(t *testing.T, partitions int) *healthEnv {
	t.Helper()
	return newHealthEnvStall(t, partitions, time.Second)
}

// newHealthEnvStall is newHealthEnv with another stall timeout.
func newHealthEnvStall(t *testing.T, partitions int, stall time.Duration) *healthEnv {
	t.Helper()
	e := &healthEnv{topic: testkit.Uniq(t, "delay"), obs: &stateObserver{}, logs: &testkit.Buffer{}, seen: map[string]int{}}
	var addr string
	addr, e.kc = testkit.StartKafka(t, partitions, e.topic)
	cfg := conf([]string{addr}, testkit.Uniq(t, "group"), e.topic)
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg.Logger, cfg.Observer, cfg.StallTimeout = log, e.obs, stall
	src, err := kafkain.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	e.src = src
	if h := src.Health(); h.State != ingress.StateStarting || h.Lag != -1 {
		t.Errorf("before Run: %+v, want starting with lag -1", h)
	}
	return e
}

// run starts the source and the state recorder; both stop when the test ends.
func (e *healthEnv) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- e.src.Run(ctx, func(_ context.Context, items []ingress.Item) error {
			if e.fail.Load() {
				return errors.New("redis down (test)")
			}
			e.mu.Lock()
			defer e.mu.Unlock()
			for _, it := range items {
				e.seen[it.Env.ID]++
			}
			return nil
		})
	}()
	stopStates := make(chan struct{})
	statesDone := make(chan struct{})
	go func() {
		defer close(statesDone)
		for {
			st := e.src.Health().State
			e.mu.Lock()
			if n := len(e.states); n == 0 || e.states[n-1] != st {
				e.states = append(e.states, st)
			}
			e.mu.Unlock()
			select {
			case <-stopStates:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
		close(stopStates)
		<-statesDone
		if h := e.src.Health(); h.State != ingress.StateStopped {
			t.Errorf("after Run returned: state %q, want stopped", h.State)
		}
		if t.Failed() {
			t.Logf("source log:\n%s", e.logs.String())
		}
	})
}

func (e *healthEnv) produce(t *testing.T, n, partitions int, prefix string) {
	t.Helper()
	cl := producer(t, e.kc.ListenAddrs()[0])
	for i := 0; i < n; i++ {
		rec := fmt.Sprintf("%s-%d", prefix, i)
		produceTo(t, cl, e.topic, int32(i%partitions), rec)
	}
}

func (e *healthEnv) unique() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.seen)
}

func (e *healthEnv) sawState(st string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Contains(e.states, st)
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 60s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHealthConsumingPartitionsLagAndHandlerOutage: a consuming source reports its
// assigned partitions and its lag; while the handler fails (Redis down) the lag is the
// records it holds back, and the source is neither stalled nor rebuilt (a new reader
// would not help); once the handler recovers the lag drains to 0.
func TestHealthConsumingPartitionsLagAndHandlerOutage(t *testing.T) {
	e := newHealthEnv(t, 3)
	e.fail.Store(true)
	e.produce(t, 30, 3, "m")
	e.run(t)
	waitFor(t, "consuming with all 3 partitions and lag 30", func() bool {
		h := e.src.Health()
		return h.State == ingress.StateConsuming && slices.Equal(h.Partitions, []int{0, 1, 2}) && h.Lag == 30
	})
	time.Sleep(3 * time.Second) // three stall timeouts with the handler failing
	if h := e.src.Health(); h.State != ingress.StateConsuming || h.Rebuilds != 0 {
		t.Errorf("with the handler failing: %+v, want consuming and no rebuild", h)
	}
	e.fail.Store(false)
	waitFor(t, "every record handled and lag 0", func() bool {
		return e.unique() == 30 && e.src.Health().Lag == 0
	})
	consuming, lags := e.obs.events()
	if len(consuming) == 0 || consuming[0] || !consuming[len(consuming)-1] {
		t.Errorf("IngressConsuming events %v: want false first (starting), true last", consuming)
	}
	if !slices.Contains(lags, 30) || lags[len(lags)-1] != 0 {
		t.Errorf("IngressLag events %v: want 30 while held back, 0 at the end", lags)
	}
	if !strings.Contains(e.logs.String(), `state=consuming was=starting partitions="[0 1 2]"`) {
		t.Errorf("no info line for the change to consuming:\n%s", e.logs.String())
	}
}

// TestWatchdogRebuildsReaderThatCannotJoin: the broker refuses every JoinGroup until
// the watchdog rebuilt the reader (kafka-go would retry forever on its own); the source
// reports it is not consuming meanwhile, then the new reader joins and consumes all.
func TestWatchdogRebuildsReaderThatCannotJoin(t *testing.T) {
	e := newHealthEnv(t, 2)
	e.kc.ControlKey(kmsg.JoinGroup.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		if e.src.Health().Rebuilds > 0 {
			e.kc.DropControl()
			return nil, nil, false
		}
		e.kc.KeepControl()
		return nil, errors.New("join refused (test)"), true // the connection is closed
	})
	e.produce(t, 20, 2, "j")
	e.run(t)
	waitFor(t, "every record handled after a rebuild", func() bool { return e.unique() == 20 })
	h := e.src.Health()
	if h.Rebuilds < 1 || h.State != ingress.StateConsuming {
		t.Errorf("after healing: %+v, want consuming after at least one rebuild", h)
	}
	if !e.sawState(ingress.StateStarting) || e.sawState(ingress.StateStalled) {
		t.Errorf("states %v: want starting (not joined) before consuming, never stalled", e.states)
	}
	if !strings.Contains(e.logs.String(), "kafka ingress watchdog: rebuilding the consumer") ||
		!strings.Contains(e.logs.String(), "not joined to the consumer group") {
		t.Errorf("no info line for the rebuild and its reason:\n%s", e.logs.String())
	}
}

// TestWatchdogRebuildsReaderWhoseCommitsHang: after the reader joined, the broker stops
// answering offset commits (as a coordinator connection stuck after a rebalance does):
// records are fetched and handled but never committed. The source turns stalled, the
// watchdog rebuilds the reader, and the records are consumed again and committed (the
// handler sees some twice: parking is idempotent).
func TestWatchdogRebuildsReaderWhoseCommitsHang(t *testing.T) {
	e := newHealthEnv(t, 1)
	e.run(t)
	waitFor(t, "consuming", func() bool { return e.src.Health().State == ingress.StateConsuming })
	e.kc.ControlKey(kmsg.OffsetCommit.Int16(), func(kmsg.Request) (kmsg.Response, error, bool) {
		if e.src.Health().Rebuilds > 0 {
			e.kc.DropControl()
			return nil, nil, false
		}
		e.kc.KeepControl()
		return nil, nil, true // no answer: the commit hangs until its deadline
	})
	e.produce(t, 50, 1, "c")
	waitFor(t, "stalled, then rebuilt and committed (lag 0)", func() bool {
		h := e.src.Health()
		return h.Rebuilds > 0 && h.State == ingress.StateConsuming && h.Lag == 0 && e.unique() == 50
	})
	if !e.sawState(ingress.StateStalled) {
		t.Errorf("states %v: never stalled while commits hung", e.states)
	}
	logs := e.logs.String()
	if !strings.Contains(logs, "offset commit failed") || !strings.Contains(logs, "ingress_state=") {
		t.Errorf("the failed commit is not logged with the ingress state:\n%s", logs)
	}
	if !strings.Contains(logs, "no progress for") {
		t.Errorf("the rebuild reason does not say the consumer made no progress:\n%s", logs)
	}
}

// produceTo writes one record with x-message-id id to partition.
func produceTo(t *testing.T, cl *kgo.Client, topic string, partition int32, id string) {
	t.Helper()
	rec := &kgo.Record{Topic: topic, Partition: partition, Value: []byte("payload " + id),
		Headers: []kgo.RecordHeader{{Key: "x-message-id", Value: []byte(id)}, {Key: "x-delay", Value: []byte("1000")}}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatalf("produce to %s/%d: %v", topic, partition, err)
	}
}

// TestHealthReportsPartitionStuckAtAnotherMember: another member of the group (a plain
// kafka-go reader that never hands out or commits a record) holds a partition with lag.
// The source cannot fetch it, but reports stalled naming that partition and rebuilds its
// reader to force a rebalance; once the other member is gone it consumes every record.
func TestHealthReportsPartitionStuckAtAnotherMember(t *testing.T) {
	e := newHealthEnv(t, 2)
	e.run(t)
	waitFor(t, "consuming both partitions", func() bool {
		h := e.src.Health()
		return h.State == ingress.StateConsuming && len(h.Partitions) == 2
	})
	ghost := kafka.NewReader(kafka.ReaderConfig{Brokers: e.kc.ListenAddrs(), GroupID: e.src.GroupID(), Topic: e.topic,
		MaxWait: 5 * time.Millisecond, CommitInterval: 0})
	ghostClosed := false
	closeGhost := func() {
		if !ghostClosed {
			ghostClosed = true
			_ = ghost.Close()
		}
	}
	t.Cleanup(closeGhost)
	var ghostPart int32
	waitFor(t, "the group split between the source and the other member", func() bool {
		h := e.src.Health()
		if h.State != ingress.StateConsuming || len(h.Partitions) != 1 {
			return false
		}
		ghostPart = int32(1 - h.Partitions[0])
		return true
	})
	cl := producer(t, e.kc.ListenAddrs()[0])
	for i := range 10 {
		produceTo(t, cl, e.topic, ghostPart, fmt.Sprintf("g-%d", i))
	}
	want := fmt.Sprintf("state=stalled was=consuming partitions=[%d] lag=0", 1-ghostPart)
	waitFor(t, "stalled on the other member's partition, and a rebuild", func() bool {
		return strings.Contains(e.logs.String(), want) && e.src.Health().Rebuilds > 0
	})
	if logs := e.logs.String(); !strings.Contains(logs, fmt.Sprintf("partition %d (assigned to another member) has 10 records of lag", ghostPart)) {
		t.Errorf("the stalled state does not name the other member's partition:\n%s", logs)
	}
	closeGhost()
	waitFor(t, "every record handled once the other member left", func() bool { return e.unique() == 10 })
}
