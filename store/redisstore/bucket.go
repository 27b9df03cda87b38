package redisstore

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// Due buckets (lua/includes/bucket.lua): park's quick path may put a message into the
// set of its due time's bucket instead of the shard's due sorted set, and a claim takes
// a bucket whole. bucketWidth and bucketLead are bucket.lua's HB_W and the distance
// ahead a message must be due to be bucketed: the bucket after the current one, so
// that a bucket is claimed once (park adds nothing to one at or below the highest
// claimed) and the claimers, whose lookahead stays above bucketWidth, claim each bucket
// before its first message is due.
const (
	bucketWidth = 1024
	bucketLead  = 2 * bucketWidth
)

// BucketWidth is the width of a due bucket: Options.Buckets needs the claimers'
// lookahead to be at least this.
const BucketWidth = bucketWidth * time.Millisecond

// bucketGroup is one bucket's messages at the end of a quick park call: n messages from
// position at of the call's batch, their envelopes' bytes.
type bucketGroup struct {
	b, at, n int64
	bytes    int64
}

// bucketLast reorders one quick call's messages ch (the first c claimed at park) so
// that those to bucket (not claimed, due bucketLead or more after now) come last,
// grouped by bucket in rising order, and returns their groups.
func bucketLast(envs []*envelope.Envelope, ch []encoded, c int, now int64) ([]encoded, []bucketGroup) {
	rest := ch[c:]
	if !slices.ContainsFunc(rest, func(it encoded) bool { return envs[it.idx].DueAt >= now+bucketLead }) {
		return ch, nil
	}
	out := make([]encoded, 0, len(ch))
	out = append(out, ch[:c]...)
	var later []encoded
	for _, it := range rest {
		if envs[it.idx].DueAt >= now+bucketLead {
			later = append(later, it)
		} else {
			out = append(out, it)
		}
	}
	slices.SortStableFunc(later, func(x, y encoded) int {
		return int(envs[x.idx].DueAt/bucketWidth - envs[y.idx].DueAt/bucketWidth)
	})
	var groups []bucketGroup
	for _, it := range later {
		b := envs[it.idx].DueAt / bucketWidth
		if len(groups) == 0 || groups[len(groups)-1].b != b {
			groups = append(groups, bucketGroup{b: b, at: int64(len(out))})
		}
		g := &groups[len(groups)-1]
		g.n++
		g.bytes += int64(len(it.data))
		out = append(out, it)
	}
	return out, groups
}

// appendBuckets appends park.lua's buckets of a quick call: their number, then per
// bucket its number, messages, bytes, and its routes' counts.
func appendBuckets(args []any, envs []*envelope.Envelope, ch []encoded, groups []bucketGroup) []any {
	args = append(args, len(groups))
	for _, g := range groups {
		args = append(args, g.b, g.n, g.bytes)
		type tally struct {
			route string
			n     int
		}
		var ts []tally
		for _, it := range ch[g.at : g.at+g.n] {
			r := envs[it.idx].Route
			i := slices.IndexFunc(ts, func(t tally) bool { return t.route == r })
			if i < 0 {
				i, ts = len(ts), append(ts, tally{route: r})
			}
			ts[i].n++
		}
		args = append(args, len(ts))
		for _, t := range ts {
			args = append(args, t.route, t.n)
		}
	}
	return args
}

// appendAckBuckets appends ack.lua's due buckets of an ack call's ids, whose DueAt
// are dues (consecutive per bucket): their number, then pairs of a bucket and how many
// ids are its.
func appendAckBuckets(args []any, dues []int64) []any {
	at := len(args)
	args = append(args, 0)
	g := 0
	for i := 0; i < len(dues); {
		b, j := dues[i]/bucketWidth, i+1
		for j < len(dues) && dues[j]/bucketWidth == b {
			j++
		}
		args = append(args, b, j-i)
		g++
		i = j
	}
	args[at] = g
	return args
}

// flushBuckets moves every shard's due buckets into its due and inflight sorted sets
// (lua/bucket_flush.lua), for the readers that range over those by score: browse,
// counts and edges by score, bulk jobs; parks after it bucket again. Each call moves at
// most bucketsPerFlush buckets of each kind (a few thousand messages), so that Redis
// answers others between them; the shards that have more go again.
func (s *Store) flushBuckets(ctx context.Context) error {
	shards := make([]int, len(s.keys))
	for i := range shards {
		shards[i] = i
	}
	for len(shards) > 0 {
		calls := make([]call, len(shards))
		for i, sh := range shards {
			k := s.keys[sh]
			calls[i] = call{sc: s.bucketFlush, keys: withGuard(k, []string{k.due}), args: []any{bucketsPerFlush}}
		}
		cmds, err := s.evalPipelined(ctx, calls, false)
		if err != nil {
			return fmt.Errorf("scheduler: flush due buckets: %w", err)
		}
		more := shards[:0]
		for i, cmd := range cmds {
			if n, _ := cmd.Int64(); n > 0 {
				more = append(more, shards[i])
			}
		}
		shards = more
	}
	return nil
}

// bucketsPerFlush bounds one bucket_flush call: up to this many pending and claimed
// buckets each (4 × 1,024 ids at most).
const bucketsPerFlush = 4

func (k shardKeys) bucketIndex() string { return k.due[:len(k.due)-len("due")] + "hb" }
func (k shardKeys) bucketStats() string { return k.due[:len(k.due)-len("due")] + "hs" }

// addBuckets adds a shard's bucketed ids (HMGET hs p f) to its stats, and its earliest
// pending bucket's start to NextDue.
func addBuckets(st *ShardStat, pf []any, head []redis.Z) {
	for i, v := range pf {
		str, _ := v.(string)
		n, _ := strconv.ParseInt(str, 10, 64)
		if i == 0 {
			st.Pending += n
		} else {
			st.Inflight += n
		}
	}
	if len(head) > 0 {
		b, _ := strconv.ParseInt(head[0].Member.(string), 10, 64)
		if start := b * bucketWidth; st.NextDue < 0 || start < st.NextDue {
			st.NextDue = start
		}
	}
}

// bucketRead is what bucketEnvelopes read for one claim: the envelopes of the due
// buckets' ids it took (nil where an id had none), or the error of that read.
type bucketRead struct {
	envs []any
	err  error
}

// bucketEnvelopes reads the envelopes of the due buckets' ids that claims cmds (of
// shards) took, for all of them in one pipelined round trip of one HMGET per shard and
// 512 ids: a claim's reply names them last (claim.lua), and their envelopes never
// enter Lua.
func (s *Store) bucketEnvelopes(ctx context.Context, shards []int, cmds []*redis.Cmd) []bucketRead {
	out := make([]bucketRead, len(cmds))
	type part struct {
		at  int // index of cmds
		cmd *redis.SliceCmd
	}
	var parts []part
	_, err := s.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for j, cmd := range cmds {
			ids := bucketIDs(cmd)
			for start := 0; start < len(ids); start += maxItemsPerCall {
				parts = append(parts, part{at: j, cmd: pipe.HMGet(ctx, s.keys[shards[j]].msg, ids[start:min(start+maxItemsPerCall, len(ids))]...)})
			}
		}
		return nil
	})
	for _, p := range parts {
		if p.cmd.Err() != nil {
			out[p.at].err = fmt.Errorf("scheduler: claim shard %d: read a due bucket's envelopes: %w", shards[p.at], redisErr(p.cmd.Err()))
			continue
		}
		out[p.at].envs = append(out[p.at].envs, p.cmd.Val()...)
	}
	if err != nil {
		for j := range out {
			if out[j].err == nil && len(bucketIDs(cmds[j])) > 0 {
				out[j].err = fmt.Errorf("scheduler: claim shard %d: read a due bucket's envelopes: %w", shards[j], redisErr(err))
			}
		}
	}
	return out
}

// bucketIDs are the due buckets' ids a claim's reply names (claim.lua: { nextDue,
// dropped, need, k, triples, id1 .. idk }), none for a reply that is not one.
func bucketIDs(cmd *redis.Cmd) []string {
	if cmd == nil || cmd.Err() != nil {
		return nil
	}
	vals, err := cmd.Slice()
	if err != nil || len(vals) < 4 {
		return nil
	}
	k, _ := vals[3].(int64)
	if k <= 0 || int(k) > len(vals)-4 {
		return nil
	}
	ids := make([]string, k)
	for i, v := range vals[len(vals)-int(k):] {
		ids[i], _ = v.(string)
	}
	return ids
}

// bucketTriples appends to vals, a claim's reply, the (id, due, envelope) triples of
// the due buckets' ids it took (ids) with their envelopes r: due 0 (fire at DueAt), or
// -1 for an id without an envelope (skipped).
func bucketTriples(shard int, vals, ids []any, r bucketRead) ([]any, error) {
	if r.err != nil {
		return nil, r.err
	}
	if len(r.envs) != len(ids) {
		return nil, fmt.Errorf("scheduler: claim shard %d: %d envelopes read for %d ids of due buckets", shard, len(r.envs), len(ids))
	}
	for i, v := range ids {
		raw, ok := r.envs[i].(string)
		due := int64(0)
		if !ok {
			due = -1
		}
		vals = append(vals, v, due, raw)
	}
	return vals, nil
}
