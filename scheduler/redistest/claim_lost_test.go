package redistest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/lua"
	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/store/redisstore"
	"github.com/delaybridge/delay-bridge/testkit"
)

// claimFault is a go-redis hook in front of a real redis-server that spoils the first
// pipeline carrying a claim that claimed something, once armed: lose drops the replies
// after Redis ran the claim (a read timeout, a reset connection), resend sends the
// pipeline a second time and keeps the second replies (as go-redis does when one call
// of a Cluster pipeline meets TRYAGAIN).
type claimFault struct {
	sha    string // the claim's EVALSHA digest (servers without FUNCTION)
	fn     string // the claim's function in the library (FCALL)
	armed  atomic.Bool
	resend bool
	fired  atomic.Int32
	// claims is how many claims that claimed something the spoiled pipeline held: the
	// pumps group claims of several shards in one pipeline, and each is healed.
	claims atomic.Int32
}

var errReplyLost = errors.New("read tcp: i/o timeout (reply dropped by the test)")

func (f *claimFault) DialHook(next redis.DialHook) redis.DialHook { return next }
func (f *claimFault) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}

func (f *claimFault) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err != nil || !f.armed.Load() || f.claimedSome(cmds) == 0 || !f.armed.CompareAndSwap(true, false) {
			return err
		}
		f.fired.Add(1)
		f.claims.Store(int32(f.claimedSome(cmds)))
		if f.resend {
			return next(ctx, cmds)
		}
		for _, c := range cmds {
			c.SetErr(errReplyLost)
		}
		return errReplyLost
	}
}

// isClaim reports whether a command with this name and first argument calls claim.lua.
func (f *claimFault) isClaim(cmd, arg string) bool {
	return (strings.EqualFold(cmd, "evalsha") && arg == f.sha) || (strings.EqualFold(cmd, "fcall") && arg == f.fn)
}

// claimedSome counts the claim.lua calls in cmds whose reply has a message.
func (f *claimFault) claimedSome(cmds []redis.Cmder) int {
	n := 0
	for _, c := range cmds {
		args := c.Args()
		if len(args) < 2 || !f.isClaim(fmt.Sprint(args[0]), fmt.Sprint(args[1])) {
			continue
		}
		if cmd, ok := c.(*redis.Cmd); ok {
			if vals, err := cmd.Slice(); err == nil && len(vals) > 4 { // { nextDue, dropped, need, k, id, due, env, ..., k bucket ids }
				n++
			}
		}
	}
	return n
}

// A claim that ran in Redis but whose reply the owner never got (lost, or replaced by
// the reply of the same pipeline sent again) is not left in flight until the 30 s
// in-flight lease, which is for dead owners: the owner sends the claim again and fires
// what it finds. On a fake clock, so "before the lease" is exact: every message is
// published once, none before its due time, while the fake clock is still far from the
// claim's lease deadline.
func TestLostClaimReplyHealsByItsOwner(t *testing.T) {
	for _, resend := range []bool{false, true} {
		name := "reply lost"
		if resend {
			name = "pipeline sent again"
		}
		t.Run(name, func(t *testing.T) { lostClaimReply(t, resend) })
	}
}

func lostClaimReply(t *testing.T, resend bool) {
	r := testkit.StartRedis(t)
	ctx := context.Background()
	lib, err := lua.NewLibrary("delaybridge", lua.Scripts)
	if err != nil {
		t.Fatal(err)
	}
	fault := &claimFault{sha: redis.NewScript(lib.Eval("claim")).Hash(), fn: lib.Function("claim"), resend: resend}
	rdb := r.Client()
	rdb.AddHook(fault)
	shardStore, err := redisstore.New(ctx, rdb, redisstore.Options{Prefix: "lost", Cluster: "c", Shards: 4, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	fake := clock.NewFake(time.UnixMilli(1_800_000_000_000))
	t0 := fake.Now().UnixMilli()
	rec := &firedRecorder{lateness: map[string]time.Duration{}}
	var logs testkit.Buffer
	const lease = 30 * time.Second
	s := newScheduler(t, scheduler.Options{
		Store: shardStore, Clock: fake, Instance: "owner",
		Tick: time.Millisecond, Lookahead: 2 * time.Second, ClaimBatch: 100,
		InflightLease: lease, LeaseTTL: 3 * time.Second, SafetyScan: time.Hour,
		MaxInMemory: 1000, MaxAttempts: 3, BackoffInitial: time.Second, BackoffMax: time.Second,
		Observer: rec, Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	// Each message on a route of its own, named after it: the recorder's lateness is
	// by route.
	const n = 20
	sink := &recordingSink{}
	routes := map[string]egress.RouteSink{}
	envs := make([]*envelope.Envelope, n)
	for i := range envs {
		id := fmt.Sprintf("m-%d", i)
		envs[i] = &envelope.Envelope{ID: id, Route: id, DueAt: t0 + 1000 + int64(i)*50}
		routes[id] = egress.RouteSink{Sink: sink}
	}
	disp := egress.NewDispatcher(egress.DispatcherOptions{Routes: routes, Completer: s, Owned: s.Owns})
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = s.Run(rctx, disp) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "ownership of all shards", 5*time.Second, func() bool { return len(s.OwnedShards()) == 4 })

	fault.armed.Store(true)
	_, minDue, err := shardStore.Park(ctx, envs)
	if err != nil {
		t.Fatal(err)
	}
	s.Notify(minDue)
	// Well before the lease deadline of any claim made from t0 (t0 + 30 s): only the
	// owner's own healing can publish them by then.
	bound := t0 + (lease / 3).Milliseconds()
	for len(sink.snapshot()) < n && fake.Now().UnixMilli() < bound {
		fake.Advance(50 * time.Millisecond)
		time.Sleep(3 * time.Millisecond)
	}
	waitFor(t, "the claim's messages to be published", 5*time.Second, func() bool { return len(sink.snapshot()) >= n })
	if fault.fired.Load() != 1 {
		t.Fatalf("the fault spoiled %d claims, want 1", fault.fired.Load())
	}
	seen := map[string]int{}
	for _, p := range sink.snapshot() {
		seen[p.id]++
	}
	for _, e := range envs {
		if seen[e.ID] != 1 {
			t.Errorf("%s published %d times, want once", e.ID, seen[e.ID])
		}
		if l, ok := rec.get(e.ID); !ok || l < 0 {
			t.Errorf("fired %s early on the fake clock (%v)", e.ID, l)
		}
	}
	if h, want := rec.healed.Load(), fault.claims.Load(); h != want || h < 1 {
		t.Errorf("ClaimHealed observed %d times, want %d (each claim of the spoiled pipeline found again)", h, want)
	}
	if n := rec.recovered(observe.RecoverLeaseExpired); n != 0 {
		t.Errorf("%d messages recovered at their lease, want none: the claim sent again found them", n)
	}
	if got := logs.String(); !strings.Contains(got, "found its messages in flight") ||
		strings.Contains(got, "recovered in-flight messages past their deadline") {
		t.Errorf("want one line for the claim found again and none for the lease's recovery; log:\n%s", got)
	}
}
