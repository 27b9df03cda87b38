package memstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// The batch operations of bulk jobs (storeapi.Batches). Each call is atomic here, so
// there is no stale re-read: what the Redis store guards with the score (or the
// envelope's hash) it read, this store checks under its lock.

// leftAlone is the Prior of a message a batch did not change: its state, except that
// pending and dead (which mean "changed") read StateUnknown.
func leftAlone(st storeapi.State) storeapi.State {
	if st == storeapi.StatePending || st == storeapi.StateDead {
		return storeapi.StateUnknown
	}
	return st
}

// CancelBatch cancels the items still matching q's route, id and key filters (see
// storeapi.Batches.CancelBatch).
func (s *Store) CancelBatch(ctx context.Context, items []storeapi.BatchItem, q storeapi.BrowseQuery, now int64) ([]storeapi.BatchResult, error) {
	after, err := s.begin(ctx, OpCancel)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res := make([]storeapi.BatchResult, len(items))
	for i, it := range items {
		sh := s.shards[s.where(it.ID)]
		st, _ := s.stateAt(it.ID)
		res[i].Prior = st
		raw, ok := sh.msg[it.ID]
		if !ok {
			continue // delivered, cancelled, unknown: nothing to do
		}
		if e, derr := envelope.Decode(raw, it.ID); derr == nil {
			if !q.Matches(e) {
				res[i].Prior = storeapi.StateUnknown
				continue
			}
			res[i].Route = e.Route
		} else if q.Route != "" || q.KeyPrefix != "" {
			res[i].Prior = storeapi.StateUnknown // unreadable: cannot tell whether it matches
			continue
		}
		s.cancelFound(sh, it.ID, res[i].Route, now)
	}
	if after != nil {
		return nil, after
	}
	return res, nil
}

// RescheduleBatch moves the pending items still due at the score they were seen at
// (see storeapi.Batches.RescheduleBatch).
func (s *Store) RescheduleBatch(ctx context.Context, items []storeapi.RescheduleItem) ([]storeapi.BatchResult, error) {
	return s.rewriteBatch(ctx, len(items), func(i int) (string, storeapi.State, int64) {
		return items[i].ID, storeapi.StatePending, items[i].Score
	}, func(i int, e *envelope.Envelope) int64 {
		if e != nil {
			e.DueAt = items[i].Due
		}
		return items[i].Due
	})
}

// RequeueDeadBatch moves the dead letters still dead at the score they were seen at
// back to pending at due, reason cleared and attempts reset (see
// storeapi.Batches.RequeueDeadBatch).
func (s *Store) RequeueDeadBatch(ctx context.Context, items []storeapi.BatchItem, due int64) ([]storeapi.BatchResult, error) {
	return s.rewriteBatch(ctx, len(items), func(i int) (string, storeapi.State, int64) {
		return items[i].ID, storeapi.StateDead, items[i].Score
	}, func(_ int, e *envelope.Envelope) int64 {
		if e != nil {
			e.Reason, e.Attempt, e.DueAt = "", 0, due
		}
		return due
	})
}

// rewriteBatch moves each of n items found in state want at the score seen to pending
// at the score change returns, with the envelope change edited (nil when it does not
// decode: a dead letter keeps its bytes, a pending message is left alone with an
// error, as the Redis store does).
func (s *Store) rewriteBatch(ctx context.Context, n int, item func(i int) (id string, want storeapi.State, seen int64),
	change func(i int, e *envelope.Envelope) int64) ([]storeapi.BatchResult, error) {
	after, err := s.begin(ctx, OpReschedule)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res := make([]storeapi.BatchResult, n)
	for i := range res {
		id, want, seen := item(i)
		st, score := s.stateAt(id)
		res[i].Prior = st
		e := s.envelopeOf(id)
		if e != nil {
			res[i].Route = e.Route
		}
		if st != want || score != seen {
			res[i].Prior = leftAlone(st)
			continue
		}
		if e == nil && st == storeapi.StatePending {
			res[i].Err = fmt.Errorf("memstore: reschedule %q: %w", id, envelope.ErrCorrupt)
			continue
		}
		if st == storeapi.StatePending && s.isOrdered(s.where(id), id) {
			res[i].Prior = storeapi.StateUnknown
			res[i].Err = fmt.Errorf("%w: %q", storeapi.ErrOrdered, id)
			continue
		}
		due := change(i, e)
		if e != nil {
			data, err := envelope.Encode(e)
			if err != nil {
				res[i].Err = fmt.Errorf("memstore: encode envelope %q: %w", id, errors.Join(storeapi.ErrInvalid, err))
				continue
			}
			s.shards[s.where(id)].msg[id] = data
		}
		sn := s.where(id)
		sh := s.shards[sn]
		delete(sh.dead, id)
		sh.due[id] = due
		if k := s.keyOf(e); k != "" && st == storeapi.StateDead {
			s.oadd(sn, id, due, k) // a requeued dead letter joins its key's queue anew
		}
	}
	if after != nil {
		return nil, after
	}
	return res, nil
}

// PurgeDeadBatch deletes the dead letters still dead at the score they were seen at
// (not remembered in done); one flag per item: deleted.
func (s *Store) PurgeDeadBatch(ctx context.Context, items []storeapi.BatchItem) ([]bool, error) {
	after, err := s.begin(ctx, OpPurgeDead)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]bool, len(items))
	for i, it := range items {
		sh := s.shards[s.where(it.ID)]
		if at, ok := sh.dead[it.ID]; ok && at == it.Score {
			delete(sh.dead, it.ID)
			delete(sh.msg, it.ID)
			out[i] = true
		}
	}
	if after != nil {
		return nil, after
	}
	return out, nil
}
