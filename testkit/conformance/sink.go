package conformance

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
)

var sinkCases = []struct {
	name string
	run  func(*testing.T, SinkHarness)
}{
	{"PreservesKeyPayloadHeaders", sinkPreserves},
	{"ErrorSliceMatchesInput", sinkErrorSlice},
	{"TargetOverrideAndUnknownRoute", sinkTargets},
	{"MissingTargetFailsAlone", sinkMissingTarget},
	{"ConcurrentPublishers", sinkConcurrent},
	{"CancelledContext", sinkCancelled},
	{"PublishAfterClose", sinkAfterClose},
}

// publishWithin calls Publish and fails the test if it does not return within ArriveWithin.
func publishWithin(t *testing.T, ctx context.Context, s egress.Sink, msgs []*envelope.Envelope) []error {
	t.Helper()
	done := make(chan []error, 1)
	go func() { done <- s.Publish(ctx, msgs) }()
	select {
	case errs := <-done:
		if len(errs) != len(msgs) {
			t.Fatalf("Publish of %d messages returned %d errors, want one slot per message", len(msgs), len(errs))
		}
		return errs
	case <-time.After(ArriveWithin):
		t.Fatalf("Publish of %d messages did not return within %s", len(msgs), ArriveWithin)
		return nil
	}
}

func mustPublish(t *testing.T, s egress.Sink, msgs []*envelope.Envelope) {
	t.Helper()
	for i, err := range publishWithin(t, context.Background(), s, msgs) {
		if err != nil {
			t.Fatalf("message %d (%s): %v", i, msgs[i].ID, err)
		}
	}
}

func byID(t *testing.T, got []Received) map[string]Received {
	t.Helper()
	out := map[string]Received{}
	for _, r := range got {
		id := r.Headers[envelope.HeaderMessageID]
		if _, dup := out[id]; dup {
			t.Errorf("message %q arrived twice", id)
		}
		out[id] = r
	}
	return out
}

func sinkPreserves(t *testing.T, h SinkHarness) {
	f := h.Fresh(t)
	p := uniq(t)
	now := time.Now().UnixMilli()
	type expect struct {
		env     *envelope.Envelope
		headers map[string]string // exact headers expected (all of them)
	}
	var cases []expect
	add := func(env *envelope.Envelope, headers map[string]string) {
		env.Route, env.SourceBroker = f.Route, envelope.BrokerKafka
		if env.Source == "" {
			env.Source = "orders.delay"
		}
		env.DueAt, env.ReceivedAt = now+int64(len(cases)), now-1000
		headers[envelope.HeaderMessageID] = env.ID
		headers[envelope.HeaderDueAt] = strconv.FormatInt(env.DueAt, 10)
		headers[envelope.HeaderSource] = env.Source
		headers[envelope.HeaderAttempt] = strconv.Itoa(int(env.Attempt) + 1)
		cases = append(cases, expect{env, headers})
	}
	binary := make([]byte, 256)
	for i := range binary {
		binary[i] = byte(i)
	}
	add(&envelope.Envelope{
		ID: p + "-text", Key: []byte("customer-42"), Payload: []byte(`{"order":1}`),
		Headers: []envelope.Header{
			{Key: "traceparent", Value: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
			{Key: envelope.HeaderDelay, Value: "1500"},
			{Key: "x-custom", Value: "kept as is"},
			{Key: envelope.HeaderMessageID, Value: "stale-id"},
			{Key: envelope.HeaderAttempt, Value: "9"},
		},
	}, map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", envelope.HeaderDelay: "-1500", "x-custom": "kept as is"})
	add(&envelope.Envelope{
		ID: p + "-binary", Key: []byte{0, 1, 2, 0xff}, Payload: binary, Attempt: 2, Source: "billing.delay",
		Headers: []envelope.Header{{Key: envelope.HeaderDelay, Value: int64(2500)}, {Key: "x-int", Value: int32(7)}},
	}, map[string]string{envelope.HeaderDelay: "-2500", "x-int": "7"})
	add(&envelope.Envelope{
		ID: p + "-already-negative", Payload: []byte("p"),
		Headers: []envelope.Header{{Key: envelope.HeaderDelay, Value: "-5"}},
	}, map[string]string{envelope.HeaderDelay: "-5"})
	add(&envelope.Envelope{ID: p + "-empty", Payload: []byte{}}, map[string]string{})

	msgs := make([]*envelope.Envelope, len(cases))
	for i, c := range cases {
		msgs[i] = c.env
	}
	mustPublish(t, f.Sink, msgs)
	got := byID(t, f.Consume(t, len(cases), ArriveWithin))
	for _, c := range cases {
		r, ok := got[c.env.ID]
		if !ok {
			t.Errorf("%s did not arrive (x-message-id must be the envelope id)", c.env.ID)
			continue
		}
		if !bytes.Equal(r.Payload, c.env.Payload) {
			t.Errorf("%s: payload %q, want %q", c.env.ID, r.Payload, c.env.Payload)
		}
		if h.Keys && !bytes.Equal(r.Key, c.env.Key) {
			t.Errorf("%s: key %q, want %q", c.env.ID, r.Key, c.env.Key)
		}
		for k, v := range c.headers {
			if g, ok := r.Headers[k]; !ok || g != v {
				t.Errorf("%s: header %s = %q (present %v), want %q", c.env.ID, k, g, ok, v)
			}
		}
		for k := range r.Headers {
			if _, ok := c.headers[k]; !ok {
				t.Errorf("%s: unexpected header %s = %q", c.env.ID, k, r.Headers[k])
			}
		}
	}
}

func env(f SinkFixture, id string) *envelope.Envelope {
	return &envelope.Envelope{
		ID: id, Route: f.Route, SourceBroker: envelope.BrokerKafka, Source: "conformance.delay",
		DueAt: time.Now().UnixMilli(), Key: []byte(id), Payload: []byte("payload of " + id),
	}
}

func sinkErrorSlice(t *testing.T, h SinkHarness) {
	f := h.Fresh(t)
	p := uniq(t)
	if errs := publishWithin(t, context.Background(), f.Sink, nil); len(errs) != 0 {
		t.Fatalf("Publish(nil) returned %d errors", len(errs))
	}
	total := 0
	for _, n := range []int{1, 7, 250} {
		msgs := make([]*envelope.Envelope, n)
		for i := range msgs {
			msgs[i] = env(f, fmt.Sprintf("%s-%d-%d", p, n, i))
		}
		mustPublish(t, f.Sink, msgs)
		total += n
	}
	got := byID(t, f.Consume(t, total, ArriveWithin))
	if len(got) != total {
		t.Fatalf("%d distinct messages arrived, want %d", len(got), total)
	}
}

func sinkTargets(t *testing.T, h SinkHarness) {
	f := h.Fresh(t)
	p := uniq(t)
	override := env(f, p+"-override")
	override.Route, override.Target = "conformance-route-the-sink-does-not-know", f.Target
	unknown := env(f, p+"-unknown")
	unknown.Route = "conformance-route-the-sink-does-not-know"
	plain := env(f, p+"-default")
	errs := publishWithin(t, context.Background(), f.Sink, []*envelope.Envelope{override, unknown, plain})
	if errs[0] != nil {
		t.Errorf("Env.Target %q must win over the route: %v", f.Target, errs[0])
	}
	if errs[1] == nil || !fault.IsPermanent(errs[1]) {
		t.Errorf("unknown route without a target: got %v, want an error marked fault.Permanent", errs[1])
	}
	if errs[2] != nil {
		t.Errorf("route default: %v", errs[2])
	}
	got := byID(t, f.Consume(t, 2, ArriveWithin))
	if _, ok := got[override.ID]; !ok {
		t.Errorf("override did not arrive at %s", f.Target)
	}
	if _, ok := got[plain.ID]; !ok {
		t.Errorf("route default did not arrive at %s", f.Target)
	}
}

func sinkMissingTarget(t *testing.T, h SinkHarness) {
	f := h.Fresh(t)
	p := uniq(t)
	missing := env(f, p+"-missing")
	missing.Target = f.MissingTarget
	good := env(f, p+"-good")
	errs := publishWithin(t, context.Background(), f.Sink, []*envelope.Envelope{missing, good})
	if errs[0] == nil {
		t.Errorf("publish to missing target %q succeeded; it must fail (to be retried, then dead-lettered)", f.MissingTarget)
	}
	if errs[1] != nil {
		t.Errorf("a failing neighbour must not fail a good message: %v", errs[1])
	}
	if got := f.Consume(t, 1, ArriveWithin); got[0].Headers[envelope.HeaderMessageID] != good.ID {
		t.Errorf("arrived %q, want %q", got[0].Headers[envelope.HeaderMessageID], good.ID)
	}
	// Alone, too.
	errs = publishWithin(t, context.Background(), f.Sink, []*envelope.Envelope{missing})
	if errs[0] == nil {
		t.Errorf("publish to missing target %q succeeded", f.MissingTarget)
	}
}

func sinkConcurrent(t *testing.T, h SinkHarness) {
	f := h.Fresh(t)
	p := uniq(t)
	const workers, per = 6, 40
	var wg sync.WaitGroup
	errc := make(chan error, workers*per)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := 0; b < per/10; b++ {
				msgs := make([]*envelope.Envelope, 10)
				for i := range msgs {
					msgs[i] = env(f, fmt.Sprintf("%s-%d-%d-%d", p, w, b, i))
				}
				errs := f.Sink.Publish(context.Background(), msgs)
				if len(errs) != len(msgs) {
					errc <- fmt.Errorf("%d errors for %d messages", len(errs), len(msgs))
					continue
				}
				for _, err := range errs {
					if err != nil {
						errc <- err
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Fatalf("concurrent publish: %v", err)
	}
	got := byID(t, f.Consume(t, workers*per, ArriveWithin))
	if len(got) != workers*per {
		t.Fatalf("%d distinct messages arrived, want %d", len(got), workers*per)
	}
}

func sinkCancelled(t *testing.T, h SinkHarness) {
	f := h.Fresh(t)
	p := uniq(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	msgs := []*envelope.Envelope{env(f, p+"-a"), env(f, p+"-b")}
	for i, err := range publishWithin(t, ctx, f.Sink, msgs) {
		if err == nil {
			t.Errorf("message %d reported published with a cancelled context", i)
		}
	}
	// The sink still works afterwards.
	mustPublish(t, f.Sink, []*envelope.Envelope{env(f, p+"-after")})
	var found bool
	// The cancelled ones may or may not have gone out (at-least-once), so read until the
	// one published afterwards shows up.
	for i := 0; i < 3 && !found; i++ {
		for _, r := range f.Consume(t, 1, ArriveWithin) {
			if r.Headers[envelope.HeaderMessageID] == p+"-after" {
				found = true
			}
		}
	}
	if !found {
		t.Error("message published after a cancelled call did not arrive")
	}
}

func sinkAfterClose(t *testing.T, h SinkHarness) {
	f := h.Fresh(t)
	p := uniq(t)
	mustPublish(t, f.Sink, []*envelope.Envelope{env(f, p+"-before")})
	if err := f.Sink.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for i, err := range publishWithin(t, context.Background(), f.Sink, []*envelope.Envelope{env(f, p+"-after")}) {
		if err == nil {
			t.Errorf("message %d published after Close", i)
		}
	}
	if got := f.Consume(t, 1, ArriveWithin); got[0].Headers[envelope.HeaderMessageID] != p+"-before" {
		t.Errorf("arrived %q, want the message published before Close", got[0].Headers[envelope.HeaderMessageID])
	}
}
