package redisstore

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// The store format, recorded in P:{C}:meta at first start beside the shard count, so a
// bridge never reads or writes a store it does not know: one written by a pre-release
// build (those recorded the shard count but no format, and kept keys this format has no
// reader for) or by a later release of another format. The format is written before the
// shard count, so a store of this build never shows a shard count without a format.
const (
	metaFormat  = "format"
	metaShards  = "shards"
	storeFormat = "1" // the format release 0.1.0 writes
)

// checkMeta records the format and the shard count of a new store, and refuses a store
// of another format (ErrStoreFormat) or shard count (ErrShardCount).
func (s *Store) checkMeta(ctx context.Context) error {
	meta, err := s.rdb.HGetAll(ctx, s.metaKey).Result()
	if err != nil {
		return fmt.Errorf("scheduler: read %s: %w", s.metaKey, redisErr(err))
	}
	if len(meta) == 0 || (len(meta) == 1 && meta[metaFormat] == storeFormat) {
		// A new store, or one whose first instance has written only the format so far.
		key := func(int) string { return s.metaKey }
		if err := s.pipelined(ctx, "record the store format", 1, key, func(pipe redis.Pipeliner, _ int) {
			pipe.HSetNX(ctx, s.metaKey, metaFormat, storeFormat)
			pipe.HSetNX(ctx, s.metaKey, metaShards, s.opt.Shards)
		}); err != nil {
			return fmt.Errorf("scheduler: record the store format in %s: %w", s.metaKey, redisErr(err))
		}
		if meta, err = s.rdb.HGetAll(ctx, s.metaKey).Result(); err != nil {
			return fmt.Errorf("scheduler: read %s: %w", s.metaKey, redisErr(err))
		}
		if meta[metaFormat] == storeFormat && s.opt.Logger != nil {
			s.opt.Logger.Info("store: new store", "key", s.metaKey, "format", storeFormat, "shards", meta[metaShards])
		}
	}
	if err := s.checkFormat(meta); err != nil {
		return err
	}
	if got := meta[metaShards]; got != strconv.Itoa(s.opt.Shards) {
		return fmt.Errorf("%w: Redis (%s) records shards=%s for cluster %q but the configuration says shards=%d; "+
			"the shard count is fixed at first start: set shards back to %s, or use a new cluster name",
			ErrShardCount, s.metaKey, got, s.opt.Cluster, s.opt.Shards, got)
	}
	return nil
}

// checkFormat refuses meta unless it records this build's format.
func (s *Store) checkFormat(meta map[string]string) error {
	const todo = "this build does not read it: flush that Redis database (or delete the keys %s and %s), " +
		"or give this bridge a new key prefix (prefix) or cluster name (cluster)"
	p, c := s.opt.Prefix, s.opt.Cluster
	keys := []any{p + ":{" + c + "}:*", p + ":{" + c + ":*}:*"}
	switch got, ok := meta[metaFormat]; {
	case ok && got == storeFormat:
		return nil
	case ok:
		return fmt.Errorf("%w: %s records store format %q, this build reads format %q; "+todo,
			ErrStoreFormat, s.metaKey, got, storeFormat, keys[0], keys[1])
	default:
		return fmt.Errorf("%w: %s holds a store written by a pre-release build (it records %s and no store format); "+todo,
			ErrStoreFormat, s.metaKey, describeMeta(meta), keys[0], keys[1])
	}
}

// describeMeta names the fields found, for the error.
func describeMeta(meta map[string]string) string {
	if v, ok := meta[metaShards]; ok {
		return "shards=" + v
	}
	out := ""
	for f := range meta {
		if out != "" {
			out += ", "
		}
		out += strconv.Quote(f)
	}
	return "fields " + out
}
