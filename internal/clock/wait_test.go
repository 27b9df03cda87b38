package clock

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestSleepEndsOnClockOrContext(t *testing.T) {
	fake := NewFake(time.Unix(0, 0))
	done := make(chan error, 1)
	go func() { done <- Sleep(context.Background(), fake, time.Second) }()
	for fake.Timers() == 0 {
		time.Sleep(time.Millisecond)
	}
	fake.Advance(999 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Sleep returned %v before its time", err)
	default:
	}
	fake.Advance(time.Millisecond)
	if err := <-done; err != nil {
		t.Fatalf("Sleep = %v, want nil", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- Sleep(ctx, fake, time.Hour) }()
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep after cancel = %v, want context.Canceled", err)
	}
	if err := Sleep(ctx, fake, 0); !errors.Is(err, context.Canceled) {
		t.Fatalf("Sleep on a done context = %v", err)
	}
}

func TestBackoffGrowsCapsAndResets(t *testing.T) {
	b := NewBackoff(Real{}, BackoffPolicy{Initial: 100 * time.Millisecond, Max: time.Second, Jitter: 0.1})
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		w *= time.Millisecond
		got := b.Next()
		if got < w*9/10 || got > w*11/10 {
			t.Errorf("wait %d = %v, want %v ±10%%", i+1, got, w)
		}
	}
	b.Reset()
	if got := b.Next(); got < 90*time.Millisecond || got > 110*time.Millisecond {
		t.Errorf("after Reset = %v, want 100ms ±10%%", got)
	}
	d := NewBackoff(Real{}, BackoffPolicy{})
	if got := d.Next(); got < 40*time.Millisecond || got > 60*time.Millisecond {
		t.Errorf("default first wait = %v, want 50ms ±20%%", got)
	}
}

func TestAttemptBackoff(t *testing.T) {
	for _, c := range []struct {
		attempt int
		want    time.Duration
	}{{0, time.Second}, {1, time.Second}, {2, 2 * time.Second}, {4, 8 * time.Second}, {10, 10 * time.Second}} {
		if got := AttemptBackoff(c.attempt, time.Second, 10*time.Second); got != c.want {
			t.Errorf("AttemptBackoff(%d) = %v, want %v", c.attempt, got, c.want)
		}
	}
}
