package admin_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/admin/consoletest"
)

// The charts page in headless Chromium draws a fixed history as it is: a line breaks
// where no interval was recorded and where a value is missing (pending unread, no
// deliveries for the lateness), and a route without traffic still gets its lines, flat.
func TestConsoleChartsDrawing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := admin.NewServer(admin.Options{Backend: admin.NewChartsBackend(), Token: "s3cret",
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
	lines := consoletest.Lines(t, consoletest.ChartsConfig{URL: "http://" + ln.Addr().String(), Token: "s3cret", Window: "15m"}, "drawing")
	got := map[string]consoletest.Line{}
	for _, l := range lines {
		got[l.Route+" "+l.Chart+"/"+l.Series] = l
	}
	for _, c := range []struct {
		line           string
		points, breaks int // breaks: separate runs (M commands) in the path
		max            float64
	}{
		{"orders rates/received", 12, 2, 24},
		{"orders rates/dead_lettered", 12, 2, 1},
		{"orders pending/pending", 11, 3, 240},
		{"orders lateness/p50", 10, 2, 3},
		{"orders lateness/p99", 10, 2, 19},
		{"billing rates/received", 15, 1, 0},
		{"billing pending/pending", 15, 1, 0},
		{"billing lateness/p99", 0, 0, 0},
	} {
		l, ok := got[c.line]
		if !ok {
			t.Errorf("%s not drawn (lines: %d)", c.line, len(lines))
			continue
		}
		if breaks := strings.Count(l.D, "M"); l.Points != c.points || breaks != c.breaks || l.Max != c.max {
			t.Errorf("%s: %d points in %d runs, max %g; want %d in %d, max %g\npath: %s", c.line, l.Points, breaks, l.Max, c.points, c.breaks, c.max, l.D)
		}
	}
}
