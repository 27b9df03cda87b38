package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// By id: cancel, reschedule, get.

// Cancel removes the message id wherever it is (pending, in flight or dead) and
// remembers it in done as cancelled, so a replay of its ingress record on its route does
// not park it again. It returns the prior state: StatePending, StateInflight or
// StateDead (cancelled now), StateDelivered or StateCancelled (already gone: nothing
// changes), or StateUnknown (tombstoned if opt.Tombstone); and the route of the message
// it found (opt.Route when there was none to read). Cancelling an inflight message
// cannot stop a publish already under way.
//
// The route is checked in Go (scripts do not parse envelopes) and the script cancels
// only if the envelope is still the one that was checked (its SHA-1), else Cancel reads
// again; so a message parked, retried or requeued in between is never cancelled on the
// strength of a stale check.
func (s *Store) Cancel(ctx context.Context, id string, now int64, opt CancelOptions) (prior State, route string, err error) {
	if opt.Tombstone && opt.Route == "" {
		return StateUnknown, "", fmt.Errorf("%w: a cancel tombstone needs a route", ErrInvalid)
	}
	tomb := 0
	if opt.Tombstone {
		tomb = 1
	}
	remember, trimBefore, trimLimit := s.trimArgs(now, 1)
	for range 5 {
		sh, st, _, raw, err := s.getRaw(ctx, id)
		if err != nil {
			return StateUnknown, "", fmt.Errorf("scheduler: cancel %q: %w", id, err)
		}
		route, expected := opt.Route, ""
		if raw != nil {
			sum := sha1.Sum(raw)
			expected = hex.EncodeToString(sum[:])
			e, derr := envelope.Decode(raw, id)
			switch {
			case derr == nil:
				if opt.Route != "" && e.Route != opt.Route {
					return st, e.Route, fmt.Errorf("%w: %q is a message of route %q, not %q", ErrOtherRoute, id, e.Route, opt.Route)
				}
				route = e.Route
			case opt.Route != "":
				// An envelope that does not decode has no route to check against.
				return st, "", fmt.Errorf("%w: %q has an unreadable envelope (%v)", ErrOtherRoute, id, derr)
			}
		}
		c := s.cancelCall(sh, id, now, remember, trimBefore, trimLimit, route, expected, tomb)
		v, err := s.eval(ctx, c.sc, c.keys, c.args...).Text()
		if err != nil {
			return StateUnknown, "", fmt.Errorf("scheduler: cancel %q: %w", id, err)
		}
		if v != "stale" {
			if len(s.ord) > 0 && raw != nil {
				// A cancelled head lets its key's next message be claimed: wake the pump.
				_ = s.PublishWake(ctx, map[int]int64{sh: now})
			}
			return State(v), route, nil
		}
	}
	return StateUnknown, "", fmt.Errorf("scheduler: cancel %q: message kept changing", id)
}

// Reschedule sets a new due time for a pending message (the envelope is untouched; its
// score is what Claim reports as DueAt) or requeues a dead letter (as RequeueDead). It
// returns the prior state; only StatePending and StateDead mean the change was made.
func (s *Store) Reschedule(ctx context.Context, id string, due int64) (State, error) {
	st, _, _, err := s.Get(ctx, id)
	if err == nil && st == StateDead {
		if err := s.RequeueDead(ctx, id, due); err != nil {
			if errors.Is(err, ErrNotFound) {
				// It left the dead letters in between; report where it is now.
				st, _, _, err = s.Get(ctx, id)
				return st, err
			}
			return StateDead, err
		}
		return StateDead, nil
	}
	// A pending message gets its envelope's DueAt rewritten with the score, so the due
	// time survives recovery (which re-queues in-flight messages due "now") and shows
	// in x-delay-due-at. The old score guards against a concurrent change.
	for range 5 {
		st, score, e, err := s.Get(ctx, id)
		if err != nil {
			return st, err
		}
		if st != StatePending {
			break
		}
		if s.ord.Key(e) != "" {
			return st, fmt.Errorf("%w: %q is a message of the ordered route %q", ErrOrdered, id, e.Route)
		}
		sh := s.ShardOfEnv(e)
		e.DueAt = due
		raw, err := envelope.Encode(e)
		if err != nil {
			return st, fmt.Errorf("scheduler: reschedule %q: %w", id, err)
		}
		c := s.rescheduleCall(sh, id, due, s.keys[sh].ko, raw, score)
		v, err := s.eval(ctx, c.sc, c.keys, c.args...).Text()
		if err != nil {
			return StateUnknown, fmt.Errorf("scheduler: reschedule %q: %w", id, err)
		}
		if v == "ordered" {
			return StatePending, fmt.Errorf("%w: %q waits in its key's order", ErrOrdered, id)
		}
		if v != "stale" {
			return State(v), nil
		}
	}
	sh, err := s.locate(ctx, id)
	if err != nil {
		return StateUnknown, err
	}
	c := s.rescheduleCall(sh, id, due, s.keys[sh].ko)
	v, err := s.eval(ctx, c.sc, c.keys, c.args...).Text()
	if err != nil {
		return StateUnknown, fmt.Errorf("scheduler: reschedule %q: %w", id, err)
	}
	if v == "ordered" {
		return StatePending, fmt.Errorf("%w: %q waits in its key's order", ErrOrdered, id)
	}
	return State(v), nil
}

// RequeueDead moves the dead letter id back to due at due, with its reason cleared and
// its attempt count reset, so it gets a full set of retries. ErrNotFound if id is not a
// dead letter.
func (s *Store) RequeueDead(ctx context.Context, id string, due int64) error {
	for range 5 {
		st, deadAt, e, err := s.Get(ctx, id)
		if err != nil && !errors.Is(err, envelope.ErrCorrupt) {
			return err
		}
		if st != StateDead {
			return fmt.Errorf("%w: %q is not a dead letter (state %q)", ErrNotFound, id, st)
		}
		sh, err := s.locate(ctx, id)
		if err != nil {
			return err
		}
		kz := s.queueOf(sh, e)
		var rest []any
		if e != nil {
			e.Reason, e.Attempt, e.DueAt = "", 0, due
			data, err := envelope.Encode(e)
			if err != nil {
				return fmt.Errorf("scheduler: encode envelope %q: %w", id, errors.Join(ErrInvalid, err))
			}
			rest = []any{data, deadAt}
		}
		c := s.rescheduleCall(sh, id, due, kz, rest...)
		v, err := s.eval(ctx, c.sc, c.keys, c.args...).Text()
		if err != nil {
			return fmt.Errorf("scheduler: requeue %q: %w", id, err)
		}
		switch v {
		case "dead":
			return nil
		case "stale":
			continue // dead-lettered again since we read it: read the newer envelope
		default:
			return fmt.Errorf("%w: %q is not a dead letter (state %q)", ErrNotFound, id, v)
		}
	}
	return fmt.Errorf("scheduler: requeue %q: dead letter kept changing", id)
}

// Get looks a message up: its state, the score there (due time, lease deadline, time
// dead-lettered, delivered or cancelled) and its envelope (nil for delivered, cancelled
// and unknown). An envelope that does not decode is reported with an error wrapping
// envelope.ErrCorrupt, along with the state and score.
func (s *Store) Get(ctx context.Context, id string) (State, int64, *envelope.Envelope, error) {
	_, st, score, raw, err := s.getRaw(ctx, id)
	if err != nil || raw == nil {
		return st, score, nil, err
	}
	e, err := envelope.Decode(raw, id)
	if err != nil {
		return st, score, nil, fmt.Errorf("scheduler: get %q: %w", id, err)
	}
	return st, score, e, nil
}

// getRaw is Get without decoding: raw is nil when there is no envelope; sh is the
// shard looked in (locate). A pending message waiting behind its key's head reads at
// its due time (storeapi.RealScore).
func (s *Store) getRaw(ctx context.Context, id string) (sh int, st State, score int64, raw []byte, err error) {
	sh, err = s.locate(ctx, id)
	if err != nil {
		return sh, StateUnknown, 0, nil, fmt.Errorf("scheduler: get %q: %w", id, err)
	}
	c := s.getCall(sh, id)
	vals, err := s.eval(ctx, c.sc, c.keys, c.args...).Slice()
	if err != nil {
		return sh, StateUnknown, 0, nil, fmt.Errorf("scheduler: get %q: %w", id, err)
	}
	if len(vals) == 0 {
		return sh, StateUnknown, 0, nil, fmt.Errorf("scheduler: get %q: empty reply", id)
	}
	str, _ := vals[0].(string)
	st = State(str)
	if st == StateUnknown && len(s.ord) > 0 {
		// Delivered or cancelled on an ordered key: remembered in its key's shard.
		if sh2, v2, err := s.getAnywhere(ctx, id); err != nil {
			return sh, StateUnknown, 0, nil, err
		} else if v2 != nil {
			sh, vals = sh2, v2
			str, _ = vals[0].(string)
			st = State(str)
		}
	}
	if len(vals) > 1 {
		score, _ = vals[1].(int64)
	}
	if st == StatePending {
		score = storeapi.RealScore(score)
	}
	if len(vals) < 3 {
		return sh, st, score, nil, nil
	}
	r, _ := vals[2].(string)
	return sh, st, score, []byte(r), nil
}

// Envelopes reads the stored envelopes of ids (pending, in flight or dead; nil for any
// other) in one pipelined round trip. An envelope that does not decode is nil too. It is
// for comparing a refused duplicate with the message already stored.
func (s *Store) Envelopes(ctx context.Context, ids []string) ([]*envelope.Envelope, error) {
	out := make([]*envelope.Envelope, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	shards, err := s.locateMany(ctx, ids)
	if err != nil {
		return nil, err
	}
	gets := make([]*redis.StringCmd, len(ids))
	key := func(i int) string { return s.keys[shards[i]].msg }
	if err := s.pipelined(ctx, "read envelopes", len(ids), key, func(pipe redis.Pipeliner, i int) {
		gets[i] = pipe.HGet(ctx, key(i), ids[i])
	}); err != nil {
		return nil, fmt.Errorf("scheduler: read envelopes: %w", redisErr(err))
	}
	for i, g := range gets {
		raw, err := g.Bytes()
		if err != nil {
			// Not in msg: a pending message in the cold tier is read by id (Get).
			if errors.Is(err, redis.Nil) {
				if st, _, e, gerr := s.Get(ctx, ids[i]); gerr == nil && st == StatePending && e != nil {
					out[i] = e
				}
			}
			continue
		}
		if e, err := envelope.Decode(raw, ids[i]); err == nil {
			out[i] = e
		}
	}
	return out, nil
}
