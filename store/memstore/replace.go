package memstore

import (
	"context"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Replace (x-delay-replace): as lua/replace.lua and lua/includes/successor.lua.

// successor is the new version of an in-flight message: it becomes pending when the
// in-flight version leaves in flight (promote).
type successor struct {
	due  int64
	data []byte
}

// promote makes id's successor pending, if it has one (the caller has taken the
// in-flight version out), and reports whether it did.
func promote(sh *shard, id string) bool {
	n, ok := sh.succ[id]
	if !ok {
		return false
	}
	delete(sh.succ, id)
	sh.msg[id] = n.data
	sh.due[id] = n.due
	return true
}

// ReplaceEach stores envs, each replacing the message its id names on its route (see
// storeapi.Intake.ReplaceEach for the outcome of every state).
func (s *Store) ReplaceEach(ctx context.Context, envs []*envelope.Envelope) ([]storeapi.ReplaceResult, map[int]int64, error) {
	res := make([]storeapi.ReplaceResult, len(envs))
	minDue := make(map[int]int64)
	if len(envs) == 0 {
		return res, minDue, nil
	}
	data, err := encodeAll(envs)
	if err != nil {
		return nil, nil, err
	}
	after, err := s.begin(ctx, OpPark)
	if err != nil {
		for i := range res {
			res[i].Prior = storeapi.StateNotStored
		}
		return res, minDue, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range envs {
		n := s.ShardOf(e.ID)
		var r storeapi.ReplaceResult
		if s.ord[e.Route] {
			n = s.ShardOfEnv(e)
			r = s.replaceOrdered(n, e, data[i])
		} else {
			r = replaceOne(s.shards[n], e, data[i])
		}
		res[i] = r
		if r.Outcome == storeapi.ReplaceRefused || r.Prior == storeapi.StateInflight {
			continue
		}
		if old, ok := minDue[n]; !ok || e.DueAt < old {
			minDue[n] = e.DueAt
		}
	}
	return res, minDue, after
}

func replaceOne(sh *shard, e *envelope.Envelope, data []byte) storeapi.ReplaceResult {
	id := e.ID
	if old, ok := sh.msg[id]; ok {
		prior := stateOf(sh, id)
		if o, err := envelope.Decode(old, id); err != nil || o.Route != e.Route {
			return storeapi.ReplaceResult{Prior: prior, Outcome: storeapi.ReplaceRefused}
		}
		if prior == storeapi.StateInflight {
			sh.succ[id] = successor{due: e.DueAt, data: data}
			return storeapi.ReplaceResult{Prior: prior, Outcome: storeapi.ReplaceReplaced}
		}
		delete(sh.dead, id)
		sh.msg[id], sh.due[id] = data, e.DueAt
		return storeapi.ReplaceResult{Prior: prior, Outcome: storeapi.ReplaceReplaced}
	}
	prior := storeapi.StateUnknown
	switch doneState(sh, id, e.Route) {
	case storeapi.StateCancelled:
		return storeapi.ReplaceResult{Prior: storeapi.StateCancelled, Outcome: storeapi.ReplaceRefused}
	case storeapi.StateDelivered:
		prior = storeapi.StateDelivered
		delete(sh.done, id)
	}
	delete(sh.succ, id) // as replace.lua: no successor outlives its message
	sh.msg[id], sh.due[id] = data, e.DueAt
	return storeapi.ReplaceResult{Prior: prior, Outcome: storeapi.ReplaceParked}
}

// replaceOrdered is replaceOne on a route with `order: key`, as lua/ordered.go's
// ordered_replace and store_replace.go's refuseElsewhere: an id stored in another shard
// or under another key (or none) is refused with its state; a replaced pending message
// joins its key anew; an in-flight one keeps its place (its successor takes it).
func (s *Store) replaceOrdered(n int, e *envelope.Envelope, data []byte) storeapi.ReplaceResult {
	for i, sh := range s.shards {
		if _, ok := sh.msg[e.ID]; ok && i != n {
			return storeapi.ReplaceResult{Prior: stateOf(sh, e.ID), Outcome: storeapi.ReplaceRefused}
		}
	}
	sh, kz := s.shards[n], s.keyOf(e)
	cur, keyed := sh.order.of[e.ID]
	if _, ok := sh.msg[e.ID]; ok && cur != kz {
		if st := stateOf(sh, e.ID); st == storeapi.StatePending || st == storeapi.StateInflight {
			return storeapi.ReplaceResult{Prior: st, Outcome: storeapi.ReplaceRefused}
		}
	}
	r := replaceOne(sh, e, data)
	if r.Outcome == storeapi.ReplaceRefused || r.Prior == storeapi.StateInflight {
		return r
	}
	if keyed {
		s.ogone(n, e.ID)
	}
	if kz != "" {
		s.oadd(n, e.ID, e.DueAt, kz)
	}
	return r
}
