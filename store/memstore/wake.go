package memstore

import (
	"context"
	"maps"
)

// The wake channel: PublishWake and PublishCancel reach every Listen running at the
// time, in publish order. Unlike Redis pub/sub nothing is lost while a listener runs;
// a publish before Listen subscribed is lost, as with Redis (Subscribers tells a test
// when Listen is in place).

type note struct {
	wake   map[int]int64
	cancel string
}

type subscriber struct {
	queue  []note
	signal chan struct{} // 1-buffered: queue has something
}

// Subscribers is the number of Listen calls currently subscribed.
func (s *Store) Subscribers() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.subs)
}

func (s *Store) publish(ctx context.Context, n note) error {
	after, err := s.begin(ctx, OpPublish)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for sub := range s.subs {
		if n.wake != nil {
			n.wake = maps.Clone(n.wake)
		}
		sub.queue = append(sub.queue, n)
		select {
		case sub.signal <- struct{}{}:
		default:
		}
	}
	return after
}

// PublishWake announces per-shard earliest due times to every Listen (none for an
// empty map, as the Redis store).
func (s *Store) PublishWake(ctx context.Context, minDue map[int]int64) error {
	if len(minDue) == 0 {
		return nil
	}
	return s.publish(ctx, note{wake: maps.Clone(minDue)})
}

// PublishCancel tells every Listen to drop id.
func (s *Store) PublishCancel(ctx context.Context, id string) error {
	return s.publish(ctx, note{cancel: id})
}

// Listen delivers every wake-up and cancel published while it runs, on its own
// goroutine, one at a time, until ctx ends; it returns ctx.Err().
func (s *Store) Listen(ctx context.Context, onWake func(minDue map[int]int64), onCancel func(id string)) error {
	sub := &subscriber{signal: make(chan struct{}, 1)}
	s.mu.Lock()
	s.subs[sub] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.subs, sub)
		s.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-sub.signal:
		}
		s.mu.Lock()
		q := sub.queue
		sub.queue = nil
		s.mu.Unlock()
		for _, n := range q {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if n.wake != nil {
				onWake(n.wake)
			} else {
				onCancel(n.cancel)
			}
		}
	}
}
