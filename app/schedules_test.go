package app

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/schedules"
)

// occurrences reads a topic from the start in the background and records every
// x-message-id with how many times it arrived.
type occurrences struct {
	mu   sync.Mutex
	seen map[string]int
}

func readOccurrences(t *testing.T, kaddr string, topics ...string) *occurrences {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(kaddr), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	o := &occurrences{seen: map[string]int{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			fs := cl.PollFetches(ctx)
			o.mu.Lock()
			for _, r := range fs.Records() {
				id := headerOf(r, "x-message-id")
				o.seen[id]++
			}
			o.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cl.Close() })
	return o
}

// of returns the occurrence ids of schedule id seen so far and the most any arrived.
func (o *occurrences) of(id string) (ids []string, most int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for k, n := range o.seen {
		if s, _, ok := schedules.SlotOf(k); ok && s == id {
			ids = append(ids, k)
			most = max(most, n)
		}
	}
	return ids, most
}

func (c *counts) ScheduleSlots(schedule, outcome string, n int) {
	c.add("slots "+schedule+"|"+outcome, n)
}

// TestSchedulesOverHTTP runs a real bridge (redis-server, kfake) with a config-file
// schedule and one created over the admin HTTP API: both publish one message per slot
// with the deterministic id, none twice; GET shows the next 5 slots and the last
// outcomes with their messages' states; the config schedule is read-only (409); a
// paused schedule publishes nothing more; a deleted one is gone.
func TestSchedulesOverHTTP(t *testing.T) {
	e := newEnv(t)
	tb := e.run(t, "scheduler.schedule_horizon=3s", "scheduler.schedule_interval=200ms",
		"schedules.0.id=cfg-tick", "schedules.0.route=a", "schedules.0.spec=@every 1s", "schedules.0.payload=from-config")
	ts := httptest.NewServer(admin.NewServer(admin.Options{Backend: tb.Backend}))
	t.Cleanup(ts.Close)
	c := admin.NewClient(ts.URL, "", ts.Client())
	ctx := context.Background()
	occ := readOccurrences(t, tb.kaddr, "a.out", "b.out")

	info, err := c.CreateSchedule(ctx, admin.ScheduleDef{ID: "api-tick", Route: "b", Spec: "@every 1s", Payload: "from-api", Key: "k1"})
	if err != nil || info.Origin != "api" || info.State != admin.ScheduleActive {
		t.Fatalf("create: %+v %v", info, err)
	}
	if _, err := c.CreateSchedule(ctx, admin.ScheduleDef{ID: "api-tick", Route: "b", Spec: "@every 1s"}); !errors.Is(err, admin.ErrConflict) {
		t.Fatalf("second create: %v, want a conflict", err)
	}
	if _, err := c.CreateSchedule(ctx, admin.ScheduleDef{ID: "x", Route: "nowhere", Spec: "@every 1s"}); !errors.Is(err, admin.ErrInvalid) {
		t.Fatalf("create on an unknown route: %v, want invalid", err)
	}
	waitUntil(t, "3 occurrences of each schedule", 30*time.Second, func() bool {
		a, _ := occ.of("cfg-tick")
		b, _ := occ.of("api-tick")
		return len(a) >= 3 && len(b) >= 3
	})
	for _, id := range []string{"cfg-tick", "api-tick"} {
		ids, most := occ.of(id)
		if most != 1 {
			t.Errorf("%s: an occurrence arrived %d times", id, most)
		}
		for _, occID := range ids {
			if _, slot, ok := schedules.SlotOf(occID); !ok || slot%1000 != 0 || strings.Contains(occID, "~") {
				t.Errorf("%s: occurrence id %q is not <id>@<whole second>", id, occID)
			}
		}
	}
	got, err := c.GetSchedule(ctx, "cfg-tick")
	if err != nil || got.Origin != "config" || len(got.Next) != 5 || got.Next[1].Slot-got.Next[0].Slot != 1000 {
		t.Fatalf("get cfg-tick: %+v %v", got, err)
	}
	delivered := 0
	for _, o := range got.Last {
		if o.Outcome == observe.SlotParked && o.State == "delivered" {
			delivered++
		}
	}
	if delivered == 0 {
		t.Errorf("get cfg-tick shows no delivered recent slot: %+v", got.Last)
	}
	for _, call := range []func() error{
		func() error {
			_, err := c.UpdateSchedule(ctx, admin.ScheduleDef{ID: "cfg-tick", Route: "a", Spec: "@every 2s"})
			return err
		},
		func() error { _, err := c.PauseSchedule(ctx, "cfg-tick", true); return err },
		func() error { return c.DeleteSchedule(ctx, "cfg-tick") },
	} {
		if err := call(); !errors.Is(err, admin.ErrConflict) {
			t.Fatalf("changing a config schedule over the API: %v, want a conflict", err)
		}
	}
	// Pause: the slots parked ahead are cancelled when the answer comes; no slot after
	// the pause arrives (one due before it may still be on its way out).
	if info, err := c.PauseSchedule(ctx, "api-tick", true); err != nil || info.State != admin.SchedulePaused {
		t.Fatalf("pause: %+v %v", info, err)
	}
	paused := time.Now().UnixMilli()
	time.Sleep(4 * time.Second) // longer than the horizon: any slot parked ahead would have fired
	ids, _ := occ.of("api-tick")
	for _, id := range ids {
		if _, slot, _ := schedules.SlotOf(id); slot > paused {
			t.Errorf("api-tick published slot %d (%s), %d ms after it was paused", slot, id, slot-paused)
		}
	}
	if _, most := occ.of("cfg-tick"); most != 1 {
		t.Errorf("cfg-tick: an occurrence arrived %d times", most)
	}
	if tb.obs.get("slots cfg-tick|published") == 0 || tb.obs.get("slots cfg-tick|parked") == 0 {
		t.Errorf("slot counts: published %d, parked %d", tb.obs.get("slots cfg-tick|published"), tb.obs.get("slots cfg-tick|parked"))
	}
	if err := c.DeleteSchedule(ctx, "api-tick"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetSchedule(ctx, "api-tick"); !errors.Is(err, admin.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
}

// TestScheduleConfigReconciled: the config file's schedules are reconciled at start
// (added, changed, removed), an API schedule is left alone, and a schedule whose route
// is gone is reported (state route_missing, a log line) while the bridge stays ready.
func TestScheduleConfigReconciled(t *testing.T) {
	e := newEnv(t)
	first := e.run(t, "schedules.0.id=keep", "schedules.0.route=a", "schedules.0.spec=0 3 * * *",
		"schedules.1.id=change", "schedules.1.route=a", "schedules.1.spec=0 4 * * *",
		"schedules.2.id=drop", "schedules.2.route=a", "schedules.2.spec=0 5 * * *")
	ctx := context.Background()
	waitUntil(t, "config schedules stored", 10*time.Second, func() bool {
		l, _ := first.ListSchedules(ctx)
		return len(l) == 3
	})
	if _, err := first.CreateSchedule(ctx, admin.ScheduleDef{ID: "api", Route: "b", Spec: "0 6 * * *"}); err != nil {
		t.Fatal(err)
	}
	before, _ := first.GetSchedule(ctx, "keep")
	first.stop()

	second := e.run(t, "schedules.0.id=keep", "schedules.0.route=a", "schedules.0.spec=0 3 * * *",
		"schedules.1.id=change", "schedules.1.route=a", "schedules.1.spec=30 4 * * *",
		"schedules.2.id=add", "schedules.2.route=a", "schedules.2.spec=0 7 * * *")
	var list []admin.ScheduleInfo
	waitUntil(t, "reconciled", 10*time.Second, func() bool {
		list, _ = second.ListSchedules(ctx)
		return len(list) == 4 && list[0].ID == "add"
	})
	byID := map[string]admin.ScheduleInfo{}
	for _, s := range list {
		byID[s.ID] = s
	}
	if _, ok := byID["drop"]; ok {
		t.Errorf("removed config schedule still there")
	}
	if k := byID["keep"]; k.Generation != before.Generation || k.Origin != "config" {
		t.Errorf("unchanged schedule rewritten: gen %d, was %d", k.Generation, before.Generation)
	}
	if ch := byID["change"]; ch.Spec != "30 4 * * *" || ch.Generation < 2 {
		t.Errorf("changed schedule: %+v", ch)
	}
	if a := byID["api"]; a.Origin != "api" || a.State != admin.ScheduleActive {
		t.Errorf("API schedule: %+v", a)
	}
	if !strings.Contains(second.logs.String(), "added=1 changed=1 removed=1") {
		t.Errorf("no reconciliation log line:\n%s", second.logs.String())
	}

	// A schedule whose route is no longer configured (written by a bridge that had it):
	// reported in the API, a log line and the metric, and the bridge stays ready.
	gone := schedules.Definition{ID: "orphan", Route: "gone", Spec: "@every 1s"}
	gone.Normalize()
	raw, _ := gone.Encode()
	if _, err := second.shardStore(t).PutSchedule(ctx, "orphan", raw, time.Now().UnixMilli()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "orphan reported", 10*time.Second, func() bool {
		return strings.Contains(second.logs.String(), "route is not configured") && second.obs.get("slots orphan|no_route") > 0
	})
	if o, err := second.GetSchedule(ctx, "orphan"); err != nil || o.State != admin.ScheduleRouteMissing {
		t.Errorf("orphan: %+v %v", o, err)
	}
	if err := second.Ready(ctx); err != nil {
		t.Errorf("a schedule without its route made the bridge unready: %v", err)
	}
}
