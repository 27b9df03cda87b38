package redistest

import (
	"fmt"
	"testing"

	"github.com/delaybridge/delay-bridge/scheduler"
)

// idsOnShard returns n ids that all hash to shard.
func idsOnShard(s interface{ ShardOf(string) int }, shard, n int, prefix string) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if s.ShardOf(id) == shard {
			out = append(out, id)
		}
	}
	return out
}

// newScheduler is scheduler.New, failing the test on an error.
func newScheduler(t testing.TB, opt scheduler.Options) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New(opt)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
