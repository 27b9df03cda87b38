package e2e

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/testkit"
)

// migrationWatch polls CLUSTER NODES of a cluster's masters every 50 ms and times how
// long the bridge's slots (its shards' and its Kafka route's) stay half-moved (a
// "[slot->-target]" migrating mark on the source): the migration's own duration, which
// the lateness of a live reshard is judged against. Moves less than migrationGap
// apart are one span: while any of the bridge's slots is half-moved, the park batches
// that carry a message of it are refused until the move ends, so the ingress waits
// through back-to-back moves in turn, and the backlog one move leaves behind is still
// draining when the next begins. The masters watched are those of
// the cluster when it starts: every move the resharding tests make has one of them as
// its source.
type migrationWatch struct {
	stop, done chan struct{}
	mu         sync.Mutex
	watched    map[int]bool
	start      time.Time // of the span under way (zero: none)
	last       time.Time // when a watched slot was last seen half-moved
	longest    time.Duration
	slots      map[int]bool // the watched slots seen half-moved
}

// migrationGap is how long no watched slot may be half-moved for a span to end: about
// what the stream's backlog after a move of a few seconds takes to drain on the test
// machine (TestRedisClusterReshardUnderLoad: 11.8 s of lateness after two moves of
// 4.2 s and 4.4 s back to back and a third 1–2 s later).
const migrationGap = 3 * time.Second

func watchMigrations(t *testing.T, rc *testkit.RedisCluster) *migrationWatch {
	t.Helper()
	w := &migrationWatch{stop: make(chan struct{}), done: make(chan struct{}), watched: map[int]bool{}, slots: map[int]bool{}}
	var clients []*redis.Client
	for _, n := range rc.Nodes {
		clients = append(clients, redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1, DialTimeout: 200 * time.Millisecond}))
	}
	keys := []string{"delaybridge:{ha:kafka:orders}:owner"}
	for sh := 0; sh < haShards; sh++ {
		keys = append(keys, ixKey(sh))
	}
	for _, k := range keys {
		slot, err := clients[0].ClusterKeySlot(context.Background(), k).Result()
		if err != nil {
			t.Fatal(err)
		}
		w.watched[int(slot)] = true
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
	seen := false
	for slot := range moving {
		if w.watched[slot] {
			seen = true
			w.slots[slot] = true
		}
	}
	switch {
	case seen && w.start.IsZero():
		w.start, w.last = now, now
	case seen:
		w.last = now
	case !w.start.IsZero() && now.Sub(w.last) > migrationGap:
		w.end()
	}
}

// end closes the span under way (w.mu held).
func (w *migrationWatch) end() {
	if !w.start.IsZero() {
		w.longest = max(w.longest, w.last.Sub(w.start)+50*time.Millisecond)
		w.start = time.Time{}
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

// finish stops watching and returns the longest span in which some of the bridge's
// slots were half-moved, and how many of its slots moved.
func (w *migrationWatch) finish() (longest time.Duration, slots int) {
	w.halt()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.end()
	return w.longest, len(w.slots)
}
