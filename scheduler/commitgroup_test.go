package scheduler

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// With two lanes, two calls are under way at once; callers arriving then are queued,
// and the first to lead after a call returns sends its own request with all queued.
// Every caller gets its own answer.
func TestCommitGroupTwoLanes(t *testing.T) {
	g := commitGroup[int, int]{lanes: 2}
	var running, most, calls atomic.Int32
	release := []chan struct{}{make(chan struct{}), make(chan struct{})} // the first two calls wait
	var sizes sync.Map                                                   // call number -> requests in it
	run := func(reqs []int) []int {
		n := running.Add(1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		c := calls.Add(1)
		sizes.Store(c, len(reqs))
		if c <= 2 {
			<-release[c-1]
		}
		running.Add(-1)
		out := make([]int, len(reqs))
		for i, r := range reqs {
			out[i] = r * 10
		}
		return out
	}
	all := func(q []int) int { return len(q) }
	got := make([]int, 5)
	var wg sync.WaitGroup
	start := func(i int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = g.do(i+1, all, run)
		}()
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
		}
	}
	start(0)
	start(1)
	waitFor("two calls under way", func() bool { return running.Load() == 2 })
	for i := 2; i < 5; i++ {
		start(i)
	}
	waitFor("three callers queued", func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return len(g.queue) == 3
	})
	close(release[0]) // one lane frees: the first queued caller sends all three
	waitFor("the third call", func() bool { return calls.Load() == 3 })
	close(release[1])
	wg.Wait()
	if most.Load() != 2 {
		t.Errorf("at most %d calls under way, want 2", most.Load())
	}
	if n := calls.Load(); n != 3 {
		t.Errorf("%d calls, want 3 (two lanes, then the three queued together)", n)
	}
	if v, _ := sizes.Load(int32(3)); v != 3 {
		t.Errorf("the third call took %v requests, want 3", v)
	}
	for i, v := range got {
		if v != (i+1)*10 {
			t.Errorf("caller %d got %d, want %d", i, v, (i+1)*10)
		}
	}
	if g.running != 0 || len(g.queue) != 0 {
		t.Errorf("after the last call: %d running, %d queued", g.running, len(g.queue))
	}
}
