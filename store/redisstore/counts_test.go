package redisstore

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/testkit"
)

// trueCounts counts every shard's messages per route by reading the sets and
// envelopes whole: what RouteCounts must equal (test only; the product never scans).
func trueCounts(t *testing.T, s *Store) map[string]RouteCount {
	t.Helper()
	ctx := storeCtx(t)
	out := map[string]RouteCount{}
	for _, k := range s.keys {
		for _, set := range []struct {
			key string
			add func(*RouteCount)
		}{
			{k.due, func(c *RouteCount) { c.Pending++ }},
			{k.inflight, func(c *RouteCount) { c.Inflight++ }},
			{k.dead, func(c *RouteCount) { c.Dead++ }},
		} {
			ids, err := s.rdb.ZRange(ctx, set.key, 0, -1).Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				route := ""
				if raw, err := s.rdb.HGet(ctx, k.msg, id).Bytes(); err == nil {
					if e, err := envelope.Decode(raw, id); err == nil {
						route = e.Route
					}
				}
				c := out[route]
				set.add(&c)
				out[route] = c
			}
		}
	}
	return out
}

// checkCounts fails unless RouteCounts equals trueCounts.
func checkCounts(t *testing.T, s *Store, step string) {
	t.Helper()
	c, err := s.RouteCounts(storeCtx(t))
	if err != nil {
		t.Fatalf("%s: RouteCounts: %v", step, err)
	}
	if got, want := c.Routes(), trueCounts(t, s); !maps.Equal(got, want) {
		t.Fatalf("%s: counts %+v, want %+v", step, got, want)
	}
}

// countsBackends runs f on a redis-server and on miniredis (the Cluster is covered
// by the conformance suite).
func countsBackends(t *testing.T, f func(t *testing.T, c redis.UniversalClient)) {
	t.Run("redis-server", func(t *testing.T) { f(t, testkit.StartRedis(t).Client()) })
	t.Run("miniredis", func(t *testing.T) {
		m := miniredis.RunT(t)
		c := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { _ = c.Close() })
		f(t, c)
	})
}

// TestCountsWhileMoving: messages moving in every direction (claim, ack, retry,
// dead-letter, recover, reschedule, requeue, cancel, park, purge) keep the counts exact.
func TestCountsWhileMoving(t *testing.T) {
	countsBackends(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := storeCtx(t)
		s, err := New(ctx, c, Options{Prefix: "u", Cluster: "c", Shards: 3, DoneWindow: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		const n = 2400
		rng := rand.New(rand.NewPCG(3, 4))
		var envs []*envelope.Envelope
		for i := range n {
			envs = append(envs, &envelope.Envelope{ID: fmt.Sprintf("m-%04d", i), Route: fmt.Sprintf("r%d", i%4),
				SourceBroker: envelope.BrokerKafka, Source: "t", DueAt: t0 + 100*rng.Int64N(50), Payload: []byte("p")})
		}
		if _, _, err := s.Park(ctx, envs); err != nil {
			t.Fatal(err)
		}
		toks := map[int]int64{}
		for sh := range s.keys {
			toks[sh] = mustLease(t, s, sh, "i2")
		}
		checkCounts(t, s, "after park")
		now := t0 + 1000
		for step := range 60 {
			moveSome(t, s, rng, toks, now+int64(step)*20, step)
		}
		checkCounts(t, s, "after moves")
	})
}

// moveSome moves messages in every direction: claim, ack, retry to pending and dead,
// recover, reschedule up and down, requeue, cancel, park, purge.
func moveSome(t *testing.T, s *Store, rng *rand.Rand, toks map[int]int64, now int64, step int) {
	t.Helper()
	ctx := storeCtx(t)
	sh := step % 3
	items, _, err := s.Claim(ctx, sh, "i2", toks[sh], now, now+500, 9)
	if err != nil {
		t.Fatal(err)
	}
	var dead []string
	for i, e := range items {
		switch i % 4 {
		case 0:
			if step%2 == 0 {
				err = s.Ack(ctx, sh, []string{e.ID}, now)
			} else {
				err = s.AckEnvelopes(ctx, []*envelope.Envelope{e}, now)
			}
		case 1:
			err = s.Retry(ctx, sh, []RetryItem{{Env: e, Due: now + rng.Int64N(3000)}}, now)
		case 2:
			err = s.Retry(ctx, sh, []RetryItem{{Env: e, Dead: true}}, now)
			dead = append(dead, e.ID)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(dead) > 0 && step%2 == 0 {
		if err := s.RequeueDead(ctx, dead[0], now+rng.Int64N(2000)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Recover(ctx, sh, now+600, 5); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		id := fmt.Sprintf("m-%04d", rng.IntN(2400))
		var err error
		if i%2 == 0 {
			_, err = s.Reschedule(ctx, id, t0+rng.Int64N(8000)) // up or down, pending or dead
		} else {
			_, _, err = s.Cancel(ctx, id, now, CancelOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	e := &envelope.Envelope{ID: fmt.Sprintf("new-%d", step), Route: "r9", SourceBroker: envelope.BrokerKafka,
		Source: "t", DueAt: t0 + rng.Int64N(8000), Payload: []byte("p")}
	if _, _, err := s.Park(ctx, []*envelope.Envelope{e}); err != nil {
		t.Fatal(err)
	}
	if step%7 == 3 {
		if _, err := s.PurgeDead(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCountsJobBatches: the bulk-job batch operations keep the counts.
func TestCountsJobBatches(t *testing.T) {
	browseBackends(t, 4, func(t *testing.T, s *Store) {
		ctx := context.Background()
		browseFixture(t, s, 200, 3000)
		checkCounts(t, s, "park")
		all := func(q BrowseQuery) []BatchItem {
			got, _ := browseAll(t, s, q)
			out := make([]BatchItem, len(got))
			for i, it := range got {
				out[i] = BatchItem{ID: it.Envelope.ID, Score: it.Score}
			}
			return out
		}
		qa := BrowseQuery{Route: "a"}
		if _, err := s.CancelBatch(ctx, all(qa), qa, browseT0); err != nil {
			t.Fatal(err)
		}
		checkCounts(t, s, "cancel batch")
		var ri []RescheduleItem
		for _, it := range all(BrowseQuery{Route: "b"}) {
			ri = append(ri, RescheduleItem{BatchItem: it, Due: it.Score + 1000})
		}
		if _, err := s.RescheduleBatch(ctx, ri); err != nil {
			t.Fatal(err)
		}
		checkCounts(t, s, "reschedule batch")
		var dead []*envelope.Envelope
		for i := range 20 {
			dead = append(dead, &envelope.Envelope{ID: fmt.Sprintf("d-%02d", i), Route: "a", SourceBroker: envelope.BrokerKafka,
				Source: "t", DueAt: browseT0, Payload: []byte("x"), Reason: "broken"})
		}
		if _, err := s.Bury(ctx, dead, browseT0+5); err != nil {
			t.Fatal(err)
		}
		d := all(BrowseQuery{State: StateDead})
		if _, err := s.RequeueDeadBatch(ctx, d[:10], browseT0+9); err != nil {
			t.Fatal(err)
		}
		checkCounts(t, s, "requeue batch")
		if _, err := s.PurgeDeadBatch(ctx, d); err != nil {
			t.Fatal(err)
		}
		checkCounts(t, s, "purge batch")
		if c, _ := s.RouteCounts(ctx); c.Routes()["a"].Dead != 0 || c.Routes()["a"].Pending != 10 {
			t.Fatalf("route a: %+v", c.Routes()["a"])
		}
	})
}

// TestCountsAckEnvelopes: acks with the routes passed along (what the scheduler does)
// keep the counts as acks by id do; an id not in flight changes nothing.
func TestCountsAckEnvelopes(t *testing.T) {
	countsBackends(t, func(t *testing.T, c redis.UniversalClient) {
		ctx := storeCtx(t)
		s, err := New(ctx, c, Options{Prefix: "a", Cluster: "c", Shards: 2, DoneWindow: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		var envs []*envelope.Envelope
		for i := range 40 {
			envs = append(envs, &envelope.Envelope{ID: fmt.Sprintf("m-%d", i), Route: fmt.Sprintf("r%d", i%3),
				SourceBroker: envelope.BrokerKafka, Source: "t", DueAt: t0, Payload: []byte("p")})
		}
		mustPark(t, s, envs...)
		var claimed []*envelope.Envelope
		for sh := range 2 {
			items, _ := mustClaim(t, s, sh, mustLease(t, s, sh, "i1"), t0, 15)
			claimed = append(claimed, items...)
		}
		checkCounts(t, s, "claim")
		if err := s.AckEnvelopes(ctx, append(slices.Clone(claimed[:20]), envs[39]), t0); err != nil { // envs[39]: maybe not in flight
			t.Fatal(err)
		}
		checkCounts(t, s, "ack with routes")
		if err := s.AckMany(ctx, ids(claimed[20:]), t0); err != nil {
			t.Fatal(err)
		}
		checkCounts(t, s, "ack by id")
		if c, _ := s.RouteCounts(ctx); c.Routes()["r0"].Inflight != 0 || c.Routes()["r0"].Pending == 0 {
			t.Fatalf("r0: %+v", c.Routes()["r0"])
		}
	})
}
