package egress

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/tracing"
)

// nopSink confirms everything at once: the benchmark measures the dispatcher.
type nopSink struct{}

func (nopSink) Publish(_ context.Context, msgs []*envelope.Envelope) []error {
	return make([]error, len(msgs))
}
func (nopSink) Close() error { return nil }

// countCompleter counts confirmed messages and signals when want were.
type countCompleter struct {
	n    atomic.Int64
	want int64
	done chan struct{}
}

func (c *countCompleter) Published(_ context.Context, envs []*envelope.Envelope) {
	if c.n.Add(int64(len(envs))) == c.want {
		close(c.done)
	}
}
func (c *countCompleter) Failed(context.Context, []*envelope.Envelope, []error) {}
func (c *countCompleter) Dropped([]*envelope.Envelope)                          {}
func (c *countCompleter) Unpublished([]*envelope.Envelope)                      {}

// BenchmarkDispatcherTracing: messages through the dispatcher to a sink that confirms
// at once, with tracing off (no Tracer) and on (internal/tracing on the SDK with its
// batch span processor, spans exported to a discarding exporter). One op = one message.
//
//	go test -run '^$' -bench BenchmarkDispatcherTracing -benchmem ./egress/
func BenchmarkDispatcherTracing(b *testing.B) {
	for _, on := range []bool{false, true} {
		b.Run(fmt.Sprintf("tracing=%v", on), func(b *testing.B) {
			var tracer Tracer
			if on {
				tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))
				defer func() { _ = tp.Shutdown(context.Background()) }()
				tracer = tracing.NewTracer(tp, map[string]string{"r": "orders"})
			}
			msgs := make([]*envelope.Envelope, b.N)
			for i := range msgs {
				msgs[i] = &envelope.Envelope{
					ID: fmt.Sprintf("m-%d", i), Route: "r", SourceBroker: envelope.BrokerKafka, Source: "orders.delay",
					DueAt: 1_700_000_060_000, ReceivedAt: 1_700_000_000_000, Payload: make([]byte, 256),
					Headers: []envelope.Header{
						{Key: "x-delay", Value: "60000"},
						{Key: "x-message-id", Value: fmt.Sprintf("m-%d", i)},
						{Key: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
						{Key: "x-correlation-id", Value: "c-1"},
					},
				}
			}
			c := &countCompleter{want: int64(b.N), done: make(chan struct{})}
			d := NewDispatcher(DispatcherOptions{
				Routes: map[string]RouteSink{"r": {Sink: nopSink{}, Broker: envelope.BrokerKafka}}, Completer: c, Tracer: tracer,
			})
			ctx, cancel := context.WithCancel(context.Background())
			stopped := make(chan struct{})
			go func() { defer close(stopped); d.Run(ctx) }()
			b.ReportAllocs()
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < len(msgs); i += 1000 {
				d.Submit(msgs[i:min(i+1000, len(msgs))])
			}
			<-c.done
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
			b.StopTimer()
			cancel()
			<-stopped
		})
	}
}
