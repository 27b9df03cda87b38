package scheduler

import (
	"context"
	"fmt"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Published implements egress.Completer: acknowledge, then return credits. A copy
// published after its shard moved on is acknowledged all the same: it did reach the
// broker. With Options.AckInterval > 0 the acknowledgement is queued for the acker
// (acker.go) and Published returns at once; otherwise it is written before Published
// returns (at-most-once needs that: it acknowledges before publishing).
func (s *Scheduler) Published(ctx context.Context, envs []*envelope.Envelope) {
	if s.opt.AckInterval > 0 {
		s.acks.add(envs)
		return
	}
	s.ack(ctx, envs)
}

// ack writes the acknowledgement of envs, then forgets them and returns their credits.
// They stay held until the write is done: a shard this instance lost and wants back is
// acquired only once it holds none of the shard's copies (ownership.go), and acquiring
// recovers the shard's in-flight set, which would fire again a copy whose ack is still
// on its way.
func (s *Scheduler) ack(ctx context.Context, envs []*envelope.Envelope) {
	// One pipelined round trip for all shards: acking shard by shard cost a round trip
	// per shard per batch on the dispatcher worker (bench: +11 % to +46 % drain rate).
	s.retryRedis(ctx, "ack", func(ctx context.Context) error {
		// With the envelopes, not just the ids: the Redis store passes the routes along
		// (its per-route counts then need no envelope read).
		return s.store.AckEnvelopes(ctx, envs, clock.NowMs(s.clk))
	})
	for _, env := range envs {
		s.untrack(s.store.ShardOfEnv(env), env)
	}
	s.credits.release(len(envs), claimedBytes(envs))
}

// Failed implements egress.Completer (errs marked with internal/fault by egress.Classify): retry with exponential backoff, or dead-letter
// after retry.max_attempts or a permanent error. A broker that cannot be reached is
// never a reason to dead-letter: those failures retry (backoff capped at
// retry.backoff.max) however many attempts they took. A message whose outcome is unknown
// (written, not answered: the broker may still apply it) is not re-sent now; it stays in
// flight and the pump's recovery fires it again once its in-flight lease has passed.
// Only the latest claim of a message, on a shard still held under the token it was
// claimed with, is written back: a superseded copy leaves the message to its newer
// claim, and a lost shard leaves it in flight for the next owner to recover. While the
// lease is not surely valid the write waits for the next successful renewal.
func (s *Scheduler) Failed(ctx context.Context, envs []*envelope.Envelope, errs []error) {
	now := clock.NowMs(s.clk)
	byShard := map[int][]storeapi.RetryItem{}
	retried := map[string]int{}
	unknown := 0
	for i, env := range envs {
		sh := s.store.ShardOfEnv(env)
		cur, tok := s.untrack(sh, env)
		st := s.state(sh)
		if !cur || st == nil || st.token != tok {
			continue
		}
		if fault.IsUnknownOutcome(errs[i]) {
			unknown++
			retried[env.Route]++
			continue
		}
		item := s.failedItem(env, errs[i], now)
		if !item.Dead {
			retried[env.Route]++
		}
		if s.leaseValid(st) {
			byShard[sh] = append(byShard[sh], item)
		} else {
			st.addOrphans(item)
		}
	}
	s.credits.release(len(envs), claimedBytes(envs))
	for route, n := range retried {
		s.obs.PublishRetried(route, n)
	}
	if unknown > 0 {
		s.log.Info("publish outcome unknown (no answer from the broker); left in flight, fired again after the in-flight lease",
			"n", unknown, "err", errs[0])
	}
	if len(byShard) == 0 {
		return
	}
	// All shards in one pipelined round trip: a failing target fails whole batches,
	// and one round trip per shard would hold the dispatcher worker that long.
	s.retryRedis(ctx, "retry", func(ctx context.Context) error {
		return s.store.RetryMany(ctx, byShard, now)
	})
	for _, items := range byShard {
		s.reportDead(items)
	}
}

// failedItem is the outcome of one failed publish: a retry after backoff, or a dead
// letter (permanent error, or retry.max_attempts reached by a broker that answered).
func (s *Scheduler) failedItem(env *envelope.Envelope, err error, now int64) storeapi.RetryItem {
	cp := *env
	cp.Attempt++
	item := storeapi.RetryItem{Env: &cp}
	if fault.IsPermanent(err) || (int(cp.Attempt) >= s.opt.MaxAttempts && !fault.IsUnreachable(err)) {
		cp.Reason = fmt.Sprintf("publish failed after %d attempt(s): %v", cp.Attempt, err)
		item.Dead = true
		item.Due = now
	} else {
		item.Due = now + clock.AttemptBackoff(int(cp.Attempt), s.opt.BackoffInitial, s.opt.BackoffMax).Milliseconds()
	}
	return item
}

// writeOutcomes writes retries and dead letters of one shard (retrying through a Redis
// outage) and reports the dead letters.
func (s *Scheduler) writeOutcomes(ctx context.Context, shard int, items []storeapi.RetryItem, now int64) {
	s.retryRedis(ctx, "retry", func(ctx context.Context) error {
		return s.store.Retry(ctx, shard, items, now)
	})
	s.reportDead(items)
}

// reportDead counts the dead letters among written outcomes and hands them to OnDead.
func (s *Scheduler) reportDead(items []storeapi.RetryItem) {
	var dead []*envelope.Envelope
	for _, it := range items {
		if it.Dead {
			dead = append(dead, it.Env)
		}
	}
	if len(dead) == 0 {
		return
	}
	perRoute := map[string]int{}
	for _, env := range dead {
		perRoute[env.Route]++
	}
	for route, n := range perRoute {
		s.obs.DeadLettered(route, n)
	}
	if s.opt.OnDead != nil {
		s.opt.OnDead(dead)
	}
}

// Dropped implements egress.Completer for messages Owns refused. A superseded copy, or
// one of a shard lost or re-acquired since, needs nothing: the newer claim or the next
// owner fires it. The latest claim on a shard still held under its token was refused
// only because the lease was not surely valid at that moment; it goes back to `due`
// unchanged after the next successful renewal proves the lease was ours all along
// (otherwise it would stay in flight, recovered only by a future owner).
func (s *Scheduler) Dropped(envs []*envelope.Envelope) {
	for _, env := range envs {
		sh := s.store.ShardOfEnv(env)
		cur, tok := s.untrack(sh, env)
		if st := s.state(sh); cur && st != nil && st.token == tok {
			st.addOrphans(storeapi.RetryItem{Env: env, Due: env.FireTime()})
		}
	}
	s.credits.release(len(envs), claimedBytes(envs))
	s.log.Warn("dropped fired messages of a shard whose lease may have expired; the shard's owner recovers them", "n", len(envs))
}

// Unpublished implements egress.Completer: fired messages the dispatcher did not
// publish during shutdown go back to `due` unchanged (see putBack).
func (s *Scheduler) Unpublished(envs []*envelope.Envelope) {
	s.putBack(context.Background(), envs)
}

// retryRedis retries an outcome write through a Redis outage (errors the store marks
// transient) with the clock's Backoff, for up to the in-flight lease or until ctx
// ends: giving up leaves the message in flight, to be recovered and fired again (a
// duplicate), not lost.
func (s *Scheduler) retryRedis(ctx context.Context, what string, f func(context.Context) error) {
	deadline := s.clk.Now().Add(s.opt.InflightLease)
	bo := clock.NewBackoff(s.clk, clock.BackoffPolicy{Initial: 50 * time.Millisecond, Max: time.Second})
	for {
		err := f(ctx)
		if err == nil {
			return
		}
		if !retryable(err) || !s.clk.Now().Before(deadline) || bo.Wait(ctx) != nil {
			s.log.Error("recording publish outcome failed; message stays in flight and is fired again on recovery", "op", what, "err", err)
			return
		}
	}
}

// retryable reports whether a store error is worth retrying: transient for
// internal/fault (the Redis store marks loading, failover, cluster reconfiguration and
// connection errors so).
func retryable(err error) bool { return fault.IsTransient(err) }
