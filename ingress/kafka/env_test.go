package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delay-bridge/ingress"
	kafkain "github.com/delaybridge/delay-bridge/ingress/kafka"
	"github.com/delaybridge/delay-bridge/internal/kafkaconn"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/membership"
	"github.com/delaybridge/delay-bridge/testkit"
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

// env is a Kafka cluster (kfake, in process) with one delay topic, a real redis-server
// holding the bridge's membership, and the records every source handed over.
type env struct {
	topic, group, cluster string
	kc                    *kfake.Cluster
	redis                 *testkit.Redis
	rdb                   *redis.Client
	logs                  *testkit.Buffer
	stall                 time.Duration
	// nextBlock, when set, becomes the block channel of the next runner started.
	nextBlock chan struct{}

	mu   sync.Mutex
	seen map[string]int            // handler deliveries per record id, all sources
	by   map[string]map[string]int // per instance
	fail atomic.Bool
}

func newEnv(t *testing.T, partitions int) *env {
	t.Helper()
	e := &env{topic: testkit.Uniq(t, "delay"), group: testkit.Uniq(t, "group"), cluster: testkit.Uniq(t, "c"),
		logs: &testkit.Buffer{}, seen: map[string]int{}, by: map[string]map[string]int{}, stall: time.Minute}
	_, e.kc = testkit.StartKafka(t, partitions, e.topic)
	e.redis = testkit.StartRedis(t)
	e.rdb = e.redis.Client()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sources' log:\n%s", e.logs.String())
		}
	})
	return e
}

func (e *env) addr() string { return e.kc.ListenAddrs()[0] }

// config is instance's source; its membership uses rdb (the env's client when nil).
func (e *env) config(instance string, rdb redis.UniversalClient) kafkain.Config {
	if rdb == nil {
		rdb = e.rdb
	}
	log := slog.New(slog.NewTextHandler(e.logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("instance", instance)
	return kafkain.Config{
		Conn: kafkaconn.Config{Brokers: []string{e.addr()}}, GroupID: e.group, Topic: e.topic,
		Rules:      ingress.Rules{Route: "r", MaxDelay: 8760 * time.Hour, MaxPayloadBytes: 1 << 20},
		Membership: membership.New(rdb, "kt", e.cluster), Instance: instance, LeaseTTL: time.Second,
		StallTimeout: e.stall, Logger: log,
	}
}

// runner is one running source.
type runner struct {
	name   string
	src    *kafkain.Source
	obs    *stateObserver
	cancel context.CancelFunc
	done   chan error
	// block, when set, is waited for by the handler before it records a batch.
	block    chan struct{}
	calls    atomic.Int64
	returned atomic.Int64 // handler calls that returned

	mu     sync.Mutex
	states []string
}

// start runs a source for instance (with cfg changed by edit, if any) until the test
// ends or stop is called.
func (e *env) start(t *testing.T, instance string, edit func(*kafkain.Config)) *runner {
	t.Helper()
	cfg := e.config(instance, nil)
	r := &runner{name: instance, obs: &stateObserver{}, done: make(chan error, 1), block: e.nextBlock}
	e.nextBlock = nil
	cfg.Observer = r.obs
	if edit != nil {
		edit(&cfg)
	}
	src, err := kafkain.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	r.src = src
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() {
		r.done <- src.Run(ctx, func(ctx context.Context, items []ingress.Item) error {
			r.calls.Add(1)
			defer r.returned.Add(1)
			if r.block != nil {
				select {
				case <-r.block:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			if e.fail.Load() {
				return errors.New("redis down (test)")
			}
			e.mu.Lock()
			defer e.mu.Unlock()
			if e.by[instance] == nil {
				e.by[instance] = map[string]int{}
			}
			for _, it := range items {
				e.seen[it.Env.ID]++
				e.by[instance][it.Env.ID]++
			}
			return nil
		})
	}()
	stopStates := make(chan struct{})
	statesDone := make(chan struct{})
	go func() {
		defer close(statesDone)
		for {
			st := src.Health().State
			r.mu.Lock()
			if n := len(r.states); n == 0 || r.states[n-1] != st {
				r.states = append(r.states, st)
			}
			r.mu.Unlock()
			select {
			case <-stopStates:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() {
		r.stop(t)
		close(stopStates)
		<-statesDone
	})
	return r
}

// stop cancels the source and waits for Run (once).
func (r *runner) stop(t *testing.T) {
	t.Helper()
	r.cancel()
	select {
	case err, ok := <-r.done:
		if ok && err != nil {
			t.Errorf("%s: Run: %v", r.name, err)
		}
		if ok {
			close(r.done)
		}
	case <-time.After(30 * time.Second):
		t.Errorf("%s: Run did not return after cancel", r.name)
	}
}

func (r *runner) sawState(st string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Contains(r.states, st)
}

// produce writes n records with ids prefix-i, round-robin over partitions.
func (e *env) produce(t *testing.T, n, partitions int, prefix string) {
	t.Helper()
	cl := producer(t, e.addr())
	for i := 0; i < n; i++ {
		produceTo(t, cl, e.topic, int32(i%partitions), fmt.Sprintf("%s-%d", prefix, i))
	}
}

func (e *env) unique() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.seen)
}

// handledBy returns how many distinct ids instance handled.
func (e *env) handledBy(instance string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.by[instance])
}

// client is a kafka-go admin client of the env's cluster.
func (e *env) client(t *testing.T) *kafka.Client {
	t.Helper()
	tr := &kafka.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &kafka.Client{Addr: kafka.TCP(e.addr()), Transport: tr, Timeout: 10 * time.Second}
}

// committed returns the group's committed offset per partition (-1: none).
func (e *env) committed(t *testing.T, partitions int) []int64 {
	t.Helper()
	ps := make([]int, partitions)
	for i := range ps {
		ps[i] = i
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := e.client(t).OffsetFetch(ctx, &kafka.OffsetFetchRequest{GroupID: e.group, Topics: map[string][]int{e.topic: ps}})
	if err != nil {
		t.Fatalf("offset fetch: %v", err)
	}
	out := make([]int64, partitions)
	for i := range out {
		out[i] = -1
	}
	for _, p := range res.Topics[e.topic] {
		if p.Partition < partitions && p.Error == nil {
			out[p.Partition] = p.CommittedOffset
		}
	}
	return out
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
