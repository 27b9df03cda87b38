package ingress

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestCallReturnsHandlerResult(t *testing.T) {
	want := errors.New("park failed")
	returned, err := Call(context.Background(), func(context.Context, []Item) error { return want }, nil)
	if !returned || !errors.Is(err, want) {
		t.Fatalf("Call = (%v, %v), want (true, %v)", returned, err, want)
	}
}

// A handler that finishes just after shutdown began has parked its batch: its result
// must count, or a graceful stop would hand back records it already parked.
func TestCallWaitsForHandlerFinishingAfterCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	finish := make(chan struct{})
	go func() {
		<-started
		cancel()
		time.Sleep(10 * time.Millisecond)
		close(finish)
	}()
	returned, err := Call(ctx, func(context.Context, []Item) error {
		close(started)
		<-finish // ignores ctx, returns soon after the cancel
		return nil
	}, nil)
	if !returned || err != nil {
		t.Fatalf("Call = (%v, %v), want (true, nil): the handler returned within the grace", returned, err)
	}
}

// A handler stuck past HandlerGrace must not hold up shutdown; its result is dropped.
func TestCallGivesUpOnStuckHandler(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	release := make(chan struct{})
	defer close(release)
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		returned, _ := Call(ctx, func(context.Context, []Item) error { <-release; return nil }, nil)
		if returned {
			t.Error("Call reported a result from a handler that never returned")
		}
	}()
	cancel()
	select {
	case <-ended:
	case <-time.After(HandlerGrace + 30*time.Second):
		t.Fatal("Call did not return after its context was cancelled and the grace passed")
	}
}
