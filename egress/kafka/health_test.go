package kafka_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/delaybridge/delay-bridge/egress"
	kafkaout "github.com/delaybridge/delay-bridge/egress/kafka"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/testkit"
)

func waitHealth(t *testing.T, s *kafkaout.Sink, healthy bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for (s.Healthy() == nil) != healthy {
		if time.Now().After(deadline) {
			t.Fatalf("Healthy() = %v after 30s, want healthy=%v", s.Healthy(), healthy)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestBrokerDownIsUnreachableAndUnhealthy: with the broker stopped (connection refused)
// the sink reports not healthy from its own probe, before any publish; a publish fails
// as unreachable, retryable, never permanent; once a broker listens again on the same
// address the sink turns healthy and publishes.
func TestBrokerDownIsUnreachableAndUnhealthy(t *testing.T) {
	target := testkit.Uniq(t, "t")
	addr, c := testkit.StartKafka(t, 1, target)
	s := newSink(t, addr, map[string]string{"r": target}, kafkaout.Options{ProbeInterval: 50 * time.Millisecond})
	waitHealth(t, s, true)
	if errs := s.Publish(context.Background(), []*envelope.Envelope{env("a", "r", nil)}); errs[0] != nil {
		t.Fatal(errs[0])
	}

	c.Close()
	waitHealth(t, s, false)
	t.Logf("down: %v", s.Healthy())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	errs := s.Publish(ctx, []*envelope.Envelope{env("b", "r", nil), env("c", "r", nil)})
	cancel()
	for i, err := range errs {
		switch {
		case err == nil:
			t.Errorf("message %d published to a stopped broker", i)
		case fault.IsPermanent(err):
			t.Errorf("a stopped broker must be retryable, got permanent: %v", err)
		case fault.IsUnknownOutcome(err):
			t.Errorf("connection refused means nothing was sent, got unknown outcome: %v", err)
		case egress.FailReason(err) != observe.FailUnreachable:
			t.Errorf("reason %q for %v, want unreachable", egress.FailReason(err), err)
		}
	}

	_, portText, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(portText)
	c2, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.SeedTopics(1, target))
	if err != nil {
		t.Fatalf("restart kfake on %d: %v", port, err)
	}
	t.Cleanup(c2.Close)
	waitHealth(t, s, true)
	deadline := time.Now().Add(30 * time.Second)
	for {
		errs := s.Publish(context.Background(), []*envelope.Envelope{env("d", "r", nil)})
		if errs[0] == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still failing with the broker back: %v", errs[0])
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := newReader(t, addr, target).records(t, 1, 30*time.Second); string(got[0].Value) != "p-d" {
		t.Fatalf("got %q", got[0].Value)
	}
}

// TestSafeRetriesWaitOnTheClock: a refused connection surely sent nothing, so Publish
// writes again (up to 3 times) after a backoff slept on the injected clock: it does
// not return before that clock has moved through every wait, and then fails the
// message as unreachable.
func TestSafeRetriesWaitOnTheClock(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now: every dial is refused
	fake := clock.NewFake(time.Unix(1_000_000, 0))
	s := newSink(t, addr, map[string]string{"r": "t"}, kafkaout.Options{Clock: fake, ProbeInterval: time.Hour})
	done := make(chan []error, 1)
	go func() { done <- s.Publish(context.Background(), []*envelope.Envelope{env("a", "r", nil)}) }()
	for wait := 1; wait <= 3; wait++ {
		deadline := time.Now().Add(20 * time.Second)
		for fake.Timers() < 2 { // the probe's next round, and the retry's backoff
			select {
			case errs := <-done:
				t.Fatalf("Publish returned %v before backoff wait %d passed on the clock", errs, wait)
			default:
			}
			if time.Now().After(deadline) {
				t.Fatalf("backoff wait %d not armed on the injected clock", wait)
			}
			time.Sleep(time.Millisecond)
		}
		fake.Advance(2 * time.Second) // beyond the longest wait (1s +20% jitter)
	}
	select {
	case errs := <-done:
		if errs[0] == nil || fault.IsPermanent(errs[0]) || egress.FailReason(errs[0]) != observe.FailUnreachable {
			t.Fatalf("publish to a refused address: %v (reason %q), want a retryable unreachable error", errs[0], egress.FailReason(errs[0]))
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Publish did not return after 3 retries")
	}
}
