package store

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// Browse limits.
const (
	BrowseDefaultLimit = 100
	BrowseMaxLimit     = 1000
	// browseMinScan is the least number of candidates a page examines before it gives
	// up on a filter that matches rarely (it then returns what it found and a cursor).
	browseMinScan = 2000
)

// BrowseQuery selects messages in one state, in score order: for StatePending the
// score is the due time, for StateInflight the lease deadline, for StateDead the time
// dead-lettered.
type BrowseQuery struct {
	State     State  // StatePending (default), StateInflight or StateDead
	Route     string // "" = every route
	From, To  int64  // score range, inclusive; 0 = unbounded
	IDPrefix  string // "" = any id
	KeyPrefix string // "" = any key (compared with the Kafka key's bytes)
	Limit     int    // page size: default BrowseDefaultLimit, at most BrowseMaxLimit
	Cursor    string // "" = first page; else a previous page's Next
	// MaxScan bounds the candidates one page examines (default max(20×Limit, 2000)):
	// a filter that matches rarely returns a short page and a cursor, never a scan of
	// the whole store.
	MaxScan int
}

// BrowseItem is one message of a page. Score is the set's score (see BrowseQuery); for
// a pending message Envelope.DueAt is that score (a reschedule changes only the score).
type BrowseItem struct {
	Score    int64
	Envelope *envelope.Envelope
}

// BrowsePage is one page. Next is "" when nothing after it can match; otherwise pass it
// as the next query's Cursor (with the same filters). A page may hold fewer than Limit
// items and still have a Next: the filter matched rarely and MaxScan ran out. Scanned
// is how many candidates the page examined.
type BrowsePage struct {
	Items   []BrowseItem
	Next    string
	Scanned int
}

// ErrBadCursor is returned for a cursor this store did not make for the same state.
var ErrBadCursor = errors.New("scheduler: invalid browse cursor")

type position struct {
	score int64
	id    string // "" = before every member of score
}

func (p position) less(q position) bool {
	return p.score < q.score || (p.score == q.score && p.id < q.id)
}

func encodeCursor(st State, p position) string {
	raw := string(st) + "\x00" + strconv.FormatInt(p.score, 10) + "\x00" + p.id
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

func decodeCursor(st State, c string) (position, error) {
	raw, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return position{}, fmt.Errorf("%w: %v", ErrBadCursor, err)
	}
	parts := strings.SplitN(string(raw), "\x00", 3)
	if len(parts) != 3 || State(parts[0]) != st || parts[2] == "" {
		return position{}, fmt.Errorf("%w: not a %s cursor", ErrBadCursor, st)
	}
	score, err := strconv.ParseInt(parts[1], 10, 64)
	if err != nil {
		return position{}, fmt.Errorf("%w: %v", ErrBadCursor, err)
	}
	return position{score: score, id: parts[2]}, nil
}

func (q *BrowseQuery) normalize() error {
	if q.State == "" {
		q.State = StatePending
	}
	switch q.State {
	case StatePending, StateInflight, StateDead:
	default:
		return fmt.Errorf("%w: cannot browse state %q (pending, inflight or dead)", ErrInvalid, q.State)
	}
	if q.Limit <= 0 {
		q.Limit = BrowseDefaultLimit
	}
	q.Limit = min(q.Limit, BrowseMaxLimit)
	if q.MaxScan <= 0 {
		q.MaxScan = max(20*q.Limit, browseMinScan)
	}
	if q.To == 0 {
		q.To = math.MaxInt64
	}
	if q.From > q.To {
		return fmt.Errorf("%w: range from %d is after to %d", ErrInvalid, q.From, q.To)
	}
	return nil
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
	if err := q.normalize(); err != nil {
		return BrowsePage{}, err
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

type candidate struct {
	position
	shard int
}

// browseRound reads up to per members after cur from every shard and returns the
// merged candidates that are certainly in order (up to horizon), and whether any shard
// may hold more after horizon.
func (s *Store) browseRound(ctx context.Context, q BrowseQuery, cur position, per int) ([]candidate, position, bool, error) {
	calls := make([]call, len(s.keys))
	for sh := range s.keys {
		calls[sh] = call{sc: s.browse, keys: []string{s.setKey(q.State, sh)},
			args: []any{cur.score, cur.id, q.To, per}}
	}
	cmds, err := s.evalPipelined(ctx, calls, false)
	if err != nil {
		return nil, position{}, false, fmt.Errorf("scheduler: browse: %w", err)
	}
	var all []candidate
	horizon, more := position{score: math.MaxInt64, id: "\xff"}, false
	for sh, cmd := range cmds {
		vals, err := cmd.Slice()
		if err != nil {
			return nil, position{}, false, fmt.Errorf("scheduler: browse shard %d: %w", sh, err)
		}
		var lastOfShard position
		for i := 0; i+1 < len(vals); i += 2 {
			id, _ := vals[i].(string)
			score, err := strconv.ParseInt(fmt.Sprint(vals[i+1]), 10, 64)
			if err != nil {
				return nil, position{}, false, fmt.Errorf("scheduler: browse shard %d: score %v: %w", sh, vals[i+1], err)
			}
			lastOfShard = position{score: score, id: id}
			all = append(all, candidate{position: lastOfShard, shard: sh})
		}
		if len(vals)/2 == per && lastOfShard.less(horizon) {
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

func matches(q BrowseQuery, e *envelope.Envelope) bool {
	if q.Route != "" && e.Route != q.Route {
		return false
	}
	return q.KeyPrefix == "" || bytes.HasPrefix(e.Key, []byte(q.KeyPrefix))
}

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
		byShard[c.shard] = append(byShard[c.shard], i)
	}
	pipe := s.rdb.Pipeline()
	cmds := make(map[int]*redis.SliceCmd, len(byShard))
	for sh, idx := range byShard {
		ids := make([]string, len(idx))
		for j, i := range idx {
			ids[j] = cands[i].id
		}
		cmds[sh] = pipe.HMGet(ctx, s.keys[sh].msg, ids...)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
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
