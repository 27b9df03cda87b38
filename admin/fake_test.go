package admin

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// fakeBackend is an in-memory Backend with the documented semantics, enough to check
// the HTTP layer. It is not a stand-in for Redis: the real Backend is app.
type fakeBackend struct {
	mu         sync.Mutex
	now        time.Time
	msgs       map[string]*Message
	seq        int
	lastReq    ScheduleRequest
	lastWhen   When
	lastLim    int
	lastQuery  Query
	lastFilter Filter
	jobs       map[string]*Job
	jobOrder   []string
	failWith   error         // returned by every call when set
	block      chan struct{} // Stats waits on it when set
	notReady   error
	scheds     map[string]*ScheduleInfo // fake_schedules_test.go
}

func newFake() *fakeBackend {
	f := &fakeBackend{now: time.UnixMilli(1_700_000_000_000), msgs: map[string]*Message{}, jobs: map[string]*Job{}}
	f.msgs["m1"] = &Message{ID: "m1", State: StatePending, DueAt: 1_700_000_005_000, Route: "orders",
		Source: "orders.delay", SourceBroker: "kafka", Attempt: 0, Headers: map[string]string{"traceparent": "00-ab"}, PayloadSize: 3,
		RawKey: []byte("cust-7"), RawPayload: []byte("abc")}
	f.msgs["orders.delay/0/42"] = &Message{ID: "orders.delay/0/42", State: StatePending, DueAt: 1, Route: "orders"}
	f.msgs["fly"] = &Message{ID: "fly", State: StateInflight, Route: "orders", Attempt: 1}
	f.msgs["gone"] = &Message{ID: "gone", State: StateDelivered}
	f.msgs["d1"] = &Message{ID: "d1", State: StateDead, Route: "orders", Reason: "bad_delay", DeadAt: 5, Attempt: 10}
	return f
}

func (f *fakeBackend) due(w When) int64 {
	if !w.DeliverAt.IsZero() {
		return w.DeliverAt.UnixMilli()
	}
	return f.now.Add(max(w.Delay, 0)).UnixMilli()
}

func (f *fakeBackend) Schedule(_ context.Context, req ScheduleRequest) (Scheduled, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return Scheduled{}, f.failWith
	}
	f.lastReq = req
	if !knownRoute(req.Route) {
		return Scheduled{}, Invalid("route", "unknown route %q", req.Route)
	}
	if req.When.Delay > 365*24*time.Hour {
		return Scheduled{}, Invalid("delay_ms", "beyond limits.max_delay")
	}
	if req.ID == "" {
		f.seq++
		req.ID = fmt.Sprintf("gen-%d", f.seq)
	}
	if m, ok := f.msgs[req.ID]; ok {
		return Scheduled{ID: req.ID, DueAt: m.DueAt, Duplicate: true}, nil
	}
	d := f.due(req.When)
	f.msgs[req.ID] = &Message{ID: req.ID, State: StatePending, DueAt: d, Route: req.Route, Source: "http",
		SourceBroker: "http", Headers: req.Headers, PayloadSize: len(req.Payload), ReceivedAt: f.now.UnixMilli(),
		RoutingKey: req.RoutingKey, RawKey: req.Key, RawPayload: req.Payload}
	return Scheduled{ID: req.ID, DueAt: d}, nil
}

func (f *fakeBackend) Get(_ context.Context, id string) (Message, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return Message{}, f.failWith
	}
	m, ok := f.msgs[id]
	if !ok {
		return Message{}, fmt.Errorf("get %q: %w", id, ErrNotFound)
	}
	return *m, nil
}

func (f *fakeBackend) Cancel(_ context.Context, id string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return "", f.failWith
	}
	m, ok := f.msgs[id]
	if !ok {
		return "", fmt.Errorf("cancel %q: %w", id, ErrNotFound)
	}
	if m.State == StateDelivered || m.State == StateCancelled {
		return m.State, fmt.Errorf("cancel %q: already %s: %w", id, m.State, ErrConflict)
	}
	prior := m.State
	f.msgs[id] = &Message{ID: id, State: StateCancelled}
	return prior, nil
}

func (f *fakeBackend) Reschedule(_ context.Context, id string, w When) (Scheduled, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return Scheduled{}, f.failWith
	}
	f.lastWhen = w
	m, ok := f.msgs[id]
	if !ok {
		return Scheduled{}, fmt.Errorf("reschedule %q: %w", id, ErrNotFound)
	}
	if m.State == StateInflight || m.State == StateDelivered || m.State == StateCancelled {
		return Scheduled{}, fmt.Errorf("reschedule %q: message is %s: %w", id, m.State, ErrConflict)
	}
	m.DueAt, m.State = f.due(w), StatePending
	return Scheduled{ID: id, DueAt: m.DueAt}, nil
}

func (f *fakeBackend) Stats(ctx context.Context) (Stats, error) {
	if f.block != nil {
		select {
		case <-f.block:
		case <-ctx.Done():
			return Stats{}, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return Stats{}, f.failWith
	}
	return Stats{
		Totals: Counts{Pending: 3, Inflight: 1, Dead: 1},
		Shards: []ShardStats{
			{Shard: 0, Counts: Counts{Pending: 2, Inflight: 1}, NextDue: 1, Owner: "a-1"},
			{Shard: 1, Counts: Counts{Pending: 1, Dead: 1}, Owner: ""},
		},
		Routes:   map[string]Counts{"orders": {Pending: 3, Inflight: 1, Dead: 1}},
		Instance: "a-1", Members: []string{"a-1"},
	}, nil
}

func (f *fakeBackend) RequeueDead(_ context.Context, id string) (Scheduled, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return Scheduled{}, f.failWith
	}
	m, ok := f.msgs[id]
	if !ok || m.State != StateDead {
		return Scheduled{}, fmt.Errorf("requeue %q: %w", id, ErrNotFound)
	}
	m.State, m.DueAt, m.Attempt, m.Reason = StatePending, f.now.UnixMilli(), 0, ""
	return Scheduled{ID: id, DueAt: m.DueAt}, nil
}

func (f *fakeBackend) PurgeDead(_ context.Context, flt Filter) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return 0, f.failWith
	}
	f.lastFilter = flt
	var n int64
	for id, m := range f.msgs {
		if m.State == StateDead && (flt.Route == "" || m.Route == flt.Route) {
			delete(f.msgs, id)
			n++
		}
	}
	return n, nil
}

func (f *fakeBackend) Ready(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.notReady
}
