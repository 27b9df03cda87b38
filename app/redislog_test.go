package app

import (
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/testkit"
)

// go-redis's own lines (here: dial failures to a closed port) arrive as JSON records of
// the slog logger, at debug, tagged component=go-redis.
func TestRedisLogsGoThroughSlog(t *testing.T) {
	var buf testkit.Buffer
	RouteRedisLogs(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(func() { RouteRedisLogs(slog.New(slog.DiscardHandler)) })
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t)), MaxRetries: -1,
		DialTimeout: time.Second})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := 0; i < 10 && !strings.Contains(buf.String(), "go-redis"); i++ {
		_ = rdb.Ping(ctx).Err()
		time.Sleep(100 * time.Millisecond)
	}
	line, _, _ := strings.Cut(buf.String(), "\n")
	var rec map[string]any
	if err := json.Unmarshal([]byte(line), &rec); err != nil {
		t.Fatalf("not a JSON record (%v): %q", err, buf.String())
	}
	if rec["component"] != "go-redis" || rec["level"] != "DEBUG" || !strings.Contains(rec["msg"].(string), "dial") {
		t.Errorf("record = %v", rec)
	}
}
