package redisstore

import (
	"context"
	"fmt"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/internal/observe"
)

// pipelined sends n plain commands (reads, or writes that may run twice) in one round
// trip per primary: add(pipe, i) queues the i-th (or several, all in key(i)'s slot).
// On Redis Cluster each primary's commands go through that primary's own client, as
// the scripts' calls do (pipelinePerNode says why not through the cluster client's
// pipeline); elsewhere all go in one pipeline. Commands Redis Cluster refused because
// their slot is moving are sent again, all of them (add is called again), after the
// client rereads its slot table, within the store's retry budget (slotguard.go); what
// names the work for the retry count. It returns the first error of a command other
// than redis.Nil.
func (s *Store) pipelined(ctx context.Context, what string, n int, key func(i int) string, add func(pipe redis.Pipeliner, i int)) error {
	var r *slotRetry
	for {
		refused, err := s.pipelinedOnce(ctx, n, key, add)
		if refused == "" {
			return err
		}
		if cc, ok := s.rdb.(*redis.ClusterClient); ok && refused != observe.RetryTryAgain {
			cc.ReloadState(ctx)
		}
		if r == nil {
			r = s.newSlotRetry()
		}
		if !r.again(ctx, what, refused) {
			return err
		}
	}
}

// pipelinedOnce is one round of pipelined: the first error other than redis.Nil, and
// why Redis Cluster refused a command ("" if none was).
func (s *Store) pipelinedOnce(ctx context.Context, n int, key func(i int) string, add func(pipe redis.Pipeliner, i int)) (string, error) {
	var groups [][]int
	var pipes []redis.Pipeliner
	if cc, ok := s.rdb.(*redis.ClusterClient); ok {
		nodes, g, err := byPrimary(ctx, cc, n, key)
		if err != nil {
			return "", err
		}
		groups = g
		for _, node := range nodes {
			pipes = append(pipes, node.Pipeline())
		}
	} else {
		all := make([]int, n)
		for i := range all {
			all[i] = i
		}
		groups, pipes = [][]int{all}, []redis.Pipeliner{s.rdb.Pipeline()}
	}
	var (
		wg            sync.WaitGroup
		mu            sync.Mutex
		refused       string
		first, failed error
	)
	for g, idx := range groups { // queued here, in one goroutine: add may write to a map
		for _, i := range idx {
			add(pipes[g], i)
		}
	}
	for _, pipe := range pipes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmds, _ := pipe.Exec(ctx)
			mu.Lock()
			defer mu.Unlock()
			for _, c := range cmds {
				err := c.Err()
				if why, ok := notRun(err); ok && refused == "" {
					refused, failed = why, err
				}
				if err != nil && err != redis.Nil && first == nil {
					first = err
				}
			}
		}()
	}
	wg.Wait()
	if refused != "" {
		return refused, failed
	}
	return "", first
}

// byPrimary groups n commands by the primary that serves key(i): the primaries' own
// clients, and each one's command indexes in order.
func byPrimary(ctx context.Context, cc *redis.ClusterClient, n int, key func(i int) string) ([]*redis.Client, [][]int, error) {
	var nodes []*redis.Client
	var groups [][]int
	at := map[*redis.Client]int{}
	for i := range n {
		node, err := cc.MasterForKey(ctx, key(i))
		if err != nil {
			return nil, nil, fmt.Errorf("find primary for %s: %w", key(i), err)
		}
		g, ok := at[node]
		if !ok {
			g = len(nodes)
			at[node] = g
			nodes, groups = append(nodes, node), append(groups, nil)
		}
		groups[g] = append(groups[g], i)
	}
	return nodes, groups, nil
}
