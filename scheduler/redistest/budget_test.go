package redistest

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/store/redisstore"
	"github.com/delaybridge/delay-bridge/store/storeapi"
	"github.com/delaybridge/delay-bridge/testkit"
)

// The Redis work of the hot path — park, claim and ack — as counts per message, read
// from the server's INFO commandstats (a command a script runs shows there under its
// own name). Counts, never times: they do not move with the machine's load.
const (
	// budgetScriptCallsPerMsg bounds the script calls (EVALSHA, EVAL or FCALL) per
	// message over park, claim and ack of a source fetch whose messages fire together.
	// Each call pays a fixed cost in Redis far above a message's own share, so the
	// calls must carry tens of messages: the Kafka default ids of one fetch share a
	// shard (storeapi.ShardOf, ShardBlock offsets per shard), so a fetch costs one call
	// of each kind per block it touches. Measured 0.030–0.035 on the shapes below; with
	// ids hashed whole, 0.80–0.90 at 64 shards and 2.2–2.7 at 1,024.
	budgetScriptCallsPerMsg = 0.05
	// budgetCommandsPerMsg bounds every other command per message (the data commands
	// the scripts run — ZADD, HMGET, HSET, ZREM, ZMSCORE, ZRANGEBYSCORE, HDEL, BITCOUNT,
	// GETRANGE, SETRANGE, ... — and the wake-up PUBLISH). Measured 0.27–0.28 on the shapes
	// below: none per message (a park tests the done window of its Kafka default ids with
	// one BITCOUNT per block, an ack writes their slots with one GETRANGE and one SETRANGE
	// per block, lua/includes/index.lua; it looks its batch up with one ZMSCORE and
	// removes it with one ZREM), only each call's own reads and writes spread over its
	// messages. With one index entry per id (an HSET each) it was 1.25–1.56; with ids
	// hashed whole, 9.1–11.7 at 64 shards and 22–29 at 1,024. With due buckets 0.42–0.45:
	// a bucket's own commands per call (park: SCARD, SADD, a counts HINCRBY per route and
	// for its bytes; claim: HGETALL, SCARD, RENAME, ZADD, SMEMBERS, DEL, ZREM and the
	// envelopes' HMGET), each carrying the bucket's messages of the call.
	budgetCommandsPerMsg = 0.5
)

// fetchShape is a source's batches as the Kafka ingress hands them over: per fetch,
// records consecutive offsets of each of partitions partitions.
type fetchShape struct {
	shards, partitions, records, fetches int
	// buckets: the store parks the records into due buckets (redisstore.Options.Buckets:
	// they are due a few seconds ahead) and the claims take the buckets whole.
	buckets bool
}

// TestHotPathRedisBudget parks Kafka records (their default ids) through the
// scheduler's intake in fetches, claims their shards and acknowledges what it claimed,
// as the pumps and the acker do for messages that fire together, and fails when the
// script calls or the other commands per message exceed their budget.
func TestHotPathRedisBudget(t *testing.T) {
	for _, sh := range []fetchShape{
		{shards: 64, partitions: 1, records: 200, fetches: 1},
		{shards: 1024, partitions: 1, records: 200, fetches: 1},
		{shards: 64, partitions: 6, records: 50, fetches: 4},
		{shards: 1024, partitions: 6, records: 50, fetches: 4},
		{shards: 64, partitions: 1, records: 200, fetches: 1, buckets: true},
		{shards: 64, partitions: 6, records: 50, fetches: 4, buckets: true},
		{shards: 1024, partitions: 6, records: 50, fetches: 4, buckets: true},
	} {
		name := fmt.Sprintf("shards=%d,partitions=%d,fetch=%d,buckets=%v", sh.shards, sh.partitions, sh.records, sh.buckets)
		t.Run(name, func(t *testing.T) {
			scripts, commands := measureHotPath(t, sh)
			t.Logf("%.4f script calls and %.2f other commands per message", scripts, commands)
			if scripts > budgetScriptCallsPerMsg {
				t.Errorf("%.4f script calls per message, budget %.3f", scripts, budgetScriptCallsPerMsg)
			}
			if commands > budgetCommandsPerMsg {
				t.Errorf("%.2f commands per message, budget %.1f", commands, budgetCommandsPerMsg)
			}
		})
	}
}

// measureHotPath runs shape sh on a fresh redis-server and returns the script calls
// and the other commands per message of its park, claim and ack.
func measureHotPath(t *testing.T, sh fetchShape) (scripts, commands float64) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rdb := testkit.StartRedis(t).Client()
	shardStore, err := redisstore.New(ctx, rdb, redisstore.Options{Prefix: "b", Cluster: "c", Shards: sh.shards, DoneWindow: time.Hour, Buckets: sh.buckets})
	if err != nil {
		t.Fatal(err)
	}
	sched := newScheduler(t, scheduler.Options{Store: shardStore, Clock: clock.Real{}, Instance: "i1"})
	shards := make([]int, sh.shards)
	for i := range shards {
		shards[i] = i
	}
	tokens, err := shardStore.AcquireLeases(ctx, shards, "i1", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// A first round loads the scripts (and anything else done once), then the counted one.
	now := time.Now().UnixMilli()
	if sh.buckets {
		// due in one bucket 3 to 4 s ahead: claimed whole at its last ms
		w := redisstore.BucketWidth.Milliseconds()
		now = (now/w + 4) * w
	}
	hotPathRound(ctx, t, sched, shardStore, tokens, sh, "warm", now)
	if err := rdb.ConfigResetStat(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if sh.buckets {
		now += redisstore.BucketWidth.Milliseconds() // the next bucket: the warm one is claimed
	}
	n := hotPathRound(ctx, t, sched, shardStore, tokens, sh, "orders.delay", now)
	stats := commandStats(ctx, t, rdb)
	for name, calls := range stats {
		name, _, _ = strings.Cut(name, "|") // "config|resetstat": Redis 7 names subcommands
		switch name {
		case "evalsha", "eval", "evalsha_ro", "eval_ro", "fcall", "fcall_ro":
			scripts += float64(calls)
		case "info", "config", "ping", "hello", "client", "select", "script", "function", "command":
		default:
			commands += float64(calls)
		}
	}
	t.Logf("commandstats: %v", stats)
	return scripts / float64(n), commands / float64(n)
}

// hotPathRound parks sh's fetches of topic (due at now) through sched.Accept, claims
// every shard holding them in one ClaimMany and acknowledges the claimed messages in
// one AckEnvelopes. It returns the messages parked.
func hotPathRound(ctx context.Context, t *testing.T, sched *scheduler.Scheduler, s storeapi.Store, tokens []int64, sh fetchShape, topic string, now int64) int {
	t.Helper()
	held := map[int]bool{}
	n := 0
	for f := range sh.fetches {
		for p := range sh.partitions {
			items := make([]scheduler.Incoming, sh.records)
			for r := range items {
				offset := int64(1000+333*p) + int64(f*sh.records+r) // blocks start anywhere
				payload := []byte("payload " + strconv.Itoa(r))
				id := ingress.KafkaRecordID(topic, p, offset, time.UnixMilli(now), nil, payload, nil)
				e := &envelope.Envelope{ID: id, Route: "r", SourceBroker: envelope.BrokerKafka, Source: topic,
					DueAt: now, ReceivedAt: now, Payload: payload}
				items[r] = scheduler.Incoming{Env: e}
				held[s.ShardOf(id)] = true
			}
			if err := sched.Accept(ctx, items); err != nil {
				t.Fatal(err)
			}
			n += len(items)
		}
	}
	upTo := now
	if sh.buckets {
		upTo = now + redisstore.BucketWidth.Milliseconds() - 1
	}
	var reqs []storeapi.ClaimRequest
	for shard := range held {
		reqs = append(reqs, storeapi.ClaimRequest{Shard: shard, Instance: "i1", Token: tokens[shard],
			UpTo: upTo, LeaseDeadline: now + 30_000, Limit: 1000})
	}
	var claimed []*envelope.Envelope
	for _, res := range s.ClaimMany(ctx, reqs) {
		if res.Err != nil {
			t.Fatal(res.Err)
		}
		claimed = append(claimed, res.Items...)
	}
	if len(claimed) != n {
		t.Fatalf("claimed %d of %d", len(claimed), n)
	}
	if err := s.AckEnvelopes(ctx, claimed, now+1); err != nil {
		t.Fatal(err)
	}
	return n
}

// commandStats is INFO commandstats: calls per command.
func commandStats(ctx context.Context, t *testing.T, rdb *redis.Client) map[string]int64 {
	t.Helper()
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, isCmd := strings.CutPrefix(name, "cmdstat_")
		if !ok || !isCmd {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				out[name], _ = strconv.ParseInt(v, 10, 64)
			}
		}
	}
	return out
}
