package memstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// By id (cancel, get, reschedule, requeue), dead letters and statistics.

// Cancel removes id wherever it is and remembers it as cancelled for its route, with
// the Redis store's prior states, route scoping and tombstones (see
// storeapi.ByID.Cancel). It is atomic here, so there is no stale re-read.
func (s *Store) Cancel(ctx context.Context, id string, now int64, opt storeapi.CancelOptions) (prior storeapi.State, route string, err error) {
	prior, route, err = s.cancel(ctx, id, now, opt)
	s.mu.Lock()
	woke := s.takeWake() // a cancelled head lets its key's next message be claimed
	s.mu.Unlock()
	s.wakeUp(ctx, woke)
	return prior, route, err
}

func (s *Store) cancel(ctx context.Context, id string, now int64, opt storeapi.CancelOptions) (prior storeapi.State, route string, err error) {
	if opt.Tombstone && opt.Route == "" {
		return storeapi.StateUnknown, "", fmt.Errorf("%w: a cancel tombstone needs a route", storeapi.ErrInvalid)
	}
	after, err := s.begin(ctx, OpCancel)
	if err != nil {
		return storeapi.StateUnknown, "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sh := s.shards[s.where(id)]
	remember, trimBefore, trimLimit := s.trimArgs(now, 1)
	route = opt.Route
	st := stateOf(sh, id)
	if st != storeapi.StateUnknown {
		if raw, ok := sh.msg[id]; ok {
			e, derr := envelope.Decode(raw, id)
			switch {
			case derr == nil:
				if opt.Route != "" && e.Route != opt.Route {
					return st, e.Route, fmt.Errorf("%w: %q is a message of route %q, not %q", storeapi.ErrOtherRoute, id, e.Route, opt.Route)
				}
				route = e.Route
			case opt.Route != "":
				return st, "", fmt.Errorf("%w: %q has an unreadable envelope (%v)", storeapi.ErrOtherRoute, id, derr)
			}
		}
		s.cancelFound(sh, id, route, now)
		return st, route, after
	}
	if _, done := sh.done[id]; done {
		routes, ok := sh.cancelled[id]
		if !ok {
			return storeapi.StateDelivered, route, after
		}
		if !opt.Tombstone || slices.Contains(routes, route) {
			return storeapi.StateCancelled, route, after
		}
		// Another route's tombstone: this route's goes beside it.
		if remember {
			sh.done[id] = doneSecond(now)
			sh.cancelled[id] = append(slices.Clone(routes), route)
		}
		trim(sh, trimBefore, trimLimit)
		return storeapi.StateUnknown, route, after
	}
	if opt.Tombstone && remember {
		sh.done[id] = doneSecond(now)
		sh.cancelled[id] = []string{route}
		trim(sh, trimBefore, trimLimit)
	}
	return storeapi.StateUnknown, route, after
}

// cancelFound removes id (pending, in flight or dead) from its shard and remembers it
// as cancelled for route, trimming the done window as one cancel call does.
func (s *Store) cancelFound(sh *shard, id, route string, now int64) {
	remember, trimBefore, trimLimit := s.trimArgs(now, 1)
	s.ogone(s.where(id), id) // a cancelled head lets its key's next message be claimed
	delete(sh.due, id)
	delete(sh.inflight, id)
	delete(sh.dead, id)
	delete(sh.msg, id)
	delete(sh.succ, id)
	if remember {
		routes := []string{route}
		if _, done := sh.done[id]; done {
			if old, ok := sh.cancelled[id]; ok && !slices.Contains(old, route) {
				routes = append(slices.Clone(old), route)
			}
		}
		sh.done[id] = doneSecond(now)
		sh.cancelled[id] = routes
	}
	trim(sh, trimBefore, trimLimit)
}

// Get looks id up: its state, the score there and its envelope (nil for delivered,
// cancelled and unknown); an envelope that does not decode is reported with an error
// wrapping envelope.ErrCorrupt.
func (s *Store) Get(ctx context.Context, id string) (storeapi.State, int64, *envelope.Envelope, error) {
	after, err := s.begin(ctx, OpGet)
	if err != nil {
		return storeapi.StateUnknown, 0, nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if after != nil {
		return storeapi.StateUnknown, 0, nil, after
	}
	if n, ok := s.shards[s.where(id)].succ[id]; ok {
		// An in-flight id with a successor reads as the successor (replace.go).
		e, err := envelope.Decode(n.data, id)
		if err != nil {
			return storeapi.StatePending, n.due, nil, fmt.Errorf("memstore: get %q: %w", id, err)
		}
		return storeapi.StatePending, n.due, e, nil
	}
	return s.get(id)
}

func (s *Store) get(id string) (storeapi.State, int64, *envelope.Envelope, error) {
	st, score := s.stateAt(id)
	if st != storeapi.StatePending && st != storeapi.StateInflight && st != storeapi.StateDead {
		return st, score, nil, nil
	}
	sh := s.shards[s.where(id)]
	raw, ok := sh.msg[id]
	if !ok {
		return st, score, nil, nil
	}
	e, err := envelope.Decode(raw, id)
	if err != nil {
		return st, score, nil, fmt.Errorf("memstore: get %q: %w", id, err)
	}
	return st, score, e, nil
}

// stateAt is id's state and score there, as Get reports them.
func (s *Store) stateAt(id string) (storeapi.State, int64) {
	sh := s.shards[s.where(id)]
	switch st := stateOf(sh, id); st {
	case storeapi.StatePending:
		return st, storeapi.RealScore(sh.due[id])
	case storeapi.StateInflight, storeapi.StateDead:
		return st, set(sh, st)[id]
	}
	at, done := sh.done[id]
	if !done {
		return storeapi.StateUnknown, 0
	}
	if _, ok := sh.cancelled[id]; ok {
		return storeapi.StateCancelled, at
	}
	return storeapi.StateDelivered, at
}

// Reschedule gives a pending message a new due time (its envelope's DueAt with it) or
// requeues a dead letter (as RequeueDead); it returns the prior state, and only
// StatePending and StateDead mean the change was made.
func (s *Store) Reschedule(ctx context.Context, id string, due int64) (storeapi.State, error) {
	after, err := s.begin(ctx, OpReschedule)
	if err != nil {
		return storeapi.StateUnknown, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, _, e, err := s.get(id)
	switch {
	case err != nil && st == storeapi.StatePending:
		return st, err
	case st == storeapi.StatePending && s.isOrdered(s.where(id), id):
		return st, fmt.Errorf("%w: %q waits in its key's order", storeapi.ErrOrdered, id)
	case st == storeapi.StatePending:
		if e != nil {
			e.DueAt = due
			if err := s.putEnvelope(e); err != nil {
				return st, err
			}
		}
		s.shards[s.where(id)].due[id] = due
	case st == storeapi.StateDead:
		if err := s.requeue(id, e, due); err != nil {
			return st, err
		}
	}
	return st, after
}

// RequeueDead moves the dead letter id back to pending at due with its reason cleared
// and attempts reset; ErrNotFound if it is not a dead letter.
func (s *Store) RequeueDead(ctx context.Context, id string, due int64) error {
	after, err := s.begin(ctx, OpReschedule)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st, _, e, err := s.get(id)
	if err != nil && !errors.Is(err, envelope.ErrCorrupt) {
		return err
	}
	if st != storeapi.StateDead {
		return fmt.Errorf("%w: %q is not a dead letter (state %q)", storeapi.ErrNotFound, id, st)
	}
	if err := s.requeue(id, e, due); err != nil {
		return err
	}
	return after
}

// requeue moves a dead letter to due; e nil (undecodable) keeps the stored bytes.
func (s *Store) requeue(id string, e *envelope.Envelope, due int64) error {
	if e != nil {
		e.Reason, e.Attempt, e.DueAt = "", 0, due
		if err := s.putEnvelope(e); err != nil {
			return err
		}
	}
	n := s.where(id)
	sh := s.shards[n]
	delete(sh.dead, id)
	sh.due[id] = due
	if k := s.keyOf(e); k != "" {
		s.oadd(n, id, due, k) // a requeued dead letter joins its key's queue anew
	}
	return nil
}

func (s *Store) putEnvelope(e *envelope.Envelope) error {
	data, err := envelope.Encode(e)
	if err != nil {
		return fmt.Errorf("memstore: encode envelope %q: %w", e.ID, errors.Join(storeapi.ErrInvalid, err))
	}
	s.shards[s.where(e.ID)].msg[e.ID] = data
	return nil
}

// Envelopes reads the stored envelopes of ids (nil where none or undecodable).
func (s *Store) Envelopes(ctx context.Context, ids []string) ([]*envelope.Envelope, error) {
	out := make([]*envelope.Envelope, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	if _, err := s.begin(ctx, OpStats); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, id := range ids {
		if raw, ok := s.shards[s.where(id)].msg[id]; ok {
			if e, err := envelope.Decode(raw, id); err == nil {
				out[i] = e
			}
		}
	}
	return out, nil
}

// ListDead returns up to limit dead letters over all shards, oldest first (ties: shard,
// then id, as the Redis store merges them).
func (s *Store) ListDead(ctx context.Context, limit int) ([]*envelope.Envelope, error) {
	if limit <= 0 {
		return nil, nil
	}
	if _, err := s.begin(ctx, OpStats); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	type ref struct {
		sh *shard
		scored
	}
	var refs []ref
	for _, sh := range s.shards {
		for _, m := range sortedUpTo(sh.dead, maxScore, limit) {
			refs = append(refs, ref{sh, m})
		}
	}
	sort.SliceStable(refs, func(i, j int) bool { return refs[i].score < refs[j].score })
	refs = refs[:min(limit, len(refs))]
	if len(refs) == 0 {
		return nil, nil
	}
	out := make([]*envelope.Envelope, 0, len(refs))
	for _, r := range refs {
		e, err := envelope.Decode(r.sh.msg[r.id], r.id)
		if err != nil {
			e = &envelope.Envelope{ID: r.id, Reason: "corrupt envelope in memstore: " + err.Error()}
		}
		out = append(out, e)
	}
	return out, nil
}

// PurgeDead deletes every dead letter and returns how many (not remembered in done).
func (s *Store) PurgeDead(ctx context.Context) (int64, error) {
	after, err := s.begin(ctx, OpPurgeDead)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var n int64
	for _, sh := range s.shards {
		for id := range sh.dead {
			delete(sh.dead, id)
			delete(sh.msg, id)
			n++
		}
	}
	return n, after
}

// ShardStats reads every shard's counts, earliest due time and lease holder.
func (s *Store) ShardStats(ctx context.Context) ([]storeapi.ShardStat, error) {
	if _, err := s.begin(ctx, OpStats); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]storeapi.ShardStat, len(s.shards))
	for i, sh := range s.shards {
		st := storeapi.ShardStat{Shard: i, Pending: int64(len(sh.due)), Inflight: int64(len(sh.inflight)),
			Dead: int64(len(sh.dead)), NextDue: -1}
		if head := sortedUpTo(sh.due, maxScore, 1); len(head) > 0 {
			st.NextDue = head[0].score
		}
		if o := s.ownerNow(sh); o != "" {
			st.Owner, st.Token = parseOwner(o)
		}
		out[i] = st
	}
	return out, nil
}

// parseOwner splits "holder|token" and cuts the incarnation tag off the holder, as the
// Redis store's statistics do.
func parseOwner(v string) (string, int64) {
	holder, tok := splitOwner(v)
	return storeapi.InstanceOf(holder), tok
}

// RouteCounts counts every shard's messages per route and state. The Redis store keeps
// them incrementally in the scripts; this store, being a test kit in memory, counts
// its maps (the same answer), and is always exact.
func (s *Store) RouteCounts(ctx context.Context) (storeapi.Counts, error) {
	if _, err := s.begin(ctx, OpStats); err != nil {
		return storeapi.Counts{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := storeapi.Counts{Shards: make([]storeapi.ShardCounts, len(s.shards))}
	for i, sh := range s.shards {
		sc := storeapi.ShardCounts{Shard: i, Routes: map[string]storeapi.RouteCount{}}
		for _, set := range []struct {
			ids map[string]int64
			add func(*storeapi.RouteCount)
		}{
			{sh.due, func(c *storeapi.RouteCount) { c.Pending++ }},
			{sh.inflight, func(c *storeapi.RouteCount) { c.Inflight++ }},
			{sh.dead, func(c *storeapi.RouteCount) { c.Dead++ }},
		} {
			for id := range set.ids {
				route := ""
				if e, err := envelope.Decode(sh.msg[id], id); err == nil {
					route = e.Route
				}
				c := sc.Routes[route]
				set.add(&c)
				sc.Routes[route] = c
			}
		}
		out.Shards[i] = sc
	}
	return out, nil
}
