package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/envelope"
)

var sourceCases = []struct {
	name string
	run  func(*testing.T, SourceHarness)
}{
	{"DeliversRecordsWithHeaders", sourceDelivers},
	{"InvalidAndCancelRecordsAreHandedOver", sourceInvalidAndCancel},
	{"ManyRecordsInOrderOneBatchAtATime", sourceManyInOrder},
	{"FailedBatchIsHandedAgainUnchanged", sourceRetriesSameBatch},
	{"RestartRedeliversOnlyUnacknowledged", sourceRestart},
	{"StopWhileHandlerBlocks", sourceStopWhileBlocked},
	{"StopWhenIdle", sourceStopIdle},
}

// collector is a Handler that records what it was handed.
type collector struct {
	mu      sync.Mutex
	batches [][]ingress.Item
	// copies are deep copies of each batch taken when it was handed over.
	copies [][]ingress.Item
	// fail decides the outcome of call n (0-based); nil means success.
	fail    func(call int, items []ingress.Item) error
	calls   int
	active  atomic.Int32
	overlap atomic.Bool
	// acked are the items of batches the handler returned nil for.
	acked []ingress.Item
}

func (c *collector) handle(ctx context.Context, items []ingress.Item) error {
	if c.active.Add(1) > 1 {
		c.overlap.Store(true)
	}
	defer c.active.Add(-1)
	c.mu.Lock()
	call := c.calls
	c.calls++
	c.batches = append(c.batches, append([]ingress.Item(nil), items...))
	c.copies = append(c.copies, cloneItems(items))
	c.mu.Unlock()
	var err error
	if c.fail != nil {
		err = c.fail(call, items)
	}
	if err == nil {
		c.mu.Lock()
		c.acked = append(c.acked, items...)
		c.mu.Unlock()
	}
	return err
}

// cloneItems copies items and their envelopes (payload, key, headers).
func cloneItems(items []ingress.Item) []ingress.Item {
	out := make([]ingress.Item, len(items))
	for i, it := range items {
		out[i] = it
		if it.Env != nil {
			e := *it.Env
			e.Payload, e.Key = bytes.Clone(e.Payload), bytes.Clone(e.Key)
			e.Headers = append([]envelope.Header(nil), e.Headers...)
			out[i].Env = &e
		}
	}
	return out
}

func (c *collector) snapshot() (batches [][]ingress.Item, acked []ingress.Item) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]ingress.Item(nil), c.batches...), append([]ingress.Item(nil), c.acked...)
}

// waitFor polls cond until it holds or ArriveWithin passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(ArriveWithin)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("conformance: %s: not within %s", what, ArriveWithin)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitAcked waits until the handler acknowledged n items and returns them.
func (c *collector) waitAcked(t *testing.T, n int) []ingress.Item {
	t.Helper()
	var acked []ingress.Item
	waitFor(t, fmt.Sprintf("%d items acknowledged", n), func() bool {
		_, acked = c.snapshot()
		return len(acked) >= n
	})
	return acked
}

// running is a Source's Run in a goroutine owned by the test.
type running struct {
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func start(t *testing.T, src ingress.Source, h ingress.Handler) *running {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- src.Run(ctx, h) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels Run and checks that it returns nil within StopWithin.
func (r *running) stop(t *testing.T) {
	t.Helper()
	r.once.Do(func() {
		r.cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("conformance: Run returned %v after cancel, want nil", err)
			}
		case <-time.After(StopWithin):
			t.Errorf("conformance: Run did not return within %s of cancel", StopWithin)
		}
	})
}

// exits reports Run's result if it ended early (it must not, while ctx is live).
func (r *running) exits() (error, bool) {
	select {
	case err := <-r.done:
		r.done <- err
		return err, true
	default:
		return nil, false
	}
}

func hdrText(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	}
	return "", false
}

func ids(items []ingress.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		if it.CancelID != "" {
			out[i] = "cancel:" + it.CancelID
		} else if it.Env != nil {
			out[i] = it.Env.ID
		}
	}
	return out
}

// sent is one record sourceDelivers produced.
type sent struct {
	key, payload []byte
	headers      map[string]string
}

// checkDelivered checks item i against the record w produced for it, received between
// before and after.
func checkDelivered(t *testing.T, h SourceHarness, f SourceFixture, i int, it ingress.Item, w sent, before, after time.Time) {
	t.Helper()
	if it.CancelID != "" || it.Invalid != "" || it.Env == nil {
		t.Fatalf("item %d: want a message to park, got %+v", i, it)
	}
	e := it.Env
	if e.ID != w.headers[envelope.HeaderMessageID] {
		t.Errorf("item %d: id %q, want %q (order must be kept)", i, e.ID, w.headers[envelope.HeaderMessageID])
	}
	if !bytes.Equal(e.Payload, w.payload) {
		t.Errorf("item %d: payload %q, want %q", i, e.Payload, w.payload)
	}
	if h.Keys && !bytes.Equal(e.Key, w.key) {
		t.Errorf("item %d: key %q, want %q", i, e.Key, w.key)
	}
	if e.Source != f.Source || e.SourceBroker != h.Broker {
		t.Errorf("item %d: source %s/%s, want %s/%s", i, e.SourceBroker, e.Source, h.Broker, f.Source)
	}
	for k, v := range w.headers {
		got, ok := e.Header(k)
		if !ok {
			t.Errorf("item %d: header %s missing", i, k)
			continue
		}
		if s, ok := hdrText(got); !ok || s != v {
			t.Errorf("item %d: header %s = %#v, want %q", i, k, got, v)
		}
	}
	// x-delay counts from the record's base time, which lies between before
	// producing and receiving.
	if e.DueAt < before.UnixMilli()-5000+60000 || e.DueAt > after.UnixMilli()+60000 {
		t.Errorf("item %d: due %d not 60 s after a time in [%d, %d]", i, e.DueAt, before.UnixMilli(), after.UnixMilli())
	}
	if e.ReceivedAt < before.UnixMilli()-1000 || e.ReceivedAt > after.UnixMilli()+1000 {
		t.Errorf("item %d: received_at %d outside the run [%d, %d]", i, e.ReceivedAt, before.UnixMilli(), after.UnixMilli())
	}
	if e.Route == "" {
		t.Errorf("item %d: Env.Route is empty", i)
	}
}

func sourceDelivers(t *testing.T, h SourceHarness) {
	f := h.Fresh(t)
	p := uniq(t)
	const n = 20
	var want []sent
	for i := 0; i < n; i++ {
		s := sent{
			key:     []byte(fmt.Sprintf("key-%d", i%3)),
			payload: append([]byte(fmt.Sprintf("payload %d \x00\xff ", i)), bytes.Repeat([]byte{byte(i)}, i)...),
			headers: map[string]string{
				envelope.HeaderMessageID: fmt.Sprintf("%s-%d", p, i),
				envelope.HeaderDelay:     "60000",
				"traceparent":            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
				"x-custom":               "value " + strconv.Itoa(i),
			},
		}
		want = append(want, s)
		f.Produce(t, s.key, s.payload, s.headers)
	}
	// One record without x-message-id: the source gives it a stable default id.
	f.Produce(t, []byte("k"), []byte("no id"), map[string]string{envelope.HeaderDelay: "1000"})

	c := &collector{}
	before := time.Now()
	r := start(t, f.NewSource(t), c.handle)
	acked := c.waitAcked(t, n+1)
	r.stop(t)
	after := time.Now()
	if c.overlap.Load() {
		t.Error("handler was called concurrently; batches must be handed one at a time")
	}
	if len(acked) != n+1 {
		t.Fatalf("got %d items, want %d (duplicates without a failure?): %v", len(acked), n+1, ids(acked))
	}
	for i, it := range acked[:n] {
		checkDelivered(t, h, f, i, it, want[i], before, after)
	}
	last := acked[n]
	if last.Env == nil || last.Env.ID == "" || last.Invalid != "" || string(last.Env.Payload) != "no id" {
		t.Fatalf("record without x-message-id: got %+v", last)
	}
	// The default id must differ from every explicit id; that a redelivery derives the
	// same default id is checked by StopWhileHandlerBlocks.
	for _, it := range acked[:n] {
		if it.Env.ID == last.Env.ID {
			t.Errorf("default id %q collides with an explicit id", last.Env.ID)
		}
	}
}

func sourceInvalidAndCancel(t *testing.T, h SourceHarness) {
	f := h.Fresh(t)
	p := uniq(t)
	f.Produce(t, nil, []byte("bad delay"), map[string]string{envelope.HeaderMessageID: p + "-bad", envelope.HeaderDelay: "soon"})
	f.Produce(t, nil, []byte("too far"), map[string]string{envelope.HeaderMessageID: p + "-far", envelope.HeaderDelay: strconv.FormatInt(int64(100*365*24*time.Hour/time.Millisecond), 10)})
	f.Produce(t, nil, []byte("not allowed"), map[string]string{envelope.HeaderMessageID: p + "-target", envelope.HeaderDelayTarget: "conformance-not-on-any-allow-list"})
	f.Produce(t, nil, nil, map[string]string{envelope.HeaderCancel: p + "-bad"})
	f.Produce(t, nil, []byte("good"), map[string]string{envelope.HeaderMessageID: p + "-good", envelope.HeaderDelay: "0"})

	c := &collector{}
	r := start(t, f.NewSource(t), c.handle)
	acked := c.waitAcked(t, 5)
	r.stop(t)
	want := []struct{ id, invalid, cancel string }{
		{p + "-bad", ingress.InvalidBadDelay, ""},
		{p + "-far", ingress.InvalidDelayOutOfRange, ""},
		{p + "-target", ingress.InvalidTargetNotAllowed, ""},
		{"", "", p + "-bad"},
		{p + "-good", "", ""},
	}
	if len(acked) != len(want) {
		t.Fatalf("got %d items %v, want %d", len(acked), ids(acked), len(want))
	}
	for i, w := range want {
		it := acked[i]
		if it.CancelID != w.cancel || it.Invalid != w.invalid {
			t.Errorf("item %d: cancel %q invalid %q, want cancel %q invalid %q", i, it.CancelID, it.Invalid, w.cancel, w.invalid)
		}
		if w.cancel != "" {
			continue
		}
		if it.Env == nil || it.Env.ID != w.id {
			t.Errorf("item %d: env %+v, want id %q", i, it.Env, w.id)
			continue
		}
		if (w.invalid != "") != (it.Env.Reason != "") {
			t.Errorf("item %d: reason %q (invalid %q)", i, it.Env.Reason, w.invalid)
		}
	}
}

func sourceManyInOrder(t *testing.T, h SourceHarness) {
	f := h.Fresh(t)
	p := uniq(t)
	const n = 300
	for i := 0; i < n; i++ {
		f.Produce(t, []byte("k"), []byte(strconv.Itoa(i)), map[string]string{envelope.HeaderMessageID: fmt.Sprintf("%s-%d", p, i)})
	}
	c := &collector{}
	r := start(t, f.NewSource(t), c.handle)
	acked := c.waitAcked(t, n)
	r.stop(t)
	if c.overlap.Load() {
		t.Error("handler was called concurrently; batches must be handed one at a time")
	}
	if len(acked) != n {
		t.Fatalf("got %d items, want %d", len(acked), n)
	}
	for i, it := range acked {
		if want := fmt.Sprintf("%s-%d", p, i); it.Env == nil || it.Env.ID != want {
			t.Fatalf("item %d: id %v, want %s (source order)", i, ids(acked[i:i+1]), want)
		}
	}
	batches, _ := c.snapshot()
	for i, b := range batches {
		if len(b) == 0 {
			t.Errorf("batch %d is empty: the handler must never be called with nothing", i)
		}
	}
}

var errPark = errors.New("conformance: redis is down (simulated park failure)")

func sourceRetriesSameBatch(t *testing.T, h SourceHarness) {
	f := h.Fresh(t)
	p := uniq(t)
	const n = 10
	for i := 0; i < n; i++ {
		f.Produce(t, nil, []byte(strconv.Itoa(i)), map[string]string{envelope.HeaderMessageID: fmt.Sprintf("%s-%d", p, i)})
	}
	c := &collector{fail: func(call int, _ []ingress.Item) error {
		if call < 3 {
			return errPark
		}
		return nil
	}}
	r := start(t, f.NewSource(t), c.handle)
	acked := c.waitAcked(t, n)
	if err, ended := r.exits(); ended {
		t.Fatalf("Run ended after handler failures (%v); it must back off and retry", err)
	}
	r.stop(t)
	batches, _ := c.snapshot()
	if len(batches) < 4 {
		t.Fatalf("handler called %d times, want at least 4", len(batches))
	}
	first := fmt.Sprint(ids(batches[0]))
	for i := 1; i <= 3; i++ {
		if got := fmt.Sprint(ids(batches[i])); got != first {
			t.Fatalf("call %d after a failure got %s, want the same records %s (nothing fetched beyond a failed batch)", i, got, first)
		}
		// Parsed once (ingress.Loop): the same envelopes, unchanged, not a new parse.
		c.mu.Lock()
		same := reflect.DeepEqual(c.copies[i], c.copies[0])
		c.mu.Unlock()
		if !same {
			t.Errorf("call %d after a failure was handed items that differ from the first call's", i)
		}
		for k := range batches[i] {
			if batches[i][k].Env != batches[0][k].Env {
				t.Fatalf("call %d after a failure: item %d is a new envelope; a failed batch must be handed again as the same items, parsed once", i, k)
			}
		}
	}
	seen := map[string]int{}
	for _, it := range acked {
		seen[it.Env.ID]++
	}
	for i := 0; i < n; i++ {
		if id := fmt.Sprintf("%s-%d", p, i); seen[id] != 1 {
			t.Errorf("%s acknowledged %d times, want once", id, seen[id])
		}
	}
	for i, it := range acked {
		if want := fmt.Sprintf("%s-%d", p, i); it.Env.ID != want {
			t.Fatalf("acknowledged item %d is %s, want %s (order)", i, it.Env.ID, want)
		}
	}
}

func sourceRestart(t *testing.T, h SourceHarness) {
	f := h.Fresh(t)
	p := uniq(t)
	// 1. A first bridge parks (acknowledges) n records and stops.
	const n, m = 5, 5
	for i := 0; i < n; i++ {
		f.Produce(t, nil, []byte("old"), map[string]string{envelope.HeaderMessageID: fmt.Sprintf("%s-old-%d", p, i)})
	}
	c1 := &collector{}
	r1 := start(t, f.NewSource(t), c1.handle)
	c1.waitAcked(t, n)
	r1.stop(t)

	// 2. A second bridge gets m new records but cannot park them (Redis down) and stops.
	for i := 0; i < m; i++ {
		f.Produce(t, nil, []byte("new"), map[string]string{envelope.HeaderMessageID: fmt.Sprintf("%s-new-%d", p, i)})
	}
	c2 := &collector{fail: func(int, []ingress.Item) error { return errPark }}
	r2 := start(t, f.NewSource(t), c2.handle)
	waitFor(t, "the failing handler to be called", func() bool { b, _ := c2.snapshot(); return len(b) > 0 })
	r2.stop(t)
	b2, _ := c2.snapshot()
	for _, b := range b2 {
		for _, it := range b {
			if it.Env != nil && it.Env.Payload != nil && string(it.Env.Payload) == "old" {
				t.Fatalf("acknowledged record %s was redelivered after a restart", it.Env.ID)
			}
		}
	}

	// 3. A third bridge sees every unacknowledged record again, and none acknowledged.
	c3 := &collector{}
	r3 := start(t, f.NewSource(t), c3.handle)
	acked := c3.waitAcked(t, m)
	r3.stop(t)
	var got []string
	for _, it := range acked {
		if string(it.Env.Payload) == "old" {
			t.Errorf("acknowledged record %s was redelivered after a restart", it.Env.ID)
			continue
		}
		got = append(got, it.Env.ID)
	}
	for i := 0; i < m; i++ {
		want := fmt.Sprintf("%s-new-%d", p, i)
		if i >= len(got) || got[i] != want {
			t.Fatalf("after restart got %v, want every unacknowledged record in order (%s at %d)", got, want, i)
		}
	}
}

func sourceStopWhileBlocked(t *testing.T, h SourceHarness) {
	f := h.Fresh(t)
	p := uniq(t)
	// No x-message-id: the redelivery below must derive the same default id.
	f.Produce(t, nil, []byte("x"), map[string]string{"x-test": p})
	release := make(chan struct{})
	var released sync.Once
	t.Cleanup(func() { released.Do(func() { close(release) }) })
	// The handler ignores its context: a stuck Redis call. Run must still return.
	c := &collector{fail: func(int, []ingress.Item) error { <-release; return nil }}
	r := start(t, f.NewSource(t), c.handle)
	var first [][]ingress.Item
	waitFor(t, "the handler to be called", func() bool { first, _ = c.snapshot(); return len(first) > 0 })
	r.stop(t)
	released.Do(func() { close(release) })
	if len(first[0]) != 1 || first[0][0].Env == nil || first[0][0].Env.ID == "" {
		t.Fatalf("blocked handler got %v, want the one record with a default id", ids(first[0]))
	}
	defaultID := first[0][0].Env.ID

	// Nothing was acknowledged: a new Source sees the record again.
	c2 := &collector{}
	r2 := start(t, f.NewSource(t), c2.handle)
	acked := c2.waitAcked(t, 1)
	r2.stop(t)
	if v, _ := acked[0].Env.Header("x-test"); v == nil || string(acked[0].Env.Payload) != "x" {
		t.Fatalf("after stop got %v, want the unacknowledged record again", ids(acked))
	}
	if acked[0].Env.ID != defaultID {
		t.Errorf("redelivered record has default id %q, first delivery %q: it must be stable", acked[0].Env.ID, defaultID)
	}

	// A handler that honours its context and fails with ctx.Err() does not make Run fail.
	f.Produce(t, nil, []byte("y"), map[string]string{envelope.HeaderMessageID: p + "-1"})
	ctxAware := make(chan struct{}, 1)
	r3 := start(t, f.NewSource(t), func(ctx context.Context, _ []ingress.Item) error {
		select {
		case ctxAware <- struct{}{}:
		default:
		}
		<-ctx.Done()
		return fmt.Errorf("park: %w", ctx.Err())
	})
	select {
	case <-ctxAware:
	case <-time.After(ArriveWithin):
		t.Fatal("context-aware handler not called")
	}
	r3.stop(t)
}

func sourceStopIdle(t *testing.T, h SourceHarness) {
	f := h.Fresh(t)
	c := &collector{}
	src := f.NewSource(t)
	if src.Name() == "" {
		t.Error("Name() is empty")
	}
	r := start(t, src, c.handle)
	time.Sleep(200 * time.Millisecond) // let it connect; not an assertion
	if err, ended := r.exits(); ended {
		t.Fatalf("Run returned %v with a live context", err)
	}
	r.stop(t)
	if b, _ := c.snapshot(); len(b) != 0 {
		t.Fatalf("handler called %d times on an empty source", len(b))
	}
	// A context cancelled before Run starts: Run returns nil at once.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	done := make(chan error, 1)
	go func() { done <- f.NewSource(t).Run(ctx, c.handle) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run with a cancelled context returned %v, want nil", err)
		}
	case <-time.After(StopWithin):
		t.Fatal("Run with a cancelled context did not return")
	}
}
