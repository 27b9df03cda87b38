package redisstore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/observe"
)

// Redis Cluster resharding (docs/ARCHITECTURE.md "Resharding Redis Cluster").
//
// While a slot migrates, Redis checks the keys a script declares before running it: on
// the source, when some are already gone, it answers TRYAGAIN (or ASK when all are);
// on the target, under ASKING, when some are not there yet, TRYAGAIN. The scripts of
// the id index (index.lua) also read and write keys they build themselves (index
// sub-hashes, done slices): those are checked one command at a time inside the script,
// so a script whose declared keys all sit on one node would meet a sub-hash still on
// the other half-way through: on the source the command fails ("non local key") after
// the script's earlier writes were made, on the target it reads nothing where the id is
// remembered, or creates a key that the source still holds (MIGRATE then fails with
// BUSYKEY). The slot guard closes that: every such script also declares the shard's
// key P:{C:n}:slotguard, which nothing ever writes, so while the shard's slot is
// migrating some declared key is always missing and Redis refuses the call before it
// runs, on both nodes, until the slot is wholly on its new owner.
//
// A refused call did nothing, so the store sends it again: TRYAGAIN, and MOVED or ASK
// that the client did not follow to the end, are retried with backoff for up to
// slotRetryBudget, each counted (observe.Observer.RedisRetried).
const (
	slotRetryMin    = 10 * time.Millisecond
	slotRetryMax    = 250 * time.Millisecond
	slotRetryBudget = 5 * time.Second
)

// withGuard appends shard k's slot guard to the keys of a script that includes
// index.lua: the one place the guard is added, after the script's own keys (the
// scripts never read it).
func withGuard(k shardKeys, keys []string) []string {
	return append(keys, k.guard)
}

// guarded is withGuard for the shard of id.
func (s *Store) guarded(id string, keys []string) []string {
	return withGuard(s.keys[s.ShardOf(id)], keys)
}

// notRun says whether err is a reply by which Redis Cluster refused a command before
// running it because its slot is moving, and names the reason for the count.
func notRun(err error) (string, bool) {
	switch {
	case err == nil:
		return "", false
	case redis.IsTryAgainError(err):
		return observe.RetryTryAgain, true
	}
	if _, ok := redis.IsMovedError(err); ok {
		return observe.RetryMoved, true
	}
	if _, ok := redis.IsAskError(err); ok {
		return observe.RetryAsk, true
	}
	return "", false
}

// slotRetry paces the retries of one store call.
type slotRetry struct {
	s        *Store
	deadline time.Time
	wait     time.Duration
}

func (s *Store) newSlotRetry() *slotRetry {
	return &slotRetry{s: s, deadline: time.Now().Add(slotRetryBudget), wait: slotRetryMin}
}

// again counts a refused call of script and waits before it is sent again; false when
// the budget is spent or ctx is done (the caller returns the refusal).
func (r *slotRetry) again(ctx context.Context, script, reason string) bool {
	if time.Now().Add(r.wait).After(r.deadline) {
		return false
	}
	r.s.obs.RedisRetried(script, reason)
	t := time.NewTimer(r.wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	}
	r.wait = min(2*r.wait, slotRetryMax)
	return true
}

// retryRefused sends again, in rounds, the calls of a pipeline that Redis refused
// because their slot is moving (notRun), until none is or the budget is spent; err is
// the first round's error. It returns the merged results and the error of the calls
// as they stand (the first failure), or of the last round's WAIT.
func (s *Store) retryRefused(ctx context.Context, calls []call, cmds []*redis.Cmd, err error, wait bool) ([]*redis.Cmd, error) {
	var r *slotRetry
	for err != nil {
		var redo []int
		reason := ""
		for i, cmd := range cmds {
			if why, ok := notRun(cmdErr(cmd)); ok {
				redo, reason = append(redo, i), why
			}
		}
		if len(redo) == 0 {
			return cmds, err
		}
		if r == nil {
			r = s.newSlotRetry()
		}
		if cc, ok := s.rdb.(*redis.ClusterClient); ok && reason != observe.RetryTryAgain {
			// The calls went by a slot table that is out of date: the client reads the
			// current one (in the background) before they are sent again
			// (pipelinePerNode).
			cc.ReloadState(ctx)
		}
		if !r.again(ctx, calls[redo[0]].sc.name, reason) {
			return cmds, err
		}
		sub := make([]call, len(redo))
		for j, i := range redo {
			sub[j] = calls[i]
		}
		subCmds, subErr := s.evalPipelinedOnce(ctx, sub, wait)
		for j, i := range redo {
			if j < len(subCmds) && subCmds[j] != nil {
				cmds[i] = subCmds[j]
			}
		}
		err = subErr
		for i, cmd := range cmds {
			if e := cmdErr(cmd); e != nil {
				err = redisErr(fmt.Errorf("scheduler: %s: %w", calls[i].sc.name, e))
				break
			}
		}
	}
	return cmds, err
}

func cmdErr(cmd *redis.Cmd) error {
	if cmd == nil {
		return nil
	}
	if err := cmd.Err(); err != nil && !errors.Is(err, redis.Nil) {
		return err
	}
	return nil
}
