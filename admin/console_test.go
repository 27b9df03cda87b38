package admin_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"testing"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/admin/consoletest"
)

// The console in headless Chromium on the in-memory model of the contract (per-route
// counts, lateness, dead letters). app runs the same scenario on the real
// bridge with Redis.
func TestConsole(t *testing.T) {
	backend, g := admin.NewConsoleBackend()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := admin.NewServer(admin.Options{Backend: backend, Token: "s3cret", Gatherer: g,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	consoletest.Run(t, consoletest.Config{URL: "http://" + ln.Addr().String(), Token: "s3cret", Route: "billing", Other: "orders", Keys: true})
}
