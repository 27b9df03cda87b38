package egress

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// spanLog is an in-test Tracer: each Start returns the message's headers with
// traceparent replaced by "span-<id>", and every call is recorded.
type spanLog struct {
	mu     sync.Mutex
	starts []string // "<id> <broker> fired=<ms> sent=<ms>"
	ends   []string // "<id> at=<ms> err=<err>"
}

func (l *spanLog) Start(env *envelope.Envelope, broker string, fired, sent time.Time) ([]envelope.Header, func(time.Time, error)) {
	l.mu.Lock()
	l.starts = append(l.starts, fmt.Sprintf("%s %s fired=%d sent=%d", env.ID, broker, fired.UnixMilli(), sent.UnixMilli()))
	l.mu.Unlock()
	hs := []envelope.Header{{Key: "traceparent", Value: "span-" + env.ID}}
	return hs, func(at time.Time, err error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.ends = append(l.ends, fmt.Sprintf("%s at=%d err=%v", env.ID, at.UnixMilli(), err))
	}
}

// gateSink records the envelopes and traceparents it is handed; its first Publish
// blocks until release is closed. It fails messages whose id is in fail.
type gateSink struct {
	entered chan struct{}
	release chan struct{}
	once    sync.Once
	fail    map[string]bool
	mu      sync.Mutex
	got     []*envelope.Envelope
	tps     []string
}

func (s *gateSink) Publish(_ context.Context, msgs []*envelope.Envelope) []error {
	s.once.Do(func() { close(s.entered); <-s.release })
	s.mu.Lock()
	defer s.mu.Unlock()
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		s.got = append(s.got, m)
		tp, _ := m.Header("traceparent")
		s.tps = append(s.tps, fmt.Sprint(tp))
		if s.fail[m.ID] {
			errs[i] = errors.New("refused")
		}
	}
	return errs
}

func (s *gateSink) Close() error { return nil }

// With a Tracer, every message handed to the sink gets a span: fire time = its Submit
// time (also when a fenced message is dropped from the same batch), sent and ended at
// the dispatcher's clock, ended with the sink's answer; the sink publishes a copy with
// the span's headers and the completer gets the message as it was.
func TestDispatcherTracesEachPublishedMessage(t *testing.T) {
	fake := clock.NewFake(time.UnixMilli(1_000_000))
	sink := &gateSink{entered: make(chan struct{}), release: make(chan struct{}), fail: map[string]bool{"m2": true}}
	spans := &spanLog{}
	o := &outcomes{}
	d, stop := runDispatcher(t, DispatcherOptions{
		Routes: map[string]RouteSink{"r": {Sink: sink, Broker: envelope.BrokerKafka}}, Completer: o, Clock: fake,
		Workers: 1, Tracer: spans, Owned: func(e *envelope.Envelope) bool { return e.ID != "m1" },
	})
	producer := envelope.Header{Key: "traceparent", Value: "producer"}
	msgs := envs("r", 5, "m")
	for _, m := range msgs {
		m.Headers = []envelope.Header{producer}
	}
	d.Submit(msgs[:1]) // taken alone; its publish blocks
	<-sink.entered
	fake.Advance(10 * time.Millisecond)
	d.Submit(msgs[1:4]) // queued together with the next submit, fired 10 ms apart
	fake.Advance(10 * time.Millisecond)
	d.Submit(msgs[4:])
	fake.Advance(10 * time.Millisecond)
	close(sink.release)
	waitTotal(t, o, 5)
	stop()

	wantStarts := []string{
		"m0 kafka fired=1000000 sent=1000000",
		"m2 kafka fired=1000010 sent=1000030",
		"m3 kafka fired=1000010 sent=1000030",
		"m4 kafka fired=1000020 sent=1000030",
	}
	if !slices.Equal(spans.starts, wantStarts) {
		t.Errorf("spans started %q, want %q (m1 is fenced: no span)", spans.starts, wantStarts)
	}
	wantEnds := []string{
		"m0 at=1000030 err=<nil>", "m2 at=1000030 err=refused", "m3 at=1000030 err=<nil>", "m4 at=1000030 err=<nil>",
	}
	if !slices.Equal(spans.ends, wantEnds) {
		t.Errorf("spans ended %q, want %q", spans.ends, wantEnds)
	}
	if want := []string{"span-m0", "span-m2", "span-m3", "span-m4"}; !slices.Equal(sink.tps, want) {
		t.Errorf("sink published traceparents %q, want each span's %q", sink.tps, want)
	}
	for i, m := range sink.got {
		if slices.Contains(msgs, m) {
			t.Errorf("sink got message %d itself, want a copy carrying the span's headers", i)
		}
	}
	for _, m := range msgs {
		if len(m.Headers) != 1 || m.Headers[0] != producer {
			t.Errorf("%s: headers %v changed; a retry must carry the producer's context again", m.ID, m.Headers)
		}
	}
	if !slices.Equal(o.failed, []string{"m2"}) || len(o.published) != 3 || !slices.Equal(o.dropped, []string{"m1"}) {
		t.Errorf("outcomes: published %v failed %v dropped %v", o.published, o.failed, o.dropped)
	}
}

// Without a Tracer the sink is handed the fired messages themselves: nothing is copied.
func TestDispatcherWithoutTracerPublishesTheMessages(t *testing.T) {
	sink := &gateSink{entered: make(chan struct{}), release: make(chan struct{})}
	close(sink.release)
	o := &outcomes{}
	d, stop := runDispatcher(t, DispatcherOptions{Routes: map[string]RouteSink{"r": {Sink: sink}}, Completer: o})
	msgs := envs("r", 3, "m")
	d.Submit(msgs)
	waitTotal(t, o, 3)
	stop()
	if !slices.Equal(sink.got, msgs) {
		t.Errorf("sink got %v, want the fired envelopes %v", sink.got, msgs)
	}
}
