package tracing

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
)

// Protocols of OTEL_EXPORTER_OTLP_PROTOCOL that Setup supports.
const (
	ProtocolHTTP = "http/protobuf" // the specification's default
	ProtocolGRPC = "grpc"
)

// Config is what the OTEL_* environment asks for, as Setup reads it.
type Config struct {
	On       bool
	Protocol string // ProtocolHTTP or ProtocolGRPC when On
}

// FromEnv reads which traces the environment asks for (getenv is os.Getenv in the
// binary). Tracing is on when OTEL_TRACES_EXPORTER is "otlp", or when it is unset and an
// OTLP endpoint is (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
// it is off when none of them is set, when OTEL_TRACES_EXPORTER is "none", and when
// OTEL_SDK_DISABLED is "true". The protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, else
// OTEL_EXPORTER_OTLP_PROTOCOL, else http/protobuf. Any other exporter or protocol is
// an error (a typo must not silently turn tracing off).
func FromEnv(getenv func(string) string) (Config, error) {
	if strings.EqualFold(strings.TrimSpace(getenv("OTEL_SDK_DISABLED")), "true") {
		return Config{}, nil
	}
	switch exp := strings.TrimSpace(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "none":
		return Config{}, nil
	case "":
		if getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return Config{}, nil
		}
	case "otlp":
	default:
		return Config{}, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: delay-bridge exports traces with otlp (or none)", exp)
	}
	proto := strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"))
	if proto == "" {
		proto = strings.TrimSpace(getenv("OTEL_EXPORTER_OTLP_PROTOCOL"))
	}
	switch proto {
	case "", ProtocolHTTP:
		return Config{On: true, Protocol: ProtocolHTTP}, nil
	case ProtocolGRPC:
		return Config{On: true, Protocol: ProtocolGRPC}, nil
	}
	return Config{}, fmt.Errorf("OTLP protocol %q: delay-bridge supports %s and %s", proto, ProtocolHTTP, ProtocolGRPC)
}

// Provider is the SDK's tracer provider with its OTLP exporter and batch span
// processor.
type Provider struct {
	tp *sdktrace.TracerProvider
}

// Setup builds the tracer provider the process environment asks for (FromEnv), or
// returns nil when tracing is off. It connects to nothing yet: the exporter dials when it first
// exports. Everything else comes from the standard variables, read by the SDK and the
// exporters: endpoint, headers, TLS, compression and timeout (OTEL_EXPORTER_OTLP_*),
// the batch processor (OTEL_BSP_*), the sampler (OTEL_TRACES_SAMPLER, default
// parentbased_always_on: a producer's unsampled trace is not recorded), and the
// resource (OTEL_SERVICE_NAME, default delay-bridge; OTEL_RESOURCE_ATTRIBUTES).
// Export failures are logged with log.
func Setup(ctx context.Context, version string, log *slog.Logger) (*Provider, error) {
	cfg, err := FromEnv(os.Getenv) // the SDK and the exporters read the process's too
	if err != nil || !cfg.On {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	if cfg.Protocol == ProtocolGRPC {
		exp, err = otlptracegrpc.New(ctx)
	} else {
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(semconv.ServiceName("delay-bridge"), semconv.ServiceVersion(version)),
		resource.WithTelemetrySDK(),
		resource.WithFromEnv(), // OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win
	)
	if err != nil {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		log.Warn("tracing: export failed", "err", err)
	}))
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	log.Info("tracing on", "exporter", "otlp", "protocol", cfg.Protocol)
	return &Provider{tp: tp}, nil
}

// Tracer returns the egress tracer (see NewTracer).
func (p *Provider) Tracer(targets map[string]string) *Tracer { return NewTracer(p.tp, targets) }

// Shutdown exports the spans still queued and stops the exporter, within ctx.
func (p *Provider) Shutdown(ctx context.Context) error {
	if err := p.tp.Shutdown(ctx); err != nil {
		return fmt.Errorf("tracing: shutdown: %w", err)
	}
	return nil
}
