package memstore

import (
	"context"
	"fmt"
	"time"

	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// OpSeries names PutSeries and Series for the failure hook.
const OpSeries = "series"

// history is one instance's charts intervals, as the Redis store's hash of slots with
// its expiry.
type history struct {
	slots map[int][]byte
	last  int64 // the last write (unix ms)
	keep  int64 // ms after last that it is forgotten
}

// PutSeries implements storeapi.History.
func (s *Store) PutSeries(ctx context.Context, instance string, slot int, interval []byte, now int64, keep time.Duration) error {
	if err := storeapi.CheckInstance(instance); err != nil {
		return err
	}
	if keep <= 0 || slot < 0 {
		return fmt.Errorf("%w: series slot %d, keep %s", storeapi.ErrInvalid, slot, keep)
	}
	after, err := s.begin(ctx, OpSeries)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.history == nil {
		s.history = map[string]*history{}
	}
	for name, h := range s.history { // the index trim and the keys' expiry
		if h.last < now-h.keep {
			delete(s.history, name)
		}
	}
	h := s.history[instance]
	if h == nil {
		h = &history{slots: map[int][]byte{}}
		s.history[instance] = h
	}
	h.slots[slot] = append([]byte(nil), interval...)
	h.last, h.keep = now, keep.Milliseconds()
	return after
}

// Series implements storeapi.History.
func (s *Store) Series(ctx context.Context, now int64, keep time.Duration) (map[string][][]byte, error) {
	after, err := s.begin(ctx, OpSeries)
	if err == nil {
		err = after // a lost reply of a read is a failed read
	}
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][][]byte{}
	for name, h := range s.history {
		if h.last < now-keep.Milliseconds() || h.last < now-h.keep {
			continue
		}
		for _, v := range h.slots {
			out[name] = append(out[name], append([]byte(nil), v...))
		}
	}
	return out, nil
}
