package store

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Multi-shard calls. Park and ack run as one script call per shard on Redis Cluster
// (a call must stay within one slot), but on a standalone Redis (or behind Sentinel),
// where there are no slots, the calls of one pipeline are merged into as few script
// calls as the per-call bounds allow (lua/multi.lua). At moderate rates a batch of
// twenty messages touches about seventeen of the 64 shards: merged, that is one script
// call instead of seventeen, and the per-call cost (the script's set-up, the counts
// read and write, command dispatch) is paid once. The callers keep building one call
// per shard and reading one reply per call: merging and splitting happen here.

// merged is one script call serving the calls at idx (indexes into the caller's
// slice), each as a group of keys and arguments.
type merged struct {
	sc    *script
	keys  []string
	args  []any
	idx   []int
	bytes int
	plain bool // a one-shard script's call, sent unchanged
}

func newMerged(c call) *merged {
	m := &merged{sc: c.sc, args: []any{c.sc.multi}}
	m.add(-1, c)
	return m
}

func (m *merged) add(i int, c call) {
	m.keys = append(m.keys, c.keys...)
	m.args = append(m.args, len(c.args))
	m.args = append(m.args, c.args...)
	m.idx = append(m.idx, i)
	m.bytes += argBytes(c.args)
}

// fits reports whether c can join m within the bounds every script call keeps.
func (m *merged) fits(c call) bool {
	return len(m.args)+1+len(c.args) <= 4*maxItemsPerCall+8 && m.bytes+argBytes(c.args) <= maxBytesPerCall
}

// split turns the merged call's reply into one reply per group, in order; an error
// (or a reply of the wrong shape) becomes every group's error.
func (m *merged) split(ctx context.Context, cmd *redis.Cmd) []*redis.Cmd {
	out := make([]*redis.Cmd, len(m.idx))
	err := cmd.Err()
	replies, ok := cmd.Val().([]any)
	if err == nil && (!ok || len(replies) != len(m.idx)) {
		err = fmt.Errorf("scheduler: %s: unexpected reply to a call of %d shards: %v", m.sc.name, len(m.idx), cmd.Val())
	}
	for g := range out {
		out[g] = redis.NewCmd(ctx)
		if err != nil {
			out[g].SetErr(err)
		} else {
			out[g].SetVal(replies[g])
		}
	}
	return out
}

func argBytes(args []any) int {
	n := 0
	for _, a := range args {
		switch v := a.(type) {
		case string:
			n += len(v)
		case []byte:
			n += len(v)
		default:
			n += 8
		}
	}
	return n
}

// mergeCalls returns the calls to send and, for each, what it carries: the calls of a
// multi-shard script are merged per script on a standalone Redis, and wrapped one per
// call on Redis Cluster; a one-shard script's call is sent as it is (plain).
func (s *Store) mergeCalls(calls []call) ([]call, []*merged) {
	_, cluster := s.rdb.(*redis.ClusterClient)
	sent := make([]call, 0, len(calls))
	merges := make([]*merged, 0, len(calls))
	open := map[*script]int{} // script -> its merge still taking calls, index in sent
	for i, c := range calls {
		if c.sc.multi == 0 {
			sent, merges = append(sent, c), append(merges, &merged{sc: c.sc, idx: []int{i}, plain: true})
			continue
		}
		if j, ok := open[c.sc]; ok && !cluster && merges[j].fits(c) {
			merges[j].add(i, c)
			sent[j].keys, sent[j].args = merges[j].keys, merges[j].args
			continue
		}
		m := &merged{sc: c.sc, args: []any{c.sc.multi}}
		m.add(i, c)
		open[c.sc] = len(sent)
		sent, merges = append(sent, call{sc: c.sc, keys: m.keys, args: m.args}), append(merges, m)
	}
	return sent, merges
}

// splitReplies maps the replies of the sent calls back to one per original call.
func splitReplies(ctx context.Context, calls []call, merges []*merged, cmds []*redis.Cmd) []*redis.Cmd {
	out := make([]*redis.Cmd, len(calls))
	for j, m := range merges {
		if j >= len(cmds) || cmds[j] == nil {
			continue
		}
		if m.plain {
			out[m.idx[0]] = cmds[j]
			continue
		}
		for g, c := range m.split(ctx, cmds[j]) {
			out[m.idx[g]] = c
		}
	}
	return out
}
