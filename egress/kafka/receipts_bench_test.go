package kafka

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/kafkaconn"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/testkit"
)

// countingCompleter counts published messages and wakes the waiter.
type countingCompleter struct {
	mu   sync.Mutex
	cond *sync.Cond
	n    int
}

func (c *countingCompleter) Published(_ context.Context, envs []*envelope.Envelope) {
	c.mu.Lock()
	c.n += len(envs)
	c.cond.Broadcast()
	c.mu.Unlock()
}
func (c *countingCompleter) Failed(context.Context, []*envelope.Envelope, []error) {
	panic("publish failed")
}
func (c *countingCompleter) Dropped([]*envelope.Envelope)     {}
func (c *countingCompleter) Unpublished([]*envelope.Envelope) {}

func (c *countingCompleter) waitFor(n int) {
	c.mu.Lock()
	for c.n < n {
		c.cond.Wait()
	}
	c.mu.Unlock()
}

// dropCounter counts side copies dropped.
type dropCounter struct {
	observe.Nop
	mu sync.Mutex
	n  int
}

func (d *dropCounter) SideDropped(_, _, _ string, n int) { d.mu.Lock(); d.n += n; d.mu.Unlock() }
func (d *dropCounter) get() int                          { d.mu.Lock(); defer d.mu.Unlock(); return d.n }

// BenchmarkDispatcherReceipts is the cost of receipts on the delivery path: the
// egress dispatcher (4 workers) publishing keyed 100-byte messages in batches of 1000
// through this sink to kfake (6 partitions, in process), with receipts off, and on
// (each confirmed batch made into delivered receipts and offered to the receipts side
// publisher, which publishes them to a receipts topic on the same kfake).
//
//   - load=max: 4 batches per op as fast as they go; with receipts on an op ends only
//     once its receipts are published too (none may be dropped), so msgs/s is the
//     most the path delivers with every receipt out.
//   - load=10k: one op is one second of 10 batches of 1000, one every 100 ms (10k
//     msgs/s offered); msgs/s is what was delivered and cpu-ms/s the process's CPU time
//     (bridge path and kfake both) per second.
//
// Run both in one go:
//
//	go test -run '^$' -bench DispatcherReceipts -benchtime 5x ./egress/kafka/
func BenchmarkDispatcherReceipts(b *testing.B) {
	for _, load := range []string{"max", "10k"} {
		for _, on := range []bool{false, true} {
			b.Run(fmt.Sprintf("load=%s/receipts=%v", load, on), func(b *testing.B) { benchReceipts(b, load == "10k", on) })
		}
	}
}

func benchReceipts(b *testing.B, paced, on bool) {
	const batch = 1000
	addr, _ := testkit.StartKafka(b, 6, "out", "receipts")
	s, err := New(kafkaconn.Config{Brokers: []string{addr}}, map[string]string{"r": "out"}, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	comp := &countingCompleter{}
	comp.cond = sync.NewCond(&comp.mu)
	opt := egress.DispatcherOptions{
		Routes:    map[string]egress.RouteSink{"r": {Sink: s, Broker: envelope.BrokerKafka}},
		Completer: comp,
	}
	var side *egress.SidePublisher
	drops := &dropCounter{}
	if on {
		side, err = egress.NewSidePublisher(egress.SideOptions{Queue: observe.SideQueueReceipts, Observer: drops,
			Targets: map[string]egress.SideTarget{envelope.BrokerKafka: s.Receipts(map[string]string{"r": "receipts"})}})
		if err != nil {
			b.Fatal(err)
		}
		side.Start()
		defer side.Stop()
		rc := egress.NewReceipts(map[string]egress.ReceiptRoute{"r": {Broker: envelope.BrokerKafka,
			To: egress.ReceiptTarget{Broker: envelope.BrokerKafka, Topic: "out"}}}, side, nil)
		opt.OnDelivered = rc.Delivered
	}
	drained := func() {
		for side != nil && side.Backlog(envelope.BrokerKafka) > 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
	d := egress.NewDispatcher(opt)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	defer func() { cancel(); <-done }()

	sent := 0
	submit := func() {
		envs := make([]*envelope.Envelope, batch)
		for i := range envs {
			envs[i] = &envelope.Envelope{ID: fmt.Sprint("m", sent+i), Route: "r", Source: "src.delay",
				SourceBroker: envelope.BrokerKafka, DueAt: time.Now().UnixMilli(),
				Key: []byte(fmt.Sprint("customer-", i)), Payload: bytes.Repeat([]byte("x"), 100),
				Headers: []envelope.Header{{Key: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}}
		}
		sent += batch
		d.Submit(envs)
	}
	submit() // connections and metadata before timing
	comp.waitFor(sent)
	drained()
	start, cpu0 := time.Now(), cpuTime()
	for b.Loop() {
		if paced {
			tick := time.NewTicker(100 * time.Millisecond)
			for range 10 {
				submit()
				<-tick.C
			}
			tick.Stop()
			comp.waitFor(sent)
			continue
		}
		for range 4 {
			submit()
		}
		comp.waitFor(sent)
		drained()
	}
	drained()
	wall := time.Since(start)
	delivered := sent - batch
	b.ReportMetric(float64(delivered)/wall.Seconds(), "msgs/s")
	b.ReportMetric(float64((cpuTime()-cpu0).Milliseconds())/wall.Seconds(), "cpu-ms/s")
	if n := drops.get(); n > 0 {
		b.Fatalf("%d receipts dropped", n)
	}
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
