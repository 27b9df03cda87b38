package memstore

import (
	"context"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Browse and range counts.

// set is shard sh's sorted set of state st (pending, inflight or dead).
func set(sh *shard, st storeapi.State) map[string]int64 {
	switch st {
	case storeapi.StateInflight:
		return sh.inflight
	case storeapi.StateDead:
		return sh.dead
	}
	return sh.due
}

// after lists the members of state st over all shards in (score, id) order that come
// after (score, id) = from (id "" = before every member of that score) and score ≤ to.
func (s *Store) after(st storeapi.State, fromScore int64, fromID string, to int64) []scored {
	var out []scored
	for _, sh := range s.shards {
		for _, m := range sortedUpTo(set(sh, st), to, -1) {
			if m.score > fromScore || (m.score == fromScore && m.id > fromID) {
				out = append(out, m)
			}
		}
	}
	sortScored(out)
	return out
}

// Browse returns one page of the messages q selects in (score, id) order over all
// shards (see storeapi.Browser.Browse): candidates after the cursor are examined in
// order, at most q.MaxScan of them, and the page ends at q.Limit matches.
func (s *Store) Browse(ctx context.Context, q storeapi.BrowseQuery) (storeapi.BrowsePage, error) {
	if err := q.Normalize(); err != nil {
		return storeapi.BrowsePage{}, err
	}
	fromScore, fromID := q.From, ""
	if q.Cursor != "" {
		var err error
		if fromScore, fromID, err = storeapi.DecodeCursor(q.State, q.Cursor); err != nil {
			return storeapi.BrowsePage{}, err
		}
	}
	after, err := s.begin(ctx, OpBrowse)
	if err != nil {
		return storeapi.BrowsePage{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var page storeapi.BrowsePage
	cands := s.after(q.State, fromScore, fromID, q.To)
	for i, c := range cands {
		page.Scanned++
		if e := s.envelopeOf(c.id); e != nil && q.Matches(e) {
			if q.State == storeapi.StatePending {
				e.DueAt = c.score
			}
			page.Items = append(page.Items, storeapi.BrowseItem{Score: c.score, Envelope: e})
		}
		if len(page.Items) == q.Limit || (page.Scanned >= q.MaxScan && i < len(cands)-1) {
			page.Next = storeapi.EncodeCursor(q.State, c.score, c.id)
			break
		}
	}
	return page, after
}

// envelopeOf decodes id's stored envelope; nil if there is none or it does not decode
// (a browse shows what it can read).
func (s *Store) envelopeOf(id string) *envelope.Envelope {
	raw, ok := s.shards[s.where(id)].msg[id]
	if !ok {
		return nil
	}
	e, err := envelope.Decode(raw, id)
	if err != nil {
		return nil
	}
	return e
}

// CountRange counts the messages in state st with a score in [from, to] (0 =
// unbounded) over all shards.
func (s *Store) CountRange(ctx context.Context, st storeapi.State, from, to int64) (int64, error) {
	q := storeapi.BrowseQuery{State: st, From: from, To: to}
	if err := q.Normalize(); err != nil {
		return 0, err
	}
	after, err := s.begin(ctx, OpBrowse)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, sh := range s.shards {
		for _, sc := range set(sh, q.State) {
			if sc >= q.From && sc <= q.To {
				n++
			}
		}
	}
	return n, after
}

// EdgeScore returns the lowest (with highest, the highest) score in [from, to] (0 =
// unbounded) of state st over all shards; ok is false when there is none.
func (s *Store) EdgeScore(ctx context.Context, st storeapi.State, from, to int64, highest bool) (int64, bool, error) {
	q := storeapi.BrowseQuery{State: st, From: from, To: to}
	if err := q.Normalize(); err != nil {
		return 0, false, err
	}
	after, err := s.begin(ctx, OpBrowse)
	if err != nil {
		return 0, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var best int64
	ok := false
	for _, sh := range s.shards {
		for _, sc := range set(sh, q.State) {
			if sc < q.From || sc > q.To {
				continue
			}
			if !ok || (highest && sc > best) || (!highest && sc < best) {
				best, ok = sc, true
			}
		}
	}
	return best, ok, after
}
