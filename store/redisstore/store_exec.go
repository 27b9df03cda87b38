package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Script execution: FCALL (library.go), or EVALSHA with the EVAL fallback; pipelines,
// WAIT.

// eval runs one script call: FCALL, loading the library again when the server lost it
// (a new master, FUNCTION FLUSH, a restart without persistence), or EVALSHA, falling
// back to EVAL when Redis lost its script cache (restart, failover to a replica that
// never saw SCRIPT LOAD, FLUSH). The command's error, if any, is classified (redisErr).
//
// A call Redis Cluster refused because its slot is moving (TRYAGAIN, or a redirection
// the client did not follow to the end) did nothing and is sent again (slotguard.go).
func (s *Store) eval(ctx context.Context, sc *script, keys []string, args ...any) *redis.Cmd {
	var r *slotRetry
	for {
		start := time.Now()
		cmd := s.run(ctx, s.rdb, sc, keys, args...)
		s.obs.ScriptDuration(sc.name, time.Since(start))
		err := cmd.Err()
		if why, ok := notRun(err); ok {
			if r == nil {
				r = s.newSlotRetry()
			}
			if r.again(ctx, sc.name, why) {
				continue
			}
		}
		if err != nil {
			cmd.SetErr(redisErr(err))
		}
		return cmd
	}
}

type call struct {
	sc   *script
	keys []string
	args []any
}

func isNoScript(err error) bool {
	return err != nil && (errors.Is(err, redis.ErrNoScript) || redis.HasErrorPrefix(err, "NOSCRIPT"))
}

// evalPipelined runs calls in one round trip (per node on Cluster, where go-redis
// routes each call by its slot) and returns one result per call. A call that met
// NOSCRIPT or "function not found" did nothing, so it is re-sent in a second round trip,
// with EVAL or after loading the library again. With wait,
// the pipeline ends with WAIT so the writes are on MinReplicas replicas when it returns.
// The returned error is the first failure, classified (redisErr); results of calls
// that succeeded are valid. Calls Redis Cluster refused because their slot is moving
// are sent again (retryRefused).
func (s *Store) evalPipelined(ctx context.Context, calls []call, wait bool) ([]*redis.Cmd, error) {
	if len(calls) == 0 {
		return nil, nil
	}
	cmds, err := s.evalPipelinedOnce(ctx, calls, wait)
	return s.retryRefused(ctx, calls, cmds, err, wait)
}

func (s *Store) evalPipelinedOnce(ctx context.Context, calls []call, wait bool) ([]*redis.Cmd, error) {
	start := time.Now()
	var cmds []*redis.Cmd
	var err error
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		cmds, err = s.pipelinePerNode(ctx, cc, calls, wait)
	} else {
		cmds, err = s.pipelineOnce(ctx, s.rdb, calls, wait)
	}
	// Each call of the round trip is one observation, with the round trip's time: the
	// histogram counts script calls (what Redis pays per call), not round trips.
	took := time.Since(start)
	for _, c := range calls {
		s.obs.ScriptDuration(c.sc.name, took)
	}
	return cmds, redisErr(err)
}

func (s *Store) pipelineOnce(ctx context.Context, c redis.Cmdable, calls []call, wait bool) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	gen := s.fns.gen.Load()
	waited, err := s.execPipe(ctx, c, calls, cmds, wait, false)
	if err != nil {
		return cmds, err
	}
	var redo []int
	reload := false
	for i, cmd := range cmds {
		if isNoScript(cmd.Err()) || isNoFunction(cmd.Err()) {
			redo = append(redo, i)
			reload = reload || isNoFunction(cmd.Err())
		}
	}
	if reload {
		if err := s.loadLibrary(ctx, gen); err != nil {
			return cmds, err
		}
	}
	if len(redo) > 0 {
		sub := make([]call, len(redo))
		subCmds := make([]*redis.Cmd, len(redo))
		for j, i := range redo {
			sub[j] = calls[i]
		}
		// The first WAIT covered only the calls that ran; the re-sent ones need theirs.
		w, err := s.execPipe(ctx, c, sub, subCmds, wait, true)
		for j, i := range redo {
			cmds[i] = subCmds[j]
		}
		if err != nil {
			return cmds, err
		}
		if wait {
			waited = w
		}
	}
	for i, cmd := range cmds {
		if err := cmd.Err(); err != nil {
			return cmds, fmt.Errorf("scheduler: %s: %w", calls[i].sc.name, err)
		}
	}
	if wait && waited < int64(s.opt.MinReplicas) {
		return cmds, fmt.Errorf("%w: %d of %d replicas acknowledged within %s",
			ErrNotReplicated, waited, s.opt.MinReplicas, s.opt.WaitTimeout)
	}
	return cmds, nil
}

// execPipe sends calls (FCALL; else EVALSHA, or EVAL with viaEval) plus an optional WAIT in one
// pipeline. It returns the WAIT result and an error only when the pipeline as a whole
// failed (connection lost); per-call errors stay in cmds.
func (s *Store) execPipe(ctx context.Context, c redis.Cmdable, calls []call, cmds []*redis.Cmd, wait, viaEval bool) (int64, error) {
	pipe := c.Pipeline()
	for i, cl := range calls {
		cmds[i] = s.queue(ctx, pipe, cl.sc, viaEval, cl.keys, cl.args...)
	}
	var waitCmd *redis.Cmd
	if wait {
		// Pipeliner has no Wait method; WAIT must still ride this pipeline's connection.
		waitCmd = pipe.Do(ctx, "wait", s.opt.MinReplicas, s.opt.WaitTimeout.Milliseconds())
	}
	_, err := pipe.Exec(ctx)
	if err != nil {
		var rerr redis.Error
		if !errors.As(err, &rerr) {
			return 0, fmt.Errorf("scheduler: %s: %w", calls[0].sc.name, err)
		}
	}
	if waitCmd != nil {
		n, err := waitCmd.Int64()
		if err != nil {
			return 0, fmt.Errorf("scheduler: WAIT: %w", err)
		}
		return n, nil
	}
	return 0, nil
}

// pipelinePerNode is evalPipelined for Redis Cluster: each primary gets its own
// pipeline of its shards' calls (followed by WAIT with wait: WAIT counts the replicas
// of the writes made on its own connection), all primaries concurrently, through the
// primary's own client. A slot moving meanwhile surfaces as MOVED, ASK or TRYAGAIN,
// which retryRefused sends again (a refused call did nothing).
//
// The cluster client's own pipeline is not used: when one node's reply holds a MOVED
// and then its connection fails (a primary removed under load), go-redis v9.23.0
// queues the moved call for both its new node and, remapped by a stale slot table,
// its old one, and runs the two at once in its next attempt: the same call twice
// concurrently, a data race on its reply (seen under -race in
// TestRedisClusterPrimaryRemovedUnderLoad).
func (s *Store) pipelinePerNode(ctx context.Context, cc *redis.ClusterClient, calls []call, wait bool) ([]*redis.Cmd, error) {
	nodes, groups, err := byPrimary(ctx, cc, len(calls), func(i int) string { return calls[i].keys[0] })
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", err)
	}
	if len(nodes) == 1 { // one primary (every call of a shard's, most of a fetch's)
		return s.pipelineOnce(ctx, nodes[0], calls, wait)
	}
	cmds := make([]*redis.Cmd, len(calls))
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
	)
	for g, idx := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sub := make([]call, len(idx))
			for j, i := range idx {
				sub[j] = calls[i]
			}
			subCmds, err := s.pipelineOnce(ctx, nodes[g], sub, wait)
			mu.Lock()
			defer mu.Unlock()
			for j, i := range idx {
				if j < len(subCmds) {
					cmds[i] = subCmds[j]
				}
			}
			if err != nil && firstErr == nil {
				firstErr = err
			}
		}()
	}
	wg.Wait()
	for i := range cmds {
		if cmds[i] == nil { // that group failed before building its commands
			cmds[i] = redis.NewCmd(ctx)
			cmds[i].SetErr(firstErr)
		}
	}
	return cmds, firstErr
}
