package app

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/admin/consoletest"
	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// TestConsoleOnRedis runs the web console's browser scenario (admin/consoletest, in a
// real headless Chromium) against the real bridge: redis-server, kfake, the store's
// browse and the job runner behind the admin API, with one dead letter buried first.
func TestConsoleOnRedis(t *testing.T) {
	tb := startBridge(t)
	shardStore := tb.shardStore(t)
	now := time.Now().UnixMilli()
	dead := &envelope.Envelope{ID: "a.delay/0/7", Route: "a", SourceBroker: envelope.BrokerKafka, Source: "a.delay",
		DueAt: now - 60_000, ReceivedAt: now - 120_000, Payload: []byte("x"), Reason: "bad_delay"}
	if _, err := shardStore.Bury(context.Background(), []*envelope.Envelope{dead}, now); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := admin.NewServer(admin.Options{Backend: tb.Backend, Token: "s3cret", Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	consoletest.Run(t, consoletest.Config{URL: "http://" + ln.Addr().String(), Token: "s3cret", Route: "b", Other: "a"})
}
