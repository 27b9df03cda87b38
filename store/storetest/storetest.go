// Package storetest is the one conformance suite of the shard store: the behaviour
// every implementation of storeapi.Store must have, checked through its methods only
// (states, scores and envelopes as Get reports them, claims, leases, notifications,
// browse pages, counts, job records and batches), never through the Redis keys. store/redisstore runs it on a real redis-server, a real Redis Cluster
// and miniredis (the embedded server of `bridge dev`); store/memstore runs
// it on the in-memory store. Tests of the Redis key layout itself stay in
// store/redisstore.
//
// A backend that cannot run a case excludes it by name with a written reason
// (Options.Exclude); the suite logs every exclusion, and fails on a reason that names
// no case, so the list cannot go stale silently.
package storetest

import (
	"context"
	"fmt"
	"hash/fnv"
	"sort"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Config is what a case asks of its store.
type Config struct {
	Shards     int
	DoneWindow time.Duration // as configured: zero remembers nothing
	Ordered    []string      // routes with `order: key` (storeapi/order.go)
}

// Subject is a fresh, empty store for one case, with the two handles on time the
// suite needs.
type Subject struct {
	Store storeapi.Store
	// Elapse lets d pass on the clock that runs lease TTLs (a real server: sleep; a
	// server or store with a fake clock: advance it).
	Elapse func(d time.Duration)
	// ExpireLease makes shard's lease lapse now, as if its TTL had passed.
	ExpireLease func(shard int)
}

// Factory makes the Subject of one case; it registers its own cleanup on t.
type Factory func(t *testing.T, cfg Config) Subject

// Options tune a run.
type Options struct {
	// Exclude maps case names to the reason this backend cannot run them.
	Exclude map[string]string
}

type testCase struct {
	name string
	run  func(t *testing.T, newSubject func(Config) Subject)
}

var cases []testCase

func register(name string, run func(t *testing.T, newSubject func(Config) Subject)) {
	for _, c := range cases {
		if c.name == name {
			panic("storetest: case " + name + " registered twice")
		}
	}
	cases = append(cases, testCase{name, run})
}

// Names lists the suite's cases.
func Names() []string {
	out := make([]string, len(cases))
	for i, c := range cases {
		out[i] = c.name
	}
	sort.Strings(out)
	return out
}

// Run runs every case as a subtest on stores made by newSubject.
func Run(t *testing.T, newSubject Factory, opt Options) {
	known := map[string]bool{}
	for _, c := range cases {
		known[c.name] = true
	}
	for name, why := range opt.Exclude {
		if !known[name] {
			t.Fatalf("storetest: excluded case %q (%s) does not exist", name, why)
		}
		if why == "" {
			t.Fatalf("storetest: case %q excluded without a reason", name)
		}
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if why, ok := opt.Exclude[c.name]; ok {
				t.Logf("excluded for this backend: %s", why)
				return
			}
			c.run(t, func(cfg Config) Subject { return newSubject(t, cfg) })
		})
	}
}

// ---------------------------------------------------------------------------------
// Helpers shared by the cases.

const t0 = int64(1_700_000_000_000) // a fixed "now" in unix ms: stores never read the clock for it

func storeCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// defaults is the configuration most cases use: 4 shards, a done window of an hour.
var defaults = Config{Shards: 4, DoneWindow: time.Hour}

func env(id string, due int64) *envelope.Envelope {
	return &envelope.Envelope{
		ID: id, Route: "orders", SourceBroker: envelope.BrokerKafka, Source: "orders.delay",
		DueAt: due, ReceivedAt: due - 1000, Key: []byte("k-" + id), Payload: []byte("payload " + id),
		Headers: []envelope.Header{{Key: "traceparent", Value: "00-abc-def-01"}},
	}
}

func envOn(id, route string, due int64) *envelope.Envelope {
	e := env(id, due)
	e.Route = route
	return e
}

// idsOnShard returns n ids that all hash to shard.
func idsOnShard(s storeapi.Store, shard, n int, prefix string) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if s.ShardOf(id) == shard {
			out = append(out, id)
		}
	}
	return out
}

func mustPark(t *testing.T, s storeapi.Store, envs ...*envelope.Envelope) []bool {
	t.Helper()
	parked, _, err := s.Park(storeCtx(t), envs)
	if err != nil {
		t.Fatalf("Park: %v", err)
	}
	return parked
}

func mustLease(t *testing.T, s storeapi.Store, shard int, instance string) int64 {
	t.Helper()
	tok, err := s.AcquireLease(storeCtx(t), shard, instance, time.Minute)
	if err != nil || tok == 0 {
		t.Fatalf("AcquireLease(%d, %s) = %d, %v", shard, instance, tok, err)
	}
	return tok
}

func mustClaim(t *testing.T, s storeapi.Store, shard int, tok int64, upTo int64, limit int) ([]*envelope.Envelope, int64) {
	t.Helper()
	items, next, err := s.Claim(storeCtx(t), shard, "i1", tok, upTo, upTo+30_000, limit)
	if err != nil {
		t.Fatalf("Claim: %v", err)
	}
	return items, next
}

func ids(envs []*envelope.Envelope) []string {
	out := make([]string, len(envs))
	for i, e := range envs {
		out[i] = e.ID
	}
	return out
}

// wantState checks id's state and (unless wantScore < 0) its score, and returns its
// envelope.
func wantState(t *testing.T, s storeapi.Store, id string, want storeapi.State, wantScore int64) *envelope.Envelope {
	t.Helper()
	st, score, e, err := s.Get(storeCtx(t), id)
	if err != nil {
		t.Fatalf("Get(%s): %v", id, err)
	}
	if st != want || (wantScore >= 0 && score != wantScore) {
		t.Fatalf("Get(%s) = %q score %d, want %q score %d", id, st, score, want, wantScore)
	}
	return e
}

// countStates counts ids by the state Get reports.
func countStates(t *testing.T, s storeapi.Store, idList []string) map[storeapi.State]int {
	t.Helper()
	out := map[storeapi.State]int{}
	for _, id := range idList {
		st, _, _, err := s.Get(storeCtx(t), id)
		if err != nil {
			t.Fatalf("Get(%s): %v", id, err)
		}
		out[st]++
	}
	return out
}

// fnvShard is FNV-1a 32 of a shard name modulo shards, the shard mapping every store
// must share (docs/CONTRACT.md §3).
func fnvShard(id string, shards int) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(id))
	return int(h.Sum32() % uint32(shards))
}
