package schedules

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/store/memstore"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// storeSched parks and cancels straight on the store (the scheduler's Park and Cancel
// add counting and wake-ups, which these tests do not look at).
type storeSched struct {
	s   *memstore.Store
	clk clock.Clock
}

func (x storeSched) Park(ctx context.Context, envs []*envelope.Envelope, _ []string) ([]storeapi.State, error) {
	prior, _, err := x.s.ParkEach(ctx, envs)
	return prior, err
}

func (x storeSched) Cancel(ctx context.Context, id string, opt storeapi.CancelOptions) (storeapi.State, error) {
	prior, _, err := x.s.Cancel(ctx, id, clock.NowMs(x.clk), opt)
	return prior, err
}

type slotCounter struct {
	observe.Nop
	mu sync.Mutex
	n  map[string]int // outcome -> count
}

func (c *slotCounter) ScheduleSlots(_, outcome string, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.n[outcome] += n
}

type rig struct {
	t     *testing.T
	st    *memstore.Store
	clk   *clock.Fake
	obs   *slotCounter
	route map[string]bool
}

func newRig(t *testing.T) *rig {
	clk := clock.NewFake(time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC))
	st, err := memstore.New(memstore.Options{Shards: 8, DoneWindow: time.Hour, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, st: st, clk: clk, obs: &slotCounter{n: map[string]int{}}, route: map[string]bool{"orders": true}}
}

func (r *rig) planner() *Planner {
	return NewPlanner(Options{
		Store: r.st, Sched: storeSched{r.st, r.clk}, Owns: func(int) bool { return true },
		Route: func(n string) bool { return r.route[n] }, Clock: r.clk, Observer: r.obs,
		Horizon: 10 * time.Second, Grace: 2 * time.Second,
	})
}

func (r *rig) put(d Definition) int64 {
	r.t.Helper()
	d.Normalize()
	raw, _ := d.Encode()
	gen, err := r.st.PutSchedule(context.Background(), d.ID, raw, clock.NowMs(r.clk))
	if err != nil {
		r.t.Fatal(err)
	}
	return gen
}

func (r *rig) round(p *Planner) {
	r.t.Helper()
	if err := p.Round(context.Background()); err != nil {
		r.t.Fatal(err)
	}
}

// pending lists the pending occurrences with their due times, by id.
func (r *rig) pending() map[string]int64 {
	r.t.Helper()
	page, err := r.st.Browse(context.Background(), storeapi.BrowseQuery{State: storeapi.StatePending, Limit: 1000})
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string]int64{}
	for _, it := range page.Items {
		out[it.Envelope.ID] = it.Score
	}
	return out
}

// TestPlannerParksAheadOnceAndReplacesOnEdit: slots are parked up to the horizon
// with deterministic ids; two planners (a failover) and repeated rounds park each
// slot once; an edit cancels the future slots of the old generation and parks the new
// ones; pause parks nothing; a missing route is reported, not parked.
func TestPlannerParksAheadOnceAndReplacesOnEdit(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	r.put(Definition{ID: "tick", Route: "orders", Spec: "@every 2s", Payload: "hello", Headers: map[string]string{"h": "v"}, Key: "k"})
	a, b := r.planner(), r.planner()
	// a parks, but its plan is not saved (the call fails): b, a failover, parks the same
	// slots again — refused as duplicates by their ids.
	calls := 0
	r.st.SetHook(func(_ context.Context, op string) error {
		if op == memstore.OpSchedules {
			if calls++; calls == 2 {
				return memstore.ErrInjected
			}
		}
		return nil
	})
	if err := a.Round(ctx); err == nil {
		t.Fatal("the round whose plan could not be saved reported no error")
	}
	r.st.SetHook(nil)
	r.round(b)
	r.round(a)
	got := r.pending()
	base := r.clk.Now().UnixMilli()
	if len(got) != 6 {
		t.Fatalf("parked %v, want the 6 slots of the 10 s horizon (the first at the put itself)", got)
	}
	for i := int64(0); i <= 5; i++ {
		id := OccurrenceID("tick", base+2000*i, 1)
		if got[id] != base+2000*i {
			t.Fatalf("slot %s missing or wrong due time: %v", id, got)
		}
	}
	_, _, env, err := r.st.Get(ctx, OccurrenceID("tick", base+2000, 1))
	if err != nil || string(env.Payload) != "hello" || string(env.Key) != "k" || env.Source != "schedule/tick" {
		t.Fatalf("occurrence envelope %+v %v", env, err)
	}
	if r.obs.n[observe.SlotParked] != 6 {
		t.Fatalf("counted %v, want 6 parked (the second planner's and round's parks were duplicates)", r.obs.n)
	}
	// Edit: the 5 future slots go (the one at base is due and stays), the new generation's are parked.
	r.clk.Advance(500 * time.Millisecond)
	gen := r.put(Definition{ID: "tick", Route: "orders", Spec: "@every 5s", Payload: "new"})
	r.round(a)
	got = r.pending()
	for id := range got {
		if _, slot, ok := SlotOf(id); !ok || (slot != base && id[len(id)-2:] != "~2") {
			t.Fatalf("after the edit an occurrence of the old generation is still pending: %v", got)
		}
	}
	if len(got) != 3 || gen != 2 {
		t.Fatalf("after the edit: %v (gen %d), want the 2 slots of @every 5s in 10 s", got, gen)
	}
	for i := int64(1); i <= 5; i++ {
		if st, _, _, _ := r.st.Get(ctx, OccurrenceID("tick", base+2000*i, 1)); st != storeapi.StateCancelled {
			t.Fatalf("old slot %d: %s, want cancelled", i, st)
		}
	}
	// Pause: nothing pending, nothing parked while paused.
	r.put(Definition{ID: "tick", Route: "orders", Spec: "@every 5s", Payload: "new", Paused: true})
	r.round(a)
	r.clk.Advance(30 * time.Second)
	r.round(a)
	if got := r.pending(); len(got) != 1 {
		t.Fatalf("paused schedule has pending occurrences other than the one already due: %v", got)
	}
	// A route that is gone: reported in the plan and the metric, nothing parked.
	r.put(Definition{ID: "lost", Route: "nowhere", Spec: "@every 1s"})
	r.round(a)
	rec, err := r.st.GetSchedule(ctx, "lost")
	if err != nil {
		t.Fatal(err)
	}
	var plan Plan
	_ = json.Unmarshal(rec.Plan, &plan)
	if !plan.RouteMissing || r.obs.n[observe.SlotNoRoute] == 0 || len(r.pending()) != 1 {
		t.Fatalf("route gone: plan %+v, counts %v, pending %v", plan, r.obs.n, r.pending())
	}
}

// TestPlannerCatchUpAfterDowntime: no round for 3 hours; the first round after
// applies the policy (one: the latest passed slot is parked, due in the past).
func TestPlannerCatchUpAfterDowntime(t *testing.T) {
	r := newRig(t)
	r.put(Definition{ID: "m", Route: "orders", Spec: "0 * * * * *", CatchUp: CatchUpOne})
	p := r.planner()
	r.round(p)
	r.clk.Advance(3 * time.Hour)
	r.round(p)
	now := r.clk.Now().UnixMilli()
	late := 0
	for id, due := range r.pending() {
		if due <= now-2000 && due > now-3*3600*1000 { // not the slot at the put, parked on time
			late++
			if _, slot, _ := SlotOf(id); slot != now-now%60000-60000 { // 14:59; 15:00 is within the grace, parked as usual
				t.Fatalf("caught-up slot %s is not the latest passed one", id)
			}
		}
	}
	if late != 1 || r.obs.n[observe.SlotLate] != 1 || r.obs.n[observe.SlotMissed] != 178 { // 12:01 … 14:59, less the one caught up
		t.Fatalf("catch-up one: %d late pending, counts %v; want 1 late, 178 missed", late, r.obs.n)
	}
}
