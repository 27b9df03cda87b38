package jobs

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/redisstore"
	"github.com/delaybridge/delay-bridge/store/storeapi"
	"github.com/delaybridge/delay-bridge/testkit"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const t0 = int64(1_900_000_000_000) // far in the future of the real clock: nothing fires

func newStore(t *testing.T, shards int) storeapi.Store {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := redisstore.New(ctx, testkit.StartRedis(t).Client(), redisstore.Options{Prefix: "j", Cluster: "c", Shards: shards, DoneWindow: time.Hour})
	if err != nil {
		t.Fatalf("redisstore.New: %v", err)
	}
	return s
}

// park parks n messages m-<i> on route route(i) due at due(i).
func park(t *testing.T, s storeapi.Store, n int, route func(int) string, due func(int) int64) map[string]*envelope.Envelope {
	t.Helper()
	out := make(map[string]*envelope.Envelope, n)
	var envs []*envelope.Envelope
	flush := func() {
		if _, _, err := s.Park(context.Background(), envs); err != nil {
			t.Fatalf("Park: %v", err)
		}
		envs = envs[:0]
	}
	for i := range n {
		e := &envelope.Envelope{ID: fmt.Sprintf("m-%06d", i), Route: route(i), SourceBroker: envelope.BrokerKafka,
			Source: "t.delay", DueAt: due(i), ReceivedAt: t0 - 1, Key: []byte(fmt.Sprintf("k%d", i%7)), Payload: []byte("p")}
		out[e.ID] = e
		envs = append(envs, e)
		if len(envs) == 2000 {
			flush()
		}
	}
	if len(envs) > 0 {
		flush()
	}
	return out
}

// runner starts a Runner until the test ends.
func runner(t *testing.T, s storeapi.Store, opt Options) *Runner {
	t.Helper()
	if opt.Instance == "" {
		opt.Instance = "r1"
	}
	if opt.Poll == 0 {
		opt.Poll = 20 * time.Millisecond
	}
	if opt.Pause == 0 {
		opt.Pause = time.Millisecond
	}
	r := New(s, opt)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return r
}

// create records a job, failing the test on error.
func create(t *testing.T, s storeapi.Store, spec storeapi.JobSpec) storeapi.Job {
	t.Helper()
	j, err := s.CreateJob(context.Background(), spec, time.Now().UnixMilli())
	if err != nil {
		t.Fatalf("CreateJob(%+v): %v", spec, err)
	}
	return j
}

// wait polls the job until it ends (or reads want), failing after a generous deadline.
func wait(t *testing.T, s storeapi.Store, id string, want storeapi.JobState) storeapi.Job {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		j, err := s.GetJob(context.Background(), id, time.Now().UnixMilli())
		if err != nil {
			t.Fatalf("GetJob: %v", err)
		}
		switch j.State {
		case want:
			return j
		case storeapi.JobDone, storeapi.JobFailed, storeapi.JobCancelled:
			t.Fatalf("job %s ended %s, want %s: %+v", id, j.State, want, j.Progress)
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s still %s: %+v", id, j.State, j.Progress)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func state(t *testing.T, s storeapi.Store, id string) (storeapi.State, int64) {
	t.Helper()
	st, score, _, err := s.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	return st, score
}

func abRoute(i int) string { return []string{"a", "b"}[i%2] }

func TestCancelByRouteLeavesOtherRoutes(t *testing.T) {
	s := newStore(t, 8)
	msgs := park(t, s, 3000, abRoute, func(i int) int64 { return t0 + int64(i%100) })
	r := runner(t, s, Options{Batch: 128})
	j := create(t, s, storeapi.JobSpec{Kind: storeapi.JobCancel, Filter: storeapi.JobFilter{Route: "a"}})
	r.Kick()
	j = wait(t, s, j.ID, storeapi.JobDone)
	if p := j.Progress; p.Matched != 1500 || p.Done != 1500 || p.Skipped != 0 || p.Failed != 0 {
		t.Fatalf("progress %+v, want 1500 matched and cancelled", p)
	}
	for id, e := range msgs {
		st, _ := state(t, s, id)
		if want := map[string]storeapi.State{"a": storeapi.StateCancelled, "b": storeapi.StatePending}[e.Route]; st != want {
			t.Fatalf("%s of route %s is %s, want %s", id, e.Route, st, want)
		}
	}
}

func TestCancelInflightBroadcasts(t *testing.T) {
	s := newStore(t, 2)
	park(t, s, 300, abRoute, func(int) int64 { return t0 })
	ctx := context.Background()
	// Claim shard 0's messages: they are in flight, held by "pump".
	tok, err := s.AcquireLease(ctx, 0, "pump", time.Minute)
	if err != nil {
		t.Fatalf("AcquireLease: %v", err)
	}
	claimed, _, err := s.Claim(ctx, 0, "pump", tok, t0, t0+60_000, 1000)
	if err != nil || len(claimed) == 0 {
		t.Fatalf("Claim = %d, %v", len(claimed), err)
	}
	var mu sync.Mutex
	var told []string
	r := runner(t, s, Options{Batch: 50, OnInflightCancelled: func(_ context.Context, ids []string) {
		mu.Lock()
		told = append(told, ids...)
		mu.Unlock()
	}})
	j := create(t, s, storeapi.JobSpec{Kind: storeapi.JobCancel, Filter: storeapi.JobFilter{State: storeapi.StateInflight}})
	r.Kick()
	j = wait(t, s, j.ID, storeapi.JobDone)
	want := make([]string, len(claimed))
	for i, e := range claimed {
		want[i] = e.ID
	}
	mu.Lock()
	slices.Sort(want)
	slices.Sort(told)
	mu.Unlock()
	if !slices.Equal(told, want) || j.Progress.Done != int64(len(want)) {
		t.Fatalf("told %d in-flight cancels, done %d; want the %d claimed", len(told), j.Progress.Done, len(want))
	}
	if n, _ := s.CountRange(ctx, storeapi.StatePending, 0, 0); n != int64(300-len(claimed)) {
		t.Fatalf("%d pending left, want %d (an inflight cancel touches pending messages)", n, 300-len(claimed))
	}
}

func TestRescheduleMovesDueTimesExactly(t *testing.T) {
	cases := []struct {
		name  string
		spec  storeapi.JobSpec
		moved func(old int64) int64
	}{
		{"shift later", storeapi.JobSpec{ShiftMs: 7}, func(old int64) int64 { return old + 7 }},
		{"shift earlier", storeapi.JobSpec{ShiftMs: -5}, func(old int64) int64 { return old - 5 }},
		{"shift later by a lot", storeapi.JobSpec{ShiftMs: 3_600_000}, func(old int64) int64 { return old + 3_600_000 }},
		{"to a time inside the range", storeapi.JobSpec{DueAt: t0 + 20}, func(int64) int64 { return t0 + 20 }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStore(t, 4)
			// 2000 messages over 50 ms: forty share each due time (ties ordered by id).
			msgs := park(t, s, 2000, abRoute, func(i int) int64 { return t0 + int64(i%50) })
			r := runner(t, s, Options{Batch: 97})
			spec := c.spec
			spec.Kind, spec.Filter = storeapi.JobReschedule, storeapi.JobFilter{Route: "b"}
			j := create(t, s, spec)
			r.Kick()
			j = wait(t, s, j.ID, storeapi.JobDone)
			if p := j.Progress; p.Matched != 1000 || p.Done != 1000 || p.Skipped+p.Failed != 0 {
				t.Fatalf("progress %+v, want 1000 matched and moved", p)
			}
			for id, e := range msgs {
				_, due := state(t, s, id)
				want := e.DueAt
				if e.Route == "b" {
					want = c.moved(e.DueAt)
				}
				if due != want {
					t.Fatalf("%s (route %s) due %d, want %d (was %d)", id, e.Route, due, want, e.DueAt)
				}
			}
		})
	}
}

func TestRequeueAndPurgeDead(t *testing.T) {
	s := newStore(t, 4)
	ctx := context.Background()
	var dead []*envelope.Envelope
	for i := range 600 {
		dead = append(dead, &envelope.Envelope{ID: fmt.Sprintf("d-%04d", i), Route: abRoute(i), SourceBroker: envelope.BrokerKafka,
			Source: "t", DueAt: t0, Payload: []byte("x"), Attempt: 5, Reason: "publish failed"})
	}
	if _, err := s.Bury(ctx, dead, t0); err != nil {
		t.Fatalf("Bury: %v", err)
	}
	var mu sync.Mutex
	woken := 0
	r := runner(t, s, Options{Batch: 64, OnWake: func(_ context.Context, minDue map[int]int64) {
		mu.Lock()
		woken += len(minDue)
		mu.Unlock()
	}})
	j := create(t, s, storeapi.JobSpec{Kind: storeapi.JobRequeueDead, Filter: storeapi.JobFilter{Route: "a"}})
	r.Kick()
	if j = wait(t, s, j.ID, storeapi.JobDone); j.Progress.Done != 300 {
		t.Fatalf("requeue progress %+v", j.Progress)
	}
	p := create(t, s, storeapi.JobSpec{Kind: storeapi.JobPurgeDead})
	r.Kick()
	if p = wait(t, s, p.ID, storeapi.JobDone); p.Progress.Done != 300 || p.Progress.Matched != 300 {
		t.Fatalf("purge progress %+v", p.Progress)
	}
	for _, e := range dead {
		st, _, got, err := s.Get(ctx, e.ID)
		if err != nil {
			t.Fatalf("Get: %v", err)
		}
		if e.Route == "a" && (st != storeapi.StatePending || got.Attempt != 0 || got.Reason != "") {
			t.Fatalf("%s: %s %+v, want requeued with attempts reset", e.ID, st, got)
		}
		if e.Route == "b" && st != storeapi.StateUnknown {
			t.Fatalf("%s: %s, want purged", e.ID, st)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if woken == 0 {
		t.Fatal("requeued messages were never announced to the pumps")
	}
}

func TestDryRunChangesNothing(t *testing.T) {
	s := newStore(t, 8)
	msgs := park(t, s, 2500, abRoute, func(i int) int64 { return t0 + int64(i%300) })
	r := runner(t, s, Options{})
	count := func(keep func(*envelope.Envelope) bool) int64 {
		var n int64
		for _, e := range msgs {
			if keep(e) {
				n++
			}
		}
		return n
	}
	cases := []struct {
		filter storeapi.JobFilter
		keep   func(*envelope.Envelope) bool
	}{
		{storeapi.JobFilter{From: t0 + 100, To: t0 + 199}, func(e *envelope.Envelope) bool { return e.DueAt >= t0+100 && e.DueAt <= t0+199 }},
		{storeapi.JobFilter{Route: "a", KeyPrefix: "k3"}, func(e *envelope.Envelope) bool { return e.Route == "a" && string(e.Key) == "k3" }},
	}
	for _, c := range cases {
		j := create(t, s, storeapi.JobSpec{Kind: storeapi.JobCancel, DryRun: true, Filter: c.filter, Sample: 5})
		r.Kick()
		j = wait(t, s, j.ID, storeapi.JobDone)
		if want := count(c.keep); j.Progress.Matched != want || !j.Progress.Exact || j.Progress.Done != 0 {
			t.Fatalf("dry run %+v: %+v, want exactly %d matched, none done", c.filter, j.Progress, want)
		}
		if len(j.Progress.Sample) != 5 {
			t.Fatalf("sample of %d, want 5", len(j.Progress.Sample))
		}
		for _, smp := range j.Progress.Sample {
			if e := msgs[smp.ID]; e == nil || !c.keep(e) || smp.Score != e.DueAt {
				t.Fatalf("sample %+v does not match the filter", smp)
			}
		}
	}
	for id, e := range msgs {
		if st, due := state(t, s, id); st != storeapi.StatePending || due != e.DueAt {
			t.Fatalf("%s is %s at %d after dry runs", id, st, due)
		}
	}
}

// TestDryRunBudget: a filtered count that runs out of its scan budget says so.
func TestDryRunBudget(t *testing.T) {
	s := newStore(t, 4)
	park(t, s, 5000, abRoute, func(i int) int64 { return t0 + int64(i) })
	r := runner(t, s, Options{DryRunMaxScan: 2500})
	j := create(t, s, storeapi.JobSpec{Kind: storeapi.JobCancel, DryRun: true, Filter: storeapi.JobFilter{Route: "b"}})
	r.Kick()
	j = wait(t, s, j.ID, storeapi.JobDone)
	if p := j.Progress; p.Exact || p.Matched < 1000 || p.Matched >= 2500 {
		t.Fatalf("budgeted dry run %+v, want an inexact lower bound of the 2500", p)
	}
}

// TestPreviewFilter: a state-and-range filter is counted exactly by ZCOUNT; a route
// filter by browsing, exactly without a budget and as a lower bound beyond one; the
// sample is the first matches in browse order.
func TestPreviewFilter(t *testing.T) {
	s := newStore(t, 8)
	park(t, s, 4000, abRoute, func(i int) int64 { return t0 + int64(i) })
	ctx := context.Background()
	p, err := PreviewFilter(ctx, s, storeapi.JobFilter{State: storeapi.StatePending, From: t0 + 1000, To: t0 + 2999}, 3, 0)
	if err != nil || p.Matched != 2000 || !p.Exact || len(p.Sample) != 3 || p.Sample[0].Envelope.ID != "m-001000" {
		t.Fatalf("range preview %+v, %v", p, err)
	}
	p, err = PreviewFilter(ctx, s, storeapi.JobFilter{State: storeapi.StatePending, Route: "b"}, 2, 0)
	if err != nil || p.Matched != 2000 || !p.Exact || len(p.Sample) != 2 || p.Sample[0].Envelope.ID != "m-000001" {
		t.Fatalf("route preview %+v, %v", p, err)
	}
	p, err = PreviewFilter(ctx, s, storeapi.JobFilter{State: storeapi.StatePending, Route: "b"}, 2, 1500)
	if err != nil || p.Exact || p.Matched == 0 || p.Matched >= 2000 {
		t.Fatalf("budgeted route preview %+v, %v; want an inexact lower bound", p, err)
	}
}
