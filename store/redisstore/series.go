package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// The console's cluster view of the recent history (app/series): every instance
// writes each closed interval into its own hash, one field per ring slot, so the keys
// stay bounded however long the cluster runs:
//
//	P:{C}:series:<instance>  HASH  slot -> one interval of every route (app/series
//	                               wire form); at most keep fields, expires keep after
//	                               the instance's last write
//	P:{C}:series             ZSET  instance -> its last write (unix ms), trimmed to keep
//
// Reading the cluster view is one ZRANGEBYSCORE and one HVALS per instance that wrote
// within keep. Nothing here is on a message's path.

func (s *Store) seriesIndexKey() string {
	return fmt.Sprintf("%s:{%s}:series", s.opt.Prefix, s.opt.Cluster)
}

func (s *Store) seriesKey(instance string) string { return s.seriesIndexKey() + ":" + instance }

// PutSeries implements storeapi.History: the instance's hash expires keep after its
// last write and the index forgets instances older than keep. One MULTI round trip.
func (s *Store) PutSeries(ctx context.Context, instance string, slot int, interval []byte, now int64, keep time.Duration) error {
	if err := storeapi.CheckInstance(instance); err != nil {
		return err
	}
	if keep <= 0 || slot < 0 {
		return fmt.Errorf("%w: series slot %d, keep %s", ErrInvalid, slot, keep)
	}
	key, idx := s.seriesKey(instance), s.seriesIndexKey()
	pipe := s.rdb.TxPipeline() // one slot ({C}): atomic on Cluster too
	pipe.HSet(ctx, key, strconv.Itoa(slot), interval)
	pipe.PExpire(ctx, key, keep)
	pipe.ZAdd(ctx, idx, redis.Z{Score: float64(now), Member: instance})
	pipe.ZRemRangeByScore(ctx, idx, "-inf", "("+strconv.FormatInt(now-keep.Milliseconds(), 10))
	pipe.PExpire(ctx, idx, keep)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("scheduler: writing the series of %s: %w", instance, redisErr(err))
	}
	return nil
}

// Series implements storeapi.History: one ZRANGEBYSCORE, then one HVALS per instance
// in a pipeline.
func (s *Store) Series(ctx context.Context, now int64, keep time.Duration) (map[string][][]byte, error) {
	instances, err := s.rdb.ZRangeByScore(ctx, s.seriesIndexKey(), &redis.ZRangeBy{
		Min: strconv.FormatInt(now-keep.Milliseconds(), 10), Max: "+inf",
	}).Result()
	if err != nil {
		return nil, fmt.Errorf("scheduler: listing the series writers: %w", redisErr(err))
	}
	out := make(map[string][][]byte, len(instances))
	if len(instances) == 0 {
		return out, nil
	}
	cmds := make([]*redis.StringSliceCmd, len(instances))
	key := func(i int) string { return s.seriesKey(instances[i]) }
	if err := s.pipelined(ctx, "read series", len(instances), key, func(pipe redis.Pipeliner, i int) {
		cmds[i] = pipe.HVals(ctx, key(i))
	}); err != nil {
		return nil, fmt.Errorf("scheduler: reading the series: %w", redisErr(err))
	}
	for i, inst := range instances {
		vals := cmds[i].Val()
		if len(vals) == 0 {
			continue // expired between the two reads
		}
		bs := make([][]byte, len(vals))
		for j, v := range vals {
			bs[j] = []byte(v)
		}
		out[inst] = bs
	}
	return out, nil
}
