package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	_ "net/http/pprof" // the kfake child serves pprof when profiling
	"os"
	"os/signal"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// Header names the bench adds to what it produces (they pass through the bridge).
const (
	hdrSentNs = "x-bench-sent-ns" // producer's clock when the message was built (unix ns)
	hdrClass  = "x-bench-class"   // "t" marks the burst scenario's trickle
)

// pprofKafka, when set (-profile), is where the kfake child serves net/http/pprof.
var pprofKafka string

// kafkaBroker is kfake, in this process or as a child (the bench binary re-executed with
// -child kfake), one broker, topics created explicitly.
type kafkaBroker struct {
	addr    string
	cluster *kfake.Cluster // in process
	proc    *child         // as a child
}

func startKafka(dir, mode string) (*kafkaBroker, error) {
	switch mode {
	case "inproc":
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(freePort()))
		if err != nil {
			return nil, fmt.Errorf("kfake: %w", err)
		}
		return &kafkaBroker{addr: c.ListenAddrs()[0], cluster: c}, nil
	case "child":
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		port := freePort()
		var envv []string
		if pprofKafka != "" {
			envv = append(envv, "BENCH_PPROF_ADDR="+pprofKafka)
		}
		p, err := startChild("kafka", dir, envv, self, "-child", "kfake", "-port", strconv.Itoa(port))
		if err != nil {
			return nil, err
		}
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		if err := waitTCP(addr, 10*time.Second); err != nil {
			p.kill()
			return nil, fmt.Errorf("kfake child: %w\n%s", err, p.tail(2000))
		}
		return &kafkaBroker{addr: addr, proc: p}, nil
	}
	return nil, fmt.Errorf("-kafka must be inproc or child, got %q", mode)
}

// pid is the process running the broker (this one when in process).
func (k *kafkaBroker) pid() int {
	if k.proc != nil {
		return k.proc.pid()
	}
	return os.Getpid()
}

func (k *kafkaBroker) close() {
	if k == nil {
		return
	}
	if k.cluster != nil {
		k.cluster.Close()
	}
	k.proc.kill()
}

// runKfakeChild is `bench -child kfake -port N`: serve until SIGTERM.
func runKfakeChild(port int) error {
	if addr := os.Getenv("BENCH_PPROF_ADDR"); addr != "" {
		go func() { _ = http.ListenAndServe(addr, nil) }()
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port))
	if err != nil {
		return err
	}
	defer c.Close()
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGTERM, os.Interrupt)
	<-ch
	return nil
}

// createTopics creates topics with the given partition count.
func createTopics(ctx context.Context, addr string, partitions int, topics ...string) error {
	cl := &kafka.Client{Addr: kafka.TCP(addr), Timeout: 10 * time.Second}
	req := &kafka.CreateTopicsRequest{}
	for _, t := range topics {
		req.Topics = append(req.Topics, kafka.TopicConfig{Topic: t, NumPartitions: partitions, ReplicationFactor: 1})
	}
	res, err := cl.CreateTopics(ctx, req)
	if err != nil {
		return fmt.Errorf("create topics %v: %w", topics, err)
	}
	for t, e := range res.Errors {
		if e != nil && !errors.Is(e, kafka.TopicAlreadyExists) {
			return fmt.Errorf("create topic %s: %w", t, e)
		}
	}
	return nil
}

// newWriter is a producer with the docs/CONTRACT.md §8 settings: acks=all, 1ms linger, murmur2.
func newWriter(addr, topic string) *kafka.Writer {
	return &kafka.Writer{
		Addr: kafka.TCP(addr), Topic: topic, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, BatchSize: 1000, BatchBytes: 16 << 20,
		Balancer: &kafka.Murmur2Balancer{}, Transport: &kafka.Transport{},
	}
}

// paceResult is what a paced producer achieved.
type paceResult struct {
	Sent     int           `json:"sent"`
	Duration time.Duration `json:"duration_ns"`
	Rate     float64       `json:"rate"` // achieved msgs/s
}

// pace produces at rate msgs/s for dur (or count messages when count > 0, as fast as
// rate allows; rate <= 0 means as fast as possible). gen builds message i. Writes are
// batched per 5 ms tick and issued by up to 16 concurrent WriteMessages calls; when all
// are busy the producer falls behind and the achieved rate says so.
func pace(ctx context.Context, w *kafka.Writer, rate float64, dur time.Duration, count int, gen func(i int, now time.Time) kafka.Message) (paceResult, error) {
	const tick = 5 * time.Millisecond
	const maxBatch = 2000
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	var firstErr atomic.Pointer[error]
	start := time.Now()
	sent := 0
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		if ctx.Err() != nil {
			break
		}
		now := time.Now()
		elapsed := now.Sub(start)
		if count <= 0 && elapsed >= dur {
			break
		}
		if count > 0 && sent >= count {
			break
		}
		want := maxBatch
		if rate > 0 {
			want = int(rate*elapsed.Seconds()) - sent
			if count <= 0 {
				want = min(want, int(rate*dur.Seconds())-sent)
			}
		}
		if count > 0 {
			want = min(want, count-sent)
		}
		for want > 0 {
			n := min(want, maxBatch)
			msgs := make([]kafka.Message, n)
			for j := range msgs {
				msgs[j] = gen(sent+j, now)
			}
			sem <- struct{}{}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				if err := w.WriteMessages(ctx, msgs...); err != nil && ctx.Err() == nil {
					firstErr.CompareAndSwap(nil, &err)
				}
			}()
			sent += n
			want -= n
			now = time.Now()
		}
		if rate > 0 {
			<-t.C
		}
	}
	wg.Wait()
	d := time.Since(start)
	res := paceResult{Sent: sent, Duration: d, Rate: float64(sent) / d.Seconds()}
	if e := firstErr.Load(); e != nil {
		return res, *e
	}
	return res, nil
}

// sample is one arrival at the consumer.
type sample struct {
	lateMs  float64 // arrival - due (or - sent, for probes)
	arrival int64   // unix ns
	trickle bool
}

// collector consumes a topic with one kafka-go reader per partition (no consumer
// group, so no join delay) using the docs/CONTRACT.md §8 reader settings, and records for every
// message its lateness: arrival time minus the x-delay-due-at header (unix ms), or,
// with bySent, minus the x-bench-sent-ns header (a producer → consumer probe).
type collector struct {
	bySent bool
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	samples []sample
	seen    map[string]struct{}
	dups    int
	bad     int
	count   atomic.Int64
	warm    atomic.Int64 // warm-up messages seen (never samples)
}

func collect(addr, topic string, partitions int, bySent bool) *collector {
	ctx, cancel := context.WithCancel(context.Background())
	c := &collector{bySent: bySent, cancel: cancel, seen: map[string]struct{}{}}
	for p := 0; p < partitions; p++ {
		r := kafka.NewReader(kafka.ReaderConfig{
			Brokers: []string{addr}, Topic: topic, Partition: p,
			// 1 MiB per fetch: kfake copies a whole fetch response in its single event
			// loop, so a lagging consumer with the usual 16 MiB would slow the broker
			// for everyone, and kafka-go's read deadline (MaxWait) would cut the fetch.
			MinBytes: 1, MaxBytes: 1 << 20, QueueCapacity: 1000,
			MaxWait: 5 * time.Millisecond, ReadBackoffMin: time.Millisecond, ReadBackoffMax: 5 * time.Millisecond,
			StartOffset: kafka.FirstOffset,
		})
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			defer r.Close()
			c.read(ctx, r)
		}()
	}
	return c
}

func (c *collector) read(ctx context.Context, r *kafka.Reader) {
	for {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			continue
		}
		now := time.Now()
		s := sample{arrival: now.UnixNano()}
		ok := false
		if isWarmUp(m.Headers) {
			c.warm.Add(1)
			continue
		}
		for _, h := range m.Headers {
			switch h.Key {
			case "x-delay-due-at":
				if !c.bySent {
					if due, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
						s.lateMs = float64(now.UnixNano()-due*1e6) / 1e6
						ok = true
					}
				}
			case hdrSentNs:
				if c.bySent {
					if sent, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
						s.lateMs = float64(now.UnixNano()-sent) / 1e6
						ok = true
					}
				}
			case hdrClass:
				s.trickle = string(h.Value) == "t"
			}
		}
		id := string(m.Key) // unique per message in every workload but keyedDelayed's
		for _, h := range m.Headers {
			if h.Key == hdrID {
				id = string(h.Value)
			}
		}
		c.mu.Lock()
		switch _, dup := c.seen[id]; {
		case !ok:
			c.bad++
		case dup:
			c.dups++
		default:
			c.seen[id] = struct{}{}
			c.samples = append(c.samples, s)
		}
		c.mu.Unlock()
		c.count.Add(1)
	}
}

// waitCount waits until n messages arrived (duplicates included) or limit passed.
func (c *collector) waitCount(ctx context.Context, n int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for c.count.Load() < int64(n) {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// waitQuiet waits until no message arrived for quiet, or limit passed.
func (c *collector) waitQuiet(quiet, limit time.Duration) {
	deadline := time.Now().Add(limit)
	last, lastChange := c.count.Load(), time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		if n := c.count.Load(); n != last {
			last, lastChange = n, time.Now()
		} else if time.Since(lastChange) >= quiet {
			return
		}
	}
}

func (c *collector) stop() {
	c.cancel()
	c.wg.Wait()
}

// snapshot returns a copy of the unique samples and the duplicate/unparsable counts.
func (c *collector) snapshot() (s []sample, dups, bad int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]sample(nil), c.samples...), c.dups, c.bad
}

// lateness returns the lateness of the samples selected by keep (nil = all).
func lateness(s []sample, keep func(sample) bool) []float64 {
	out := make([]float64, 0, len(s))
	for _, x := range s {
		if keep == nil || keep(x) {
			out = append(out, x.lateMs)
		}
	}
	return out
}

// arrivalRate is the number of arrivals per second within [from, to).
func arrivalRate(s []sample, from, to time.Time) float64 {
	if !to.After(from) {
		return 0
	}
	n := 0
	a, b := from.UnixNano(), to.UnixNano()
	for _, x := range s {
		if x.arrival >= a && x.arrival < b {
			n++
		}
	}
	return float64(n) / to.Sub(from).Seconds()
}

// reset forgets everything collected so far (after a warm-up).
func (c *collector) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.samples, c.seen, c.dups, c.bad = nil, map[string]struct{}{}, 0, 0
	c.count.Store(0)
}

func isWarmUp(hs []kafka.Header) bool {
	for _, h := range hs {
		if h.Key == hdrClass && string(h.Value) == "w" {
			return true
		}
	}
	return false
}
