package testkit

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// recordTB is the testing.TB the helpers see in these tests: it records Errorf and
// Fatalf calls instead of failing the real test, and passes everything else (Helper,
// Cleanup, TempDir, Logf) through. A Fatalf ends the calling goroutine as the real one
// does; unless fatalOK, it also fails the real test (an unplanned setup failure).
type recordTB struct {
	testing.TB
	fatalOK bool
	mu      sync.Mutex
	msgs    []string
}

func (f *recordTB) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.msgs = append(f.msgs, fmt.Sprintf(format, args...))
}

func (f *recordTB) Fatalf(format string, args ...any) {
	f.Errorf(format, args...)
	if !f.fatalOK {
		f.TB.Fatalf(format, args...)
	}
	runtime.Goexit()
}

func (f *recordTB) failures() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.msgs...)
}

// waitFailures waits (generously) until f has recorded n failures and returns them.
func waitFailures(t *testing.T, f *recordTB, n int) []string {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for len(f.failures()) < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d failure(s) recorded after 30 s, want %d: %q", len(f.failures()), n, f.failures())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return f.failures()
}

func mustContain(t *testing.T, what, got string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(got, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, got)
		}
	}
}

// TestRedisExitWithoutAskingFailsTest: a redis-server killed with SIGKILL from outside
// the helpers (by its pid), and one that exits cleanly on its own (a SHUTDOWN sent
// straight to it), each fail the test once, naming the process, the exit status and the
// tail of its log; the helpers' own Stop and Restart afterwards add nothing.
func TestRedisExitWithoutAskingFailsTest(t *testing.T) {
	f := &recordTB{TB: t}
	r := StartRedis(f)
	pid := r.PID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
	got := waitFailures(t, f, 1)
	mustContain(t, "the failure", got[0], "exited without the test asking", "signal: killed",
		fmt.Sprintf("redis-server on %s (pid %d)", r.Addr(), pid), "redis.log (tail)", "Ready to accept connections")

	r.Restart() // after the crash: starts a fresh process, no further failure
	if r.PID() == 0 || r.PID() == pid {
		t.Errorf("Restart after the crash: pid %d (crashed one %d)", r.PID(), pid)
	}
	r.Stop()
	if got := f.failures(); len(got) != 1 {
		t.Errorf("Restart/Stop after the crash added failures: %q", got)
	}

	f2 := &recordTB{TB: t}
	r2 := StartRedis(f2)
	c := redis.NewClient(&redis.Options{Addr: r2.Addr(), MaxRetries: -1})
	_ = c.ShutdownNoSave(context.Background()).Err() // the server hangs up instead of answering
	c.Close()
	got = waitFailures(t, f2, 1)
	mustContain(t, "the failure after a SHUTDOWN not sent through the helper", got[0],
		"exited without the test asking", "exit status 0", r2.Addr())
	r2.Stop()
	if got := f2.failures(); len(got) != 1 {
		t.Errorf("Stop after the exit added failures: %q", got)
	}
}

// TestRedisExitsAskedForPass: Kill, Restart, Shutdown and Stop (the helpers a test
// stops a server with) never fail the test, in any order and repeated; the server
// answers after each Restart and keeps its append-only data across a Shutdown.
func TestRedisExitsAskedForPass(t *testing.T) {
	f := &recordTB{TB: t}
	r := StartRedis(f)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: r.Addr()})
	defer c.Close()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	r.Kill()
	if r.PID() != 0 {
		t.Errorf("PID after Kill = %d, want 0", r.PID())
	}
	r.Kill() // nothing runs: no-op
	r.Restart()
	r.Restart()
	r.Shutdown()
	r.Restart()
	if v, err := c.Get(ctx, "k").Result(); err != nil || v != "v" {
		t.Errorf("after Shutdown and Restart: GET k = %q, %v; want v", v, err)
	}
	r.Stop()
	if got := f.failures(); len(got) != 0 {
		t.Errorf("exits the test asked for failed it: %q", got)
	}
}

// TestRedisExitWhileStartingFailsAtOnce: a redis-server that exits during start (here
// an unknown option) fails the test from StartRedis with its exit status, instead of
// after the readiness timeout or from the watcher as well.
func TestRedisExitWhileStartingFailsAtOnce(t *testing.T) {
	f := &recordTB{TB: t, fatalOK: true}
	done := make(chan struct{})
	go func() {
		defer close(done)
		StartRedis(f, "--no-such-option", "x")
		t.Errorf("StartRedis with an unknown option returned")
	}()
	<-done
	got := f.failures()
	if len(got) != 1 {
		t.Fatalf("failures %q, want exactly one", got)
	}
	mustContain(t, "the failure", got[0], "exited while starting", "exit status 1")
}

// TestSentinelChildrenWatched: in a Sentinel set, KillPrimary and the failover it
// causes, and Restart of the old primary, are exits the test asked for; a sentinel
// killed from outside is not.
func TestSentinelChildrenWatched(t *testing.T) {
	f := &recordTB{TB: t}
	s := StartRedisSentinel(f)
	old := s.KillPrimary()
	s.WaitNewPrimary(old, 60*time.Second)
	old.Restart()
	s.WaitReplicaSynced(60 * time.Second)
	if got := f.failures(); len(got) != 0 {
		t.Fatalf("KillPrimary/Restart failed the test: %q", got)
	}
	victim := s.Sentinels[1]
	pid := victim.PID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill -9 %d: %v", pid, err)
	}
	got := waitFailures(t, f, 1)
	mustContain(t, "the failure", got[0], "exited without the test asking", "signal: killed",
		fmt.Sprintf("redis-server --sentinel on %s (pid %d)", victim.Addr(), pid))
}
