package testkit

import (
	"compress/gzip"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"testing"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// OTLP is an in-test OpenTelemetry collector: an OTLP/HTTP receiver (POST /v1/traces,
// binary protobuf, plain or gzip) that decodes every ExportTraceServiceRequest and keeps
// its spans. Point an exporter at it with OTEL_EXPORTER_OTLP_ENDPOINT=Endpoint() and
// OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf.
type OTLP struct {
	srv *http.Server

	mu       sync.Mutex
	spans    []*tracepb.Span
	services []string // service.name of each span's resource, index for index
	bad      []string // requests it could not decode
}

// StartOTLP starts the receiver on a random port; it stops when the test ends.
func StartOTLP(t testing.TB) *OTLP {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("otlp receiver: %v", err)
	}
	o := &OTLP{}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/traces", o.export)
	o.srv = &http.Server{Addr: ln.Addr().String(), Handler: mux}
	done := make(chan struct{})
	go func() { defer close(done); _ = o.srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = o.srv.Close()
		<-done
		if bad := o.Bad(); len(bad) > 0 {
			t.Errorf("otlp receiver: undecodable requests: %v", bad)
		}
	})
	return o
}

// Endpoint is the base URL for OTEL_EXPORTER_OTLP_ENDPOINT.
func (o *OTLP) Endpoint() string { return "http://" + o.srv.Addr }

func (o *OTLP) export(w http.ResponseWriter, r *http.Request) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			o.refuse(w, fmt.Sprintf("gzip: %v", err))
			return
		}
		body = zr
	}
	data, err := io.ReadAll(body)
	if err != nil {
		o.refuse(w, fmt.Sprintf("read: %v", err))
		return
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-protobuf" {
		o.refuse(w, "content type "+ct)
		return
	}
	var req coltracepb.ExportTraceServiceRequest
	if err := proto.Unmarshal(data, &req); err != nil {
		o.refuse(w, fmt.Sprintf("decode: %v", err))
		return
	}
	o.mu.Lock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, kv := range rs.GetResource().GetAttributes() {
			if kv.GetKey() == "service.name" {
				service = kv.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				o.spans = append(o.spans, s)
				o.services = append(o.services, service)
			}
		}
	}
	o.mu.Unlock()
	resp, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Header().Set("Content-Type", "application/x-protobuf")
	_, _ = w.Write(resp)
}

func (o *OTLP) refuse(w http.ResponseWriter, why string) {
	o.mu.Lock()
	o.bad = append(o.bad, why)
	o.mu.Unlock()
	http.Error(w, why, http.StatusBadRequest)
}

// Spans returns every span received so far, and the service.name of each one's resource.
func (o *OTLP) Spans() (spans []*tracepb.Span, services []string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*tracepb.Span(nil), o.spans...), append([]string(nil), o.services...)
}

// Bad returns what was wrong with each request that could not be decoded.
func (o *OTLP) Bad() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.bad...)
}
