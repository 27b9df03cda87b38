package tracing

import (
	"context"
	"encoding/hex"
	"log/slog"
	"net"
	"sync"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/grpc"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/testkit"
)

func envOf(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func TestFromEnv(t *testing.T) {
	for _, c := range []struct {
		env     map[string]string
		want    Config
		wantErr bool
	}{
		{env: nil, want: Config{}},
		{env: map[string]string{"OTEL_SERVICE_NAME": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, want: Config{}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, want: Config{On: true, Protocol: ProtocolHTTP}},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, want: Config{On: true, Protocol: ProtocolHTTP}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, want: Config{On: true, Protocol: ProtocolHTTP}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, want: Config{On: true, Protocol: ProtocolGRPC}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, want: Config{On: true, Protocol: ProtocolHTTP}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, want: Config{}},
		{env: map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, want: Config{}},
		{env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: true},
		{env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, wantErr: true},
	} {
		got, err := FromEnv(envOf(c.env))
		if (err != nil) != c.wantErr || got != c.want {
			t.Errorf("FromEnv(%v) = %+v, %v; want %+v, error %v", c.env, got, err, c.want, c.wantErr)
		}
	}
}

func TestSetupOffWithoutEnvironment(t *testing.T) {
	for _, k := range []string{"OTEL_SDK_DISABLED", "OTEL_TRACES_EXPORTER", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"} {
		t.Setenv(k, "")
	}
	p, err := Setup(t.Context(), "v", slog.Default())
	if p != nil || err != nil {
		t.Fatalf("Setup without OTEL_* = %v, %v; want nil, nil (tracing off)", p, err)
	}
}

// Setup from the environment exports over OTLP/HTTP, and Shutdown flushes the batch
// processor's queue (its schedule delay here is far longer than the test).
func TestSetupExportsOverOTLPAndShutdownFlushes(t *testing.T) {
	col := testkit.StartOTLP(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", col.Endpoint())
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "600000")
	t.Setenv("OTEL_SERVICE_NAME", "bridge-under-test")
	p, err := Setup(t.Context(), "1.2.3", slog.Default())
	if err != nil || p == nil {
		t.Fatalf("Setup: %v, %v", p, err)
	}
	env := message(envelope.Header{Key: HeaderTraceparent, Value: producerTP})
	_, end := p.Tracer(map[string]string{"orders": "orders.out"}).Start(env, envelope.BrokerKafka, time.Now(), time.Now())
	end(time.Now(), nil)
	if spans, _ := col.Spans(); len(spans) != 0 {
		t.Fatalf("%d spans exported before Shutdown; the test needs the queue to hold them", len(spans))
	}
	if err := p.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	spans, services := col.Spans()
	if len(spans) != 1 {
		t.Fatalf("%d spans received, want 1", len(spans))
	}
	if got := hex.EncodeToString(spans[0].GetTraceId()); got != producerTrace {
		t.Errorf("trace id %s, want %s", got, producerTrace)
	}
	if got := hex.EncodeToString(spans[0].GetParentSpanId()); got != producerSpan {
		t.Errorf("parent %s, want %s", got, producerSpan)
	}
	if services[0] != "bridge-under-test" {
		t.Errorf("service.name %q, want OTEL_SERVICE_NAME's", services[0])
	}
}

// traceService is an in-test OTLP/gRPC receiver.
type traceService struct {
	coltracepb.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans []*tracepb.Span
}

func (s *traceService) Export(_ context.Context, req *coltracepb.ExportTraceServiceRequest) (*coltracepb.ExportTraceServiceResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		for _, ss := range rs.GetScopeSpans() {
			s.spans = append(s.spans, ss.GetSpans()...)
		}
	}
	return &coltracepb.ExportTraceServiceResponse{}, nil
}

// OTEL_EXPORTER_OTLP_PROTOCOL=grpc exports over OTLP/gRPC.
func TestSetupExportsOverOTLPGRPC(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	svc := &traceService{}
	coltracepb.RegisterTraceServiceServer(srv, svc)
	served := make(chan struct{})
	go func() { defer close(served); _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Stop(); <-served })

	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://"+ln.Addr().String())
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
	p, err := Setup(t.Context(), "1.2.3", slog.Default())
	if err != nil || p == nil {
		t.Fatalf("Setup: %v, %v", p, err)
	}
	env := message(envelope.Header{Key: HeaderTraceparent, Value: producerTP})
	_, end := p.Tracer(nil).Start(env, envelope.BrokerKafka, time.Now(), time.Now())
	end(time.Now(), nil)
	if err := p.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	svc.mu.Lock()
	defer svc.mu.Unlock()
	if len(svc.spans) != 1 || hex.EncodeToString(svc.spans[0].GetParentSpanId()) != producerSpan {
		t.Fatalf("received %v, want one span, child of %s", svc.spans, producerSpan)
	}
}
