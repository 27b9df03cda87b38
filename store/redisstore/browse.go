package redisstore

import (
	"context"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

type position struct {
	score int64
	id    string // "" = before every member of score
}

func (p position) less(q position) bool {
	return p.score < q.score || (p.score == q.score && p.id < q.id)
}

func encodeCursor(st State, p position) string { return storeapi.EncodeCursor(st, p.score, p.id) }

func decodeCursor(st State, c string) (position, error) {
	score, id, err := storeapi.DecodeCursor(st, c)
	return position{score: score, id: id}, err
}

func (s *Store) setKey(st State, shard int) string {
	k := s.keys[shard]
	switch st {
	case StateInflight:
		return k.inflight
	case StateDead:
		return k.dead
	}
	return k.due
}

// Browse returns one page of the messages q selects, ordered by (score, id) across all
// shards. Each round reads a bounded slice of every shard after the cursor (one
// pipelined round trip of the browse script, O(log n) per shard) and merges them; only
// candidates up to the smallest last position of a shard that may hold more are
// certain to be in order, so the page stops there and the next round continues. The
// envelopes of those candidates are then read (one pipelined HMGET per round) to apply
// the route and key filters. Messages that change state while a client pages may be
// missed or seen twice, as with any cursor over live data.
func (s *Store) Browse(ctx context.Context, q BrowseQuery) (BrowsePage, error) {
	if err := q.Normalize(); err != nil {
		return BrowsePage{}, err
	}
	if q.State != StateDead {
		if err := s.flushBuckets(ctx); err != nil {
			return BrowsePage{}, err
		}
	}
	cur := position{score: q.From}
	if q.Cursor != "" {
		p, err := decodeCursor(q.State, q.Cursor)
		if err != nil {
			return BrowsePage{}, err
		}
		cur = p
	}
	per := min(q.Limit+1, max(8, 2*q.Limit/len(s.keys)+2))
	var page BrowsePage
	for page.Scanned < q.MaxScan {
		cands, horizon, more, err := s.browseRound(ctx, q, cur, per)
		if err != nil {
			return BrowsePage{}, err
		}
		last, full, err := s.filterCandidates(ctx, q, cands, &page)
		if err != nil {
			return BrowsePage{}, err
		}
		if full {
			page.Next = encodeCursor(q.State, last)
			return page, nil
		}
		if !more {
			return page, nil
		}
		cur = horizon
		per = min(per*2, q.Limit+1)
	}
	page.Next = encodeCursor(q.State, cur)
	return page, nil
}

// parseScore reads a sorted-set score as a script returned it: redis-server writes an
// integral score as an integer ("1700000000000"), miniredis in the shortest form that
// reads back exactly ("1.7e+12"); scores are unix ms, exact in a float64.
func parseScore(v string) (int64, error) {
	if n, err := strconv.ParseInt(v, 10, 64); err == nil {
		return n, nil
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil || f != math.Trunc(f) || math.Abs(f) > 1<<53 {
		return 0, fmt.Errorf("not an integral score: %q", v)
	}
	return int64(f), nil
}

type candidate struct {
	position
	shard int
	raw   string // the envelope, read with the position (the cold tier); "" = read it from msg
	cold  bool
}

// browseRound reads up to per members after cur from every shard and returns the
// merged candidates that are certainly in order (up to horizon), and whether any shard
// may hold more after horizon. Pending messages come from two sources per shard, the
// due set and the cold tier (cold.go), merged the same way.
func (s *Store) browseRound(ctx context.Context, q BrowseQuery, cur position, per int) ([]candidate, position, bool, error) {
	calls := make([]call, 0, 2*len(s.keys))
	for sh := range s.keys {
		calls = append(calls, call{sc: s.browse, keys: []string{s.setKey(q.State, sh)},
			args: []any{cur.score, cur.id, q.To, per}})
		if q.State == StatePending {
			calls = append(calls, s.coldPageCall(sh, cur, q.To, per))
		}
	}
	cmds, err := s.evalPipelined(ctx, calls, false)
	if err != nil {
		return nil, position{}, false, fmt.Errorf("scheduler: browse: %w", err)
	}
	var all []candidate
	horizon, more := position{score: math.MaxInt64, id: "\xff"}, false
	for ci, cmd := range cmds {
		sh, cold := ci, false
		if q.State == StatePending {
			sh, cold = ci/2, ci%2 == 1
		}
		vals, err := cmd.Slice()
		if err != nil {
			return nil, position{}, false, fmt.Errorf("scheduler: browse shard %d: %w", sh, err)
		}
		step := 2
		if cold {
			step = 3
		}
		var lastOfShard position
		for i := 0; i+step-1 < len(vals); i += step {
			id, _ := vals[i].(string)
			score, err := parseScore(fmt.Sprint(vals[i+1]))
			if err != nil {
				return nil, position{}, false, fmt.Errorf("scheduler: browse shard %d: score %v: %w", sh, vals[i+1], err)
			}
			lastOfShard = position{score: score, id: id}
			c := candidate{position: lastOfShard, shard: sh, cold: cold}
			if cold {
				c.raw, _ = vals[i+2].(string)
			}
			all = append(all, c)
		}
		if len(vals)/step == per && lastOfShard.less(horizon) {
			horizon, more = lastOfShard, true
		}
	}
	slices.SortFunc(all, func(a, b candidate) int {
		if a.less(b.position) {
			return -1
		}
		if b.less(a.position) {
			return 1
		}
		return 0
	})
	if more {
		n := 0
		for n < len(all) && !horizon.less(all[n].position) {
			n++
		}
		all = all[:n]
	}
	return all, horizon, more, nil
}

// filterCandidates appends the candidates that match q to page, in order, until the
// page is full or MaxScan is reached. It returns the position of the last candidate
// examined and whether the page ended there (full, or out of scan budget with
// candidates left).
func (s *Store) filterCandidates(ctx context.Context, q BrowseQuery, cands []candidate, page *BrowsePage) (position, bool, error) {
	if q.IDPrefix != "" {
		kept := cands[:0]
		for _, c := range cands {
			if strings.HasPrefix(c.id, q.IDPrefix) {
				kept = append(kept, c)
			} else {
				page.Scanned++
			}
		}
		cands = kept
	}
	envs, err := s.envelopesOf(ctx, cands)
	if err != nil {
		return position{}, false, err
	}
	for i, c := range cands {
		page.Scanned++
		if e := envs[i]; e != nil && matches(q, e) {
			if q.State == StatePending {
				e.DueAt = c.score
			}
			page.Items = append(page.Items, BrowseItem{Score: c.score, Envelope: e})
		}
		if len(page.Items) == q.Limit || (page.Scanned >= q.MaxScan && i < len(cands)-1) {
			return c.position, true, nil
		}
	}
	return position{}, false, nil
}

func matches(q BrowseQuery, e *envelope.Envelope) bool { return q.Matches(e) }

// envelopesOf reads the candidates' envelopes in one pipelined round trip (nil where
// the message has gone since, or its envelope does not decode: a browse shows what it
// can read; a corrupt envelope is counted when claimed).
func (s *Store) envelopesOf(ctx context.Context, cands []candidate) ([]*envelope.Envelope, error) {
	out := make([]*envelope.Envelope, len(cands))
	if len(cands) == 0 {
		return out, nil
	}
	byShard := map[int][]int{}
	for i, c := range cands {
		if c.cold {
			if e, err := envelope.Decode([]byte(c.raw), c.id); err == nil {
				out[i] = e
			}
			continue
		}
		byShard[c.shard] = append(byShard[c.shard], i)
	}
	if len(byShard) == 0 {
		return out, nil
	}
	shards := slices.Collect(maps.Keys(byShard))
	cmds := make(map[int]*redis.SliceCmd, len(byShard))
	key := func(i int) string { return s.keys[shards[i]].msg }
	if err := s.pipelined(ctx, "browse envelopes", len(shards), key, func(pipe redis.Pipeliner, i int) {
		idx := byShard[shards[i]]
		ids := make([]string, len(idx))
		for j, c := range idx {
			ids[j] = cands[c].id
		}
		cmds[shards[i]] = pipe.HMGet(ctx, key(i), ids...)
	}); err != nil {
		return nil, fmt.Errorf("scheduler: browse envelopes: %w", redisErr(err))
	}
	for sh, idx := range byShard {
		for j, v := range cmds[sh].Val() {
			raw, ok := v.(string)
			if !ok {
				continue
			}
			if e, err := envelope.Decode([]byte(raw), cands[idx[j]].id); err == nil {
				out[idx[j]] = e
			}
		}
	}
	return out, nil
}
