package e2e

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/testkit"
)

// migrationWatch polls CLUSTER NODES of a cluster's masters every 50 ms and times how
// long each slot stays half-moved (a "[slot->-target]" migrating mark on its source):
// the migration's own duration, which the lateness of a live reshard is judged
// against. The masters watched are those of the cluster when it starts: every move the
// resharding tests make has one of them as its source.
type migrationWatch struct {
	stop, done chan struct{}
	mu         sync.Mutex
	since      map[int]time.Time     // slots half-moved now, since when
	longest    map[int]time.Duration // per slot, its longest half-moved spell
}

func watchMigrations(t *testing.T, rc *testkit.RedisCluster) *migrationWatch {
	w := &migrationWatch{stop: make(chan struct{}), done: make(chan struct{}), since: map[int]time.Time{}, longest: map[int]time.Duration{}}
	var clients []*redis.Client
	for _, n := range rc.Nodes {
		clients = append(clients, redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond}))
	}
	go func() {
		defer close(w.done)
		defer func() {
			for _, c := range clients {
				c.Close()
			}
		}()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			moving := map[int]bool{}
			for _, c := range clients {
				out, err := c.ClusterNodes(context.Background()).Result()
				if err == nil {
					migratingSlots(out, moving)
				}
			}
			w.note(moving, time.Now())
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(w.halt)
	return w
}

// migratingSlots adds to moving every slot CLUSTER NODES marks as migrating away.
func migratingSlots(nodes string, moving map[int]bool) {
	for _, line := range strings.Split(nodes, "\n") {
		if !strings.Contains(line, "myself") {
			continue
		}
		for _, f := range strings.Fields(line) {
			if i := strings.Index(f, "->-"); strings.HasPrefix(f, "[") && i > 0 {
				if slot, err := strconv.Atoi(f[1:i]); err == nil {
					moving[slot] = true
				}
			}
		}
	}
}

func (w *migrationWatch) note(moving map[int]bool, now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for slot := range moving {
		if _, ok := w.since[slot]; !ok {
			w.since[slot] = now
		}
	}
	for slot, from := range w.since {
		if !moving[slot] {
			w.longest[slot] = max(w.longest[slot], now.Sub(from))
			delete(w.since, slot)
		}
	}
}

func (w *migrationWatch) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

// finish stops watching and returns the longest time one slot stayed half-moved, and
// how many slots moved.
func (w *migrationWatch) finish() (longest time.Duration, slots int) {
	w.halt()
	w.note(nil, time.Now())
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, d := range w.longest {
		longest = max(longest, d)
	}
	return longest, len(w.longest)
}
