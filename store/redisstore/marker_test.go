package redisstore

import (
	"errors"
	"strings"
	"testing"
)

// TestStoreRefusesUnknownFormat: a store written by a pre-release build (a shard count
// recorded, no format) or of another format is refused at New, with an error naming
// what was found and what to do, and nothing is written to it; a new store records the
// format and the shard count.
func TestStoreRefusesUnknownFormat(t *testing.T) {
	_, r, c := newTestStore(t, Options{Prefix: "fresh", Shards: 4})
	ctx := storeCtx(t)
	if got := c.HGetAll(ctx, "fresh:{default}:meta").Val(); got[metaFormat] != storeFormat || got[metaShards] != "4" {
		t.Fatalf("a new store records %v, want format %s and shards 4", got, storeFormat)
	}
	// The first instance wrote only the format so far: the next one completes the record.
	c.HSet(ctx, "half:{default}:meta", metaFormat, storeFormat)
	if _, err := New(ctx, r.Client(), Options{Prefix: "half", Shards: 4}); err != nil {
		t.Fatalf("New on a store with only the format recorded: %v", err)
	}

	for _, tc := range []struct {
		name string
		meta []any
		want []string
	}{
		{"pre-release", []any{metaShards, "4"}, []string{"pre-release", "shards=4", "flush", "new key prefix"}},
		{"later", []any{metaFormat, "9", metaShards, "4"}, []string{`format "9"`, `reads format "1"`, "flush", "new key prefix"}},
	} {
		key := tc.name + ":{default}:meta"
		c.HSet(ctx, key, tc.meta...)
		before := c.HGetAll(ctx, key).Val()
		_, err := New(ctx, r.Client(), Options{Prefix: tc.name, Shards: 4})
		if !errors.Is(err, ErrStoreFormat) {
			t.Fatalf("%s: New = %v, want ErrStoreFormat", tc.name, err)
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q does not say %q", tc.name, err, w)
			}
		}
		if after := c.HGetAll(ctx, key).Val(); len(after) != len(before) || after[metaFormat] != before[metaFormat] {
			t.Errorf("%s: meta changed from %v to %v", tc.name, before, after)
		}
		if n := c.Exists(ctx, tc.name+":{default:0}:counts").Val(); n != 0 {
			t.Errorf("%s: keys written into a store that was refused", tc.name)
		}
	}
}
