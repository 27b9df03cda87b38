package redisstore

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
)

// The wake channel: one pub/sub channel per bridge cluster (`P:{C}:wake`) carrying two
// kinds of payload, "shard:due,shard:due" (a parker announces messages due sooner than
// a pump may be sleeping for) and "cancel|<id>" (drop a message from whichever wheel
// holds it). Both are optimisations: pumps also scan periodically, and a cancelled
// message that still fires is refused by the completer's id check, so a lost
// notification costs lateness, never a message.

// cancelPrefix marks a cancel broadcast on the wake channel (wake-ups are "shard:due").
const cancelPrefix = "cancel|"

// listenRetry is the wait before Listen subscribes again after losing its connection.
const listenRetry = time.Second

// WakeChannel is the pub/sub channel on which a parker announces messages due earlier
// than a pump may be sleeping for (payload: FormatWake).
func (s *Store) WakeChannel() string { return s.wakeCh }

// PublishWake announces newly parked minimum due times per shard on WakeChannel. It is
// an optimisation only: pumps also scan periodically, so a lost message is harmless.
func (s *Store) PublishWake(ctx context.Context, minDue map[int]int64) error {
	if len(minDue) == 0 {
		return nil
	}
	if err := s.rdb.Publish(ctx, s.wakeCh, FormatWake(minDue)).Err(); err != nil {
		return fmt.Errorf("scheduler: publish wake-up: %w", redisErr(err))
	}
	return nil
}

// FormatWake encodes per-shard due times as "shard:due,shard:due" (shards ascending).
func FormatWake(minDue map[int]int64) string {
	shards := make([]int, 0, len(minDue))
	for sh := range minDue {
		shards = append(shards, sh)
	}
	sort.Ints(shards)
	var b strings.Builder
	for i, sh := range shards {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(sh))
		b.WriteByte(':')
		b.WriteString(strconv.FormatInt(minDue[sh], 10))
	}
	return b.String()
}

// ParseWake decodes a FormatWake payload.
func ParseWake(payload string) (map[int]int64, error) {
	out := make(map[int]int64)
	if payload == "" {
		return out, nil
	}
	for _, part := range strings.Split(payload, ",") {
		sh, due, ok := strings.Cut(part, ":")
		if !ok {
			return nil, fmt.Errorf("%w: wake-up payload %q", ErrInvalid, payload)
		}
		n, err1 := strconv.Atoi(sh)
		d, err2 := strconv.ParseInt(due, 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%w: wake-up payload %q", ErrInvalid, payload)
		}
		if old, seen := out[n]; !seen || d < old {
			out[n] = d
		}
	}
	return out, nil
}

// PublishCancel tells every instance listening (this one included) to drop id from its
// wheel: a message cancelled while in flight is held in memory by whichever instance
// claimed it.
func (s *Store) PublishCancel(ctx context.Context, id string) error {
	if err := s.rdb.Publish(ctx, s.wakeCh, cancelPrefix+id).Err(); err != nil {
		return fmt.Errorf("scheduler: publish cancel: %w", redisErr(err))
	}
	return nil
}

// Listen delivers every wake-up (onWake) and cancel broadcast (onCancel) published by
// any instance until ctx ends, subscribing again (after a second on the store's clock)
// whenever the subscription is lost; it returns ctx.Err(). The callbacks run on
// Listen's goroutine, one at a time, and must not block. A malformed payload is
// ignored.
func (s *Store) Listen(ctx context.Context, onWake func(minDue map[int]int64), onCancel func(id string)) error {
	for ctx.Err() == nil {
		ps := s.rdb.Subscribe(ctx, s.wakeCh)
		ch := ps.Channel()
	loop:
		for {
			select {
			case <-ctx.Done():
				break loop
			case m, ok := <-ch:
				if !ok {
					break loop
				}
				if id, ok := strings.CutPrefix(m.Payload, cancelPrefix); ok {
					onCancel(id)
				} else if minDue, err := ParseWake(m.Payload); err == nil {
					onWake(minDue)
				}
			}
		}
		_ = ps.Close()
		_ = clock.Sleep(ctx, s.opt.Clock, listenRetry)
	}
	return ctx.Err()
}
