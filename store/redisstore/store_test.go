package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/delaybridge/delay-bridge/lua"
	"github.com/delaybridge/delay-bridge/testkit"
)

const t0 = int64(1_700_000_000_000) // a fixed "now" in unix ms: scripts never read the clock

func storeCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newTestStore starts a redis-server of its own and a Store on it.
func newTestStore(t *testing.T, opt Options) (*Store, *testkit.Redis, *redis.Client) {
	t.Helper()
	r := testkit.StartRedis(t)
	c := r.Client()
	if opt.Shards == 0 {
		opt.Shards = 4
	}
	if opt.DoneWindow == 0 {
		opt.DoneWindow = time.Hour
	}
	s, err := New(storeCtx(t), c, opt)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s, r, c
}

func env(id string, due int64) *envelope.Envelope {
	return &envelope.Envelope{
		ID: id, Route: "orders", SourceBroker: envelope.BrokerKafka, Source: "orders.delay",
		DueAt: due, ReceivedAt: due - 1000, Key: []byte("k-" + id), Payload: []byte("payload " + id),
		Headers: []envelope.Header{{Key: "traceparent", Value: "00-abc-def-01"}},
	}
}

// idsOnShard returns n ids that all hash to shard.
func idsOnShard(s *Store, shard, n int, prefix string) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if s.ShardOf(id) == shard {
			out = append(out, id)
		}
	}
	return out
}

func mustPark(t *testing.T, s *Store, envs ...*envelope.Envelope) []bool {
	t.Helper()
	parked, _, err := s.Park(storeCtx(t), envs)
	if err != nil {
		t.Fatalf("Park: %v", err)
	}
	return parked
}

func mustLease(t *testing.T, s *Store, shard int, instance string) int64 {
	t.Helper()
	tok, err := s.AcquireLease(storeCtx(t), shard, instance, time.Minute)
	if err != nil || tok == 0 {
		t.Fatalf("AcquireLease(%d, %s) = %d, %v", shard, instance, tok, err)
	}
	return tok
}

func mustClaim(t *testing.T, s *Store, shard int, tok int64, upTo int64, limit int) ([]*envelope.Envelope, int64) {
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

func wantState(t *testing.T, s *Store, id string, want State, wantScore int64) *envelope.Envelope {
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

func TestStoreParkManyShardsAndChunks(t *testing.T) {
	s, _, c := newTestStore(t, Options{Shards: 3})
	ctx := storeCtx(t)
	// More than maxItemsPerCall per shard, so every shard needs several script calls,
	// plus one payload large enough to force a chunk split by bytes.
	n := 2*maxItemsPerCall*3 + 7
	envs := make([]*envelope.Envelope, n)
	wantMin := map[int]int64{}
	for i := range envs {
		envs[i] = env(fmt.Sprintf("m-%d", i), t0+int64(n-i))
		sh := s.ShardOf(envs[i].ID)
		if d, ok := wantMin[sh]; !ok || envs[i].DueAt < d {
			wantMin[sh] = envs[i].DueAt
		}
	}
	envs[5].Payload = make([]byte, maxBytesPerCall)
	parked, minDue, err := s.Park(ctx, envs)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range parked {
		if !p {
			t.Fatalf("message %d not parked", i)
		}
	}
	if fmt.Sprint(minDue) != fmt.Sprint(wantMin) {
		t.Fatalf("minDue = %v, want %v", minDue, wantMin)
	}
	var total int64
	for sh := range 3 {
		total += c.ZCard(ctx, s.keys[sh].due).Val()
	}
	if total != int64(n) {
		t.Fatalf("%d pending, want %d", total, n)
	}
	e := wantState(t, s, envs[5].ID, StatePending, envs[5].DueAt)
	if len(e.Payload) != maxBytesPerCall {
		t.Fatalf("big payload came back with %d bytes", len(e.Payload))
	}
}

func TestStoreClaimSurvivesCorruption(t *testing.T) {
	s, _, c := newTestStore(t, Options{})
	ctx := storeCtx(t)
	a := idsOnShard(s, 1, 3, "bad")
	mustPark(t, s, env(a[0], t0), env(a[1], t0+1), env(a[2], t0+2))
	k := s.keys[1]
	c.HDel(ctx, k.msg, a[0])                    // envelope lost
	c.HSet(ctx, k.msg, a[1], "\x01\x00garbage") // envelope undecodable
	tok := mustLease(t, s, 1, "i1")
	items, next := mustClaim(t, s, 1, tok, t0+10, 10)
	if !slices.Equal(ids(items), []string{a[2]}) || next != -1 {
		t.Fatalf("claimed %v next %d, want only the healthy message", ids(items), next)
	}
	wantState(t, s, a[0], StateUnknown, 0)
	st, _, _, err := s.Get(ctx, a[1])
	if st != StateDead || !errors.Is(err, envelope.ErrCorrupt) {
		t.Fatalf("corrupt message state %q err %v, want dead + ErrCorrupt", st, err)
	}
	dead, err := s.ListDead(ctx, 10)
	if err != nil || len(dead) != 1 || dead[0].ID != a[1] || !strings.Contains(dead[0].Reason, "corrupt") {
		t.Fatalf("ListDead = %+v %v", dead, err)
	}
}

func TestStoreShardCountRefused(t *testing.T) {
	r := testkit.StartRedis(t)
	c := r.Client()
	ctx := storeCtx(t)
	if _, err := New(ctx, c, Options{Shards: 8, Cluster: "prod"}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(ctx, c, Options{Shards: 8, Cluster: "prod"}); err != nil {
		t.Fatalf("same count again: %v", err)
	}
	_, err := New(ctx, c, Options{Shards: 16, Cluster: "prod"})
	if !errors.Is(err, ErrShardCount) || fault.IsTransient(err) || !strings.Contains(err.Error(), "shards") {
		t.Fatalf("different count: %v, want a permanent ErrShardCount naming shards", err)
	}
	// Another bridge cluster in the same Redis records its own count.
	if _, err := New(ctx, c, Options{Shards: 16, Cluster: "staging"}); err != nil {
		t.Fatal(err)
	}
	if _, err := New(ctx, c, Options{Cluster: "bad{tag"}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("cluster name with a brace: %v", err)
	}
}

func TestStoreRedisRestartNoScript(t *testing.T) {
	s, r, c := newTestStore(t, Options{})
	ctx := storeCtx(t)
	s.fns.on.Store(false) // EVALSHA, as on a server without FUNCTION (library_test.go)
	// SIGKILL loses what AOF has not fsynced yet; the test is about scripts, not that.
	if err := c.ConfigSet(ctx, "appendfsync", "always").Err(); err != nil {
		t.Fatal(err)
	}
	mustPark(t, s, env("before", t0))
	tok := mustLease(t, s, s.ShardOf("before"), "i1")

	r.Restart()
	// The first calls after a restart may meet a dead pooled connection; callers retry
	// on transient errors (fault.IsTransient), and so does this test.
	var err error
	for range 5 {
		if _, _, _, err = s.Get(ctx, "before"); err == nil || !fault.IsTransient(err) {
			break
		}
	}
	if err != nil {
		t.Fatalf("Get after restart: %v", err)
	}
	if n := c.Do(ctx, "script", "exists", s.park.Hash()).Val(); fmt.Sprint(n) != "[0]" {
		t.Fatalf("script cache survived the restart (%v): the NOSCRIPT path is not tested", n)
	}
	// Pipelined park across all shards: every EVALSHA meets NOSCRIPT and is re-sent.
	var envs []*envelope.Envelope
	for i := range 20 {
		envs = append(envs, env(fmt.Sprintf("after-%d", i), t0))
	}
	parked, _, err := s.Park(ctx, envs)
	if err != nil || slices.Contains(parked, false) {
		t.Fatalf("Park after restart = %v %v", parked, err)
	}
	c.ScriptFlush(ctx)
	if err := s.AckMany(ctx, []string{"x", "y", "z", "w", "v"}, t0); err != nil {
		t.Fatalf("AckMany after SCRIPT FLUSH: %v", err)
	}
	c.ScriptFlush(ctx)
	items, _, err := s.Claim(ctx, s.ShardOf("before"), "i1", tok, t0, t0+1, 100)
	if err != nil || !slices.Contains(ids(items), "before") {
		t.Fatalf("Claim after restart = %v %v", ids(items), err)
	}
}

func TestStoreErrorsRetryable(t *testing.T) {
	r := testkit.StartRedis(t)
	// No client-side retries, so the error surfaces at once.
	c := redis.NewClient(&redis.Options{Addr: r.Addr(), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	ctx := storeCtx(t)
	s, err := New(ctx, c, Options{Shards: 4})
	if err != nil {
		t.Fatal(err)
	}
	r.Kill()
	_, _, err = s.Park(ctx, []*envelope.Envelope{env("down", t0)})
	if err == nil || !fault.IsTransient(err) {
		t.Fatalf("park with Redis down: %v (retryable %v)", err, fault.IsTransient(err))
	}
	if _, _, err := s.Recover(ctx, 0, t0, 10); err == nil || !fault.IsTransient(err) {
		t.Fatalf("recover with Redis down: %v", err)
	}
	// Marked by the store itself (redisErr), not only recognised by fault's fallback.
	if err := s.Heartbeat(ctx, "i1", t0); !errors.Is(err, fault.ErrTransient) {
		t.Fatalf("heartbeat with Redis down: %v, want marked transient", err)
	}
	for _, e := range []error{ErrShardCount, ErrInvalid} {
		if !fault.IsPermanent(fmt.Errorf("wrapped: %w", e)) {
			t.Fatalf("%v not permanent", e)
		}
	}
	for _, e := range []error{ErrFenced, ErrShardCount, ErrInvalid, envelope.ErrCorrupt, context.Canceled, nil} {
		if fault.IsTransient(fmt.Errorf("wrapped: %w", e)) && e != nil {
			t.Fatalf("%v classified retryable", e)
		}
	}
	for _, e := range []error{ErrNotReplicated, context.DeadlineExceeded, errors.New("x")} {
		want := e != nil && e.Error() != "x"
		if fault.IsTransient(fmt.Errorf("wrapped: %w", e)) != want {
			t.Fatalf("fault.IsTransient(%v) != %v", e, want)
		}
	}
}

func TestStoreWakeFormat(t *testing.T) {
	m := map[int]int64{3: t0 + 5, 0: t0}
	p := FormatWake(m)
	if p != fmt.Sprintf("0:%d,3:%d", t0, t0+5) {
		t.Fatalf("FormatWake = %q", p)
	}
	back, err := ParseWake(p)
	if err != nil || fmt.Sprint(back) != fmt.Sprint(m) {
		t.Fatalf("ParseWake = %v %v", back, err)
	}
	if _, err := ParseWake("1:x"); err == nil {
		t.Fatal("bad payload accepted")
	}
	s, _, c := newTestStore(t, Options{})
	ctx := storeCtx(t)
	sub := c.Subscribe(ctx, s.WakeChannel())
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.PublishWake(ctx, m); err != nil {
		t.Fatal(err)
	}
	msg, err := sub.ReceiveMessage(ctx)
	if err != nil || msg.Payload != p {
		t.Fatalf("received %v %v", msg, err)
	}
}

// TestStoreKeysShareHashTag checks, with Redis's own CLUSTER KEYSLOT, that all keys a
// script is given for one shard map to one slot, and that the scripts pass every key in
// KEYS (Redis Cluster refuses a script whose keys span slots).
func TestStoreKeysShareHashTag(t *testing.T) {
	r := testkit.StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	c := r.Client()
	ctx := storeCtx(t)
	s, err := New(ctx, newSingleNodeCluster(t, r), Options{Shards: 5, Cluster: "a:b"})
	if err != nil {
		t.Fatal(err)
	}
	slots := map[int64]bool{}
	for sh, k := range s.keys {
		var slot int64 = -1
		for _, key := range []string{k.due, k.msg, k.inflight, k.dead, k.counts, k.owner, k.fence, k.ix, k.ix + ":7", k.dn, k.dn + ":0:1024",
			k.bucketIndex(), k.bucketStats(), k.bucketIndex() + ":7", k.due[:len(k.due)-3] + "hf:7", k.due[:len(k.due)-3] + "hc:7"} {
			got, err := c.ClusterKeySlot(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			if slot >= 0 && got != slot {
				t.Fatalf("shard %d: key %s in slot %d, others in %d", sh, key, got, slot)
			}
			slot = got
		}
		slots[slot] = true
	}
	if len(slots) < 3 {
		t.Fatalf("5 shards map to only %d slots: the tag does not spread shards", len(slots))
	}
	a, _ := c.ClusterKeySlot(ctx, s.membersKey).Result()
	b, _ := c.ClusterKeySlot(ctx, s.metaKey).Result()
	if a != b {
		t.Fatalf("members and meta in slots %d and %d", a, b)
	}
	// Scripts must not reference keys beyond KEYS: look for key-building in the sources.
	// The exceptions are the index helper (lua/includes/index.lua) and its block marks
	// (kbmark.lua), which append to the shard's ix and dn keys, and the cold tier's
	// (lua/includes/cold.lua) and the due buckets' (bucket.lua), which append to the
	// shard's due key; TestStoreIndexLayout
	// checks their keys' slot.
	for name, src := range lua.All() {
		for _, h := range []string{lua.IndexHelper, lua.MarkHelper, lua.ColdHelper, lua.BucketHelper} {
			src = strings.ReplaceAll(src, h, "")
		}
		if strings.Contains(src, "..':'") || strings.Contains(src, ".. ':'") || strings.Contains(src, "'{'") {
			t.Fatalf("script %s seems to build a key name", name)
		}
	}
}

// newSingleNodeCluster turns a cluster-enabled redis-server into a one-node cluster
// owning every slot and returns a ClusterClient for it.
func newSingleNodeCluster(t *testing.T, r *testkit.Redis) *redis.ClusterClient {
	t.Helper()
	c := r.Client()
	ctx := storeCtx(t)
	if err := c.Do(ctx, "cluster", "addslotsrange", 0, 16383).Err(); err != nil {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(c.ClusterInfo(ctx).Val(), "cluster_state:ok") {
		if time.Now().After(deadline) {
			t.Fatalf("cluster not ok: %s", c.ClusterInfo(ctx).Val())
		}
		time.Sleep(20 * time.Millisecond)
	}
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{r.Addr()}})
	t.Cleanup(func() { cc.Close() })
	return cc
}

// newClusterStore is a store of 8 shards on a one-node Redis Cluster, and its client.
func newClusterStore(t *testing.T) (*Store, *redis.ClusterClient) {
	t.Helper()
	r := testkit.StartRedis(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	cc := newSingleNodeCluster(t, r)
	s, err := New(storeCtx(t), cc, Options{Shards: 8, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	return s, cc
}

// pipelineCounter counts the pipelines a client sends through its own (cluster-level)
// pipeline, not its nodes'.
type pipelineCounter struct{ n atomic.Int64 }

func (h *pipelineCounter) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipelineCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *pipelineCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// TestClusterCallsGoPerPrimary: on Redis Cluster the store's pipelined calls (a park
// over several shards, their acks) and pipelined plain commands (reads over shards) go
// to each primary through that primary's client, never through the cluster client's
// pipeline, whose retries can run one command on two nodes at once (pipelinePerNode).
func TestClusterCallsGoPerPrimary(t *testing.T) {
	s, cc := newClusterStore(t)
	ctx := storeCtx(t)
	count := &pipelineCounter{}
	cc.AddHook(count)
	var envs []*envelope.Envelope
	for i := range 40 {
		envs = append(envs, env(fmt.Sprintf("pp-%d", i), t0+int64(i)))
	}
	parked, _, err := s.Park(ctx, envs)
	if err != nil || slices.Contains(parked, false) {
		t.Fatalf("Park = %v %v", parked, err)
	}
	if err := s.AckEnvelopes(ctx, envs, t0); err != nil {
		t.Fatal(err)
	}
	// Plain commands too (pipelined): reads of envelopes, counts and shard stats.
	if got, err := s.Envelopes(ctx, []string{envs[0].ID, envs[1].ID}); err != nil || got[0] == nil || got[1] == nil {
		t.Fatalf("Envelopes = %v %v", got, err)
	}
	if c, err := s.RouteCounts(ctx); err != nil || len(c.Shards) != 8 {
		t.Fatalf("RouteCounts = %+v %v", c, err)
	}
	if st, err := s.ShardStats(ctx); err != nil || len(st) != 8 {
		t.Fatalf("ShardStats = %+v %v", st, err)
	}
	if n := count.n.Load(); n != 0 {
		t.Fatalf("%d pipelines through the cluster client; want none (per primary)", n)
	}
	if st, _, _, err := s.Get(ctx, envs[0].ID); err != nil || st != StatePending {
		t.Fatalf("%s after park and an ack of what was not in flight: %v %v, want pending", envs[0].ID, st, err)
	}
}

// TestStoreOnCluster runs many shards through a ClusterClient on a one-node cluster,
// where pipelines are split by slot and a script with keys in two slots is refused,
// and MinReplicas' per-primary WAIT. (The whole lifecycle runs on a real three-master
// cluster in conformance_test.go.)
func TestStoreOnCluster(t *testing.T) {
	s, cc := newClusterStore(t)
	ctx := storeCtx(t)
	var envs []*envelope.Envelope
	for i := range 100 {
		envs = append(envs, env(fmt.Sprintf("cl-%d", i), t0+int64(i)))
	}
	parked, minDue, err := s.Park(ctx, envs)
	if err != nil || slices.Contains(parked, false) || len(minDue) != 8 {
		t.Fatalf("Park = %v %v %v", parked, minDue, err)
	}
	var claimed []string
	for sh := range 8 {
		tok, err := s.AcquireLease(ctx, sh, "i1", time.Minute)
		if err != nil || tok == 0 {
			t.Fatalf("lease %d: %d %v", sh, tok, err)
		}
		if n, _, err := s.Recover(ctx, sh, t0, 100); err != nil || n != 0 {
			t.Fatalf("recover: %d %v", n, err)
		}
		items, next, err := s.Claim(ctx, sh, "i1", tok, t0+1000, t0+30_000, 1000)
		if err != nil || next != -1 {
			t.Fatalf("claim %d: %v next %d", sh, err, next)
		}
		claimed = append(claimed, ids(items)...)
		if len(items) > 1 {
			if err := s.Retry(ctx, sh, []RetryItem{{Env: items[0], Due: t0 + 5000}, {Env: items[1], Dead: true}}, t0); err != nil {
				t.Fatal(err)
			}
		}
		if ok, err := s.RenewLease(ctx, sh, "i1", tok, time.Minute); err != nil || !ok {
			t.Fatalf("renew: %v %v", ok, err)
		}
	}
	if len(claimed) != 100 {
		t.Fatalf("claimed %d", len(claimed))
	}
	if err := s.AckMany(ctx, claimed, t0); err != nil {
		t.Fatal(err)
	}
	stats, err := s.ShardStats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var pending, dead int64
	for _, st := range stats {
		pending += st.Pending
		dead += st.Dead
		if st.Owner != "i1" {
			t.Fatalf("stats %+v", st)
		}
	}
	if pending != 8 || dead != 8 {
		t.Fatalf("pending %d dead %d, want 8 and 8", pending, dead)
	}
	if st, _, err := s.Cancel(ctx, "cl-1", t0, CancelOptions{}); err != nil || st == StateUnknown {
		t.Fatalf("cancel = %q %v", st, err)
	}
	if _, err := s.Reschedule(ctx, "cl-2", t0); err != nil {
		t.Fatal(err)
	}
	stats, _ = s.ShardStats(ctx)
	dead = 0
	for _, st := range stats {
		dead += st.Dead
	}
	if dl, err := s.ListDead(ctx, 100); err != nil || int64(len(dl)) != dead || dead < 6 {
		t.Fatalf("ListDead = %d %v, stats say %d", len(dl), err, dead)
	}
	if _, err := s.PurgeDead(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Heartbeat(ctx, "i1", t0); err != nil {
		t.Fatal(err)
	}
	if m, err := s.Members(ctx, t0, time.Second); err != nil || !slices.Equal(m, []string{"i1"}) {
		t.Fatalf("Members = %v %v", m, err)
	}

	// MinReplicas on Cluster: WAIT runs per primary; this node has no replica.
	s2, err := New(ctx, cc, Options{Shards: 8, MinReplicas: 1, WaitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	parked, _, err = s2.Park(ctx, []*envelope.Envelope{env("w-1", t0), env("w-2", t0)})
	if !errors.Is(err, ErrNotReplicated) || !fault.IsTransient(err) || !slices.Equal(parked, []bool{true, true}) {
		t.Fatalf("Park with an unmet MinReplicas on cluster = %v %v", parked, err)
	}
}

func TestStoreMinReplicas(t *testing.T) {
	// Without a zero delay the primary waits 5s before the first full sync.
	primary := testkit.StartRedis(t, "--repl-diskless-sync-delay", "0")
	replica := testkit.StartRedis(t, "--replicaof", "127.0.0.1", fmt.Sprint(primary.Port))
	rc := replica.Client()
	ctx := storeCtx(t)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(rc.Info(ctx, "replication").Val(), "master_link_status:up") {
		if time.Now().After(deadline) {
			t.Fatal("replica did not connect")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A replica refuses writes (READONLY): transient, a failover may be under way.
	if _, err := New(ctx, rc, Options{Shards: 4}); !redis.IsReadOnlyError(err) || !errors.Is(err, fault.ErrTransient) {
		t.Fatalf("New on a replica: %v, want READONLY marked transient", err)
	}
	c := primary.Client()
	s, err := New(ctx, c, Options{Shards: 4, MinReplicas: 1, DoneWindow: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	var envs []*envelope.Envelope
	for i := range 20 {
		envs = append(envs, env(fmt.Sprintf("rep-%d", i), t0))
	}
	if _, _, err := s.Park(ctx, envs); err != nil {
		t.Fatalf("Park with one replica: %v", err)
	}
	// The replica has them when Park returns.
	for sh := range 4 {
		if n := rc.ZCard(ctx, s.keys[sh].due).Val(); n != c.ZCard(ctx, s.keys[sh].due).Val() {
			t.Fatalf("replica shard %d has %d", sh, n)
		}
	}
	// After a script cache flush the re-sent EVALs are waited for too.
	c.ScriptFlush(ctx)
	if _, _, err := s.Park(ctx, []*envelope.Envelope{env("rep-x", t0)}); err != nil {
		t.Fatalf("Park after flush: %v", err)
	}
	if _, err := s.Bury(ctx, []*envelope.Envelope{env("rep-bad", t0)}, t0); err != nil {
		t.Fatalf("Bury: %v", err)
	}

	s2, err := New(ctx, c, Options{Shards: 4, MinReplicas: 2, WaitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	parked, minDue, err := s2.Park(ctx, []*envelope.Envelope{env("rep-y", t0+7)})
	if !errors.Is(err, ErrNotReplicated) || !fault.IsTransient(err) {
		t.Fatalf("Park wanting 2 replicas: %v, want retryable ErrNotReplicated", err)
	}
	if !parked[0] || len(minDue) != 1 {
		t.Fatalf("results not reported with ErrNotReplicated: %v %v", parked, minDue)
	}
}

// recorder is an Observer that remembers script timings and invalid counts.
type recorder struct {
	observe.Nop
	mu      sync.Mutex
	scripts map[string]int
	invalid map[string]int
}

func (r *recorder) ScriptDuration(name string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if d <= 0 {
		panic("non-positive script duration")
	}
	r.scripts[name]++
}

func (r *recorder) Invalid(route, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.invalid[reason]++
}

func TestStoreObserver(t *testing.T) {
	rec := &recorder{scripts: map[string]int{}, invalid: map[string]int{}}
	s, _, c := newTestStore(t, Options{Observer: rec})
	ctx := storeCtx(t)
	a := idsOnShard(s, 0, 3, "o")
	mustPark(t, s, env(a[0], t0), env(a[1], t0), env(a[2], t0))
	c.HDel(ctx, s.keys[0].msg, a[0])
	c.HSet(ctx, s.keys[0].msg, a[1], "junk")
	tok := mustLease(t, s, 0, "i1")
	mustClaim(t, s, 0, tok, t0, 10)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for _, name := range []string{"park", "lease_acquire", "claim", "retry"} {
		if rec.scripts[name] != 1 {
			t.Fatalf("script timings %v: want one %s", rec.scripts, name)
		}
	}
	if rec.invalid["missing_envelope"] != 1 || rec.invalid["corrupt_envelope"] != 1 {
		t.Fatalf("invalid counts %v", rec.invalid)
	}
}

// TestStoreObserverCountsPipelinedCalls: a park spread over three shards is one round
// trip of three script calls, and the script histogram counts three (it counts what
// Redis runs, which is what a call's fixed cost is paid on).
func TestStoreObserverCountsPipelinedCalls(t *testing.T) {
	rec := &recorder{scripts: map[string]int{}, invalid: map[string]int{}}
	s, _, _ := newTestStore(t, Options{Observer: rec})
	var envs []*envelope.Envelope
	for sh := range 3 {
		envs = append(envs, env(idsOnShard(s, sh, 1, "p")[0], t0))
	}
	mustPark(t, s, envs...)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if rec.scripts["park"] != 3 {
		t.Fatalf("script timings %v: want 3 park calls", rec.scripts)
	}
}
