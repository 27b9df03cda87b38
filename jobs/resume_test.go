package jobs

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// TestStoppedJobIsAbandonedThenResumedOnce: a runner on a fake clock does one batch of
// a shift and then waits (its pause is on the clock); it is stopped there. The job
// reads running, then abandoned once the fake clock passes the heartbeat window; a
// second runner takes it over from the stored cursor and finishes it, and every message
// is shifted exactly once.
func TestStoppedJobIsAbandonedThenResumedOnce(t *testing.T) {
	s := newStore(t, 4)
	msgs := park(t, s, 3000, abRoute, func(i int) int64 { return t0 + int64(i%40) })
	clk := clock.NewFake(time.UnixMilli(t0 - 3_600_000))
	ctx := context.Background()
	j, err := s.CreateJob(ctx, storeapi.JobSpec{Kind: storeapi.JobReschedule, ShiftMs: 25}, clock.NowMs(clk))
	if err != nil {
		t.Fatal(err)
	}

	r1 := New(s, Options{Instance: "r1", Clock: clk, Batch: 100, Pause: time.Second, Poll: time.Hour})
	ctx1, stop1 := context.WithCancel(ctx)
	done1 := make(chan struct{})
	go func() { defer close(done1); _ = r1.Run(ctx1) }()
	var mid storeapi.Job
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		mid, err = s.GetJob(ctx, j.ID, clock.NowMs(clk))
		if err != nil {
			t.Fatal(err)
		}
		if mid.Progress.Done > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("r1 never did a batch: %+v", mid)
		}
	}
	stop1()
	<-done1
	if mid.State != storeapi.JobRunning || mid.Instance != "r1" || mid.Progress.Done >= 3000 {
		t.Fatalf("after one batch: %+v", mid)
	}
	clk.Advance(storeapi.JobStaleAfter + time.Second)
	if got, _ := s.GetJob(ctx, j.ID, clock.NowMs(clk)); got.State != storeapi.JobAbandoned {
		t.Fatalf("a job whose runner stopped reads %q, want abandoned", got.State)
	}

	r2 := New(s, Options{Instance: "r2", Clock: clk, Batch: 100, Pause: -1, Poll: time.Hour})
	ctx2, stop2 := context.WithCancel(ctx)
	done2 := make(chan struct{})
	go func() { defer close(done2); _ = r2.Run(ctx2) }()
	defer func() { stop2(); <-done2 }()
	var end storeapi.Job
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		end, _ = s.GetJob(ctx, j.ID, clock.NowMs(clk))
		if end.State == storeapi.JobDone {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("r2 did not finish: %+v", end)
		}
	}
	if end.Instance != "r2" || end.Claims != 2 || end.Progress.Matched != 3000 || end.Progress.Done != 3000 {
		t.Fatalf("resumed job: %+v, want 3000 matched and moved over two claims", end)
	}
	for id, e := range msgs {
		if _, due := state(t, s, id); due != e.DueAt+25 {
			t.Fatalf("%s due %d, want %d (shifted once)", id, due, e.DueAt+25)
		}
	}
}

// TestCancelledJobStops: an operator cancels a running job between batches; the
// runner stops, what it did stays done, the rest is untouched.
func TestCancelledJobStops(t *testing.T) {
	s := newStore(t, 4)
	park(t, s, 2000, abRoute, func(i int) int64 { return t0 + int64(i) })
	clk := clock.NewFake(time.UnixMilli(t0 - 3_600_000))
	ctx := context.Background()
	j, _ := s.CreateJob(ctx, storeapi.JobSpec{Kind: storeapi.JobCancel}, clock.NowMs(clk))
	r := New(s, Options{Instance: "r1", Clock: clk, Batch: 100, Pause: time.Second, Poll: time.Hour})
	rctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(rctx) }()
	defer func() { stop(); <-done }()
	var mid storeapi.Job
	for deadline := time.Now().Add(30 * time.Second); mid.Progress.Done == 0; time.Sleep(5 * time.Millisecond) {
		mid, _ = s.GetJob(ctx, j.ID, clock.NowMs(clk))
		if time.Now().After(deadline) {
			t.Fatalf("no batch: %+v", mid)
		}
	}
	if prior, err := s.CancelJob(ctx, j.ID, clock.NowMs(clk)); prior != storeapi.JobRunning || err != nil {
		t.Fatalf("CancelJob = %q, %v", prior, err)
	}
	for clk.Timers() == 0 {
		time.Sleep(time.Millisecond) // the runner is in its pause
	}
	clk.Advance(time.Second)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		r.mu.Lock()
		n := len(r.running)
		r.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the runner kept running a cancelled job")
		}
	}
	end, _ := s.GetJob(ctx, j.ID, clock.NowMs(clk))
	left, _ := s.CountRange(ctx, storeapi.StatePending, 0, 0)
	if end.State != storeapi.JobCancelled || end.Progress.Done != mid.Progress.Done || left != 2000-mid.Progress.Done {
		t.Fatalf("cancelled job %+v, %d pending; want it stopped after %d", end, left, mid.Progress.Done)
	}
	if err := s.SaveJob(ctx, j.ID, "r1", end.Progress, "", clock.NowMs(clk)); !errors.Is(err, storeapi.ErrJobLost) {
		t.Fatalf("save after cancel = %v", err)
	}
}

// TestCrashAfterApplyBeforeSave: a runner applies shift batches and dies before it
// records them (the steps run here without their progress writes); a second runner
// resumes from what was recorded and every message is still shifted exactly once. The
// window being walked is recorded before anything in it moves, so the second runner
// does not choose a window anew around messages the first one moved.
func TestCrashAfterApplyBeforeSave(t *testing.T) {
	for _, shift := range []int64{30, -30} {
		s := newStore(t, 4)
		msgs := park(t, s, 1500, abRoute, func(i int) int64 { return t0 + int64(i%100) })
		clk := clock.NewFake(time.UnixMilli(t0 - 3_600_000))
		ctx := context.Background()
		j, _ := s.CreateJob(ctx, storeapi.JobSpec{Kind: storeapi.JobReschedule, ShiftMs: shift}, clock.NowMs(clk))
		j, ok, err := s.ClaimJob(ctx, j.ID, "r1", clock.NowMs(clk))
		if !ok || err != nil {
			t.Fatalf("claim: %v %v", ok, err)
		}
		r1 := New(s, Options{Instance: "r1", Clock: clk, Batch: 100})
		ex := &execution{r: r1, job: j, prog: j.Progress}
		passes := ex.passes()
		for range 3 { // three batches applied, none of their progress recorded
			if _, err := ex.step(ctx, passes); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(storeapi.JobStaleAfter + time.Second)
		r2 := New(s, Options{Instance: "r2", Clock: clk, Batch: 100, Pause: -1, Poll: time.Hour})
		rctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = r2.Run(rctx) }()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(5 * time.Millisecond) {
			if end, _ := s.GetJob(ctx, j.ID, clock.NowMs(clk)); end.State == storeapi.JobDone {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("r2 did not finish")
			}
		}
		stop()
		<-done
		for id, e := range msgs {
			if _, due := state(t, s, id); due != e.DueAt+shift {
				t.Fatalf("shift %d: %s due %d, want %d (shifted once)", shift, id, due, e.DueAt+shift)
			}
		}
	}
}
