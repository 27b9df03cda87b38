package redistest

import (
	"context"
	"log/slog"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/store/redisstore"
	"github.com/delaybridge/delay-bridge/testkit"
)

// Taking over the in-flight messages of a dead owner (the one way an at-least-once
// message is published twice) is logged at info with the count, so an operator can
// tell duplicates at the consumers from a bug.
func TestTakeOverOfInflightIsLogged(t *testing.T) {
	r := testkit.StartRedis(t)
	ctx := context.Background()
	shardStore, err := redisstore.New(ctx, r.Client(), redisstore.Options{Prefix: "t", Cluster: "c", Shards: 8, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	parkN(t, shardStore, 20, func(int) int64 { return now })
	for sh := 0; sh < 8; sh++ {
		tok, err := shardStore.AcquireLease(ctx, sh, "dead", 300*time.Millisecond)
		if err != nil || tok == 0 {
			t.Fatalf("acquire: %d %v", tok, err)
		}
		if _, _, err := shardStore.Claim(ctx, sh, "dead", tok, now, now+30_000, 100); err != nil {
			t.Fatal(err)
		}
	}
	var logs testkit.Buffer
	sink := &recordingSink{}
	startScheduler(t, r, "alive", sink, func(o *scheduler.Options) {
		o.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	waitFor(t, "recovered messages fired", 10*time.Second, func() bool { return len(sink.snapshot()) == 20 })
	line := regexp.MustCompile(`level=INFO msg="recovered in-flight messages on acquiring a shard[^"]*" shard=\d+ n=(\d+)`)
	total := 0
	for _, m := range line.FindAllStringSubmatch(logs.String(), -1) {
		n, _ := strconv.Atoi(m[1])
		total += n
	}
	if total != 20 {
		t.Errorf("logged %d recovered messages, want 20; log:\n%s", total, logs.String())
	}
}
