package storeapi

import (
	"hash/fnv"
	"io"
	"testing"
)

// TestShardOfIsFNV1a: ShardOf is FNV-1a (32-bit) of the id modulo the shard count, as
// hash/fnv computes it — the mapping of every parked id depends on it — for ids of every
// length up to 300 bytes (all byte values) and the shard counts in use, and a few pinned
// values.
func TestShardOfIsFNV1a(t *testing.T) {
	ref := func(id string, shards int) int {
		h := fnv.New32a()
		_, _ = io.WriteString(h, id)
		return int(h.Sum32() % uint32(shards))
	}
	b := make([]byte, 0, 300)
	for i := range 300 {
		id := string(b)
		for _, shards := range []int{1, 7, 16, 64, 1024} {
			if got, want := ShardOf(id, shards), ref(id, shards); got != want {
				t.Fatalf("ShardOf(%q, %d) = %d, FNV-1a says %d", id, shards, got, want)
			}
		}
		b = append(b, byte(i*37+11))
	}
	for id, want := range map[string]int{"": 5, "orders.delay/3/42/5d225b121213": 53, "m-1": 26} {
		if got := ShardOf(id, 64); got != want || ref(id, 64) != want {
			t.Errorf("ShardOf(%q, 64) = %d, want %d", id, got, want)
		}
	}
}

func BenchmarkShardOf(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		_ = ShardOf("drain-bridge.in/3/123456/5d225b121213", 64)
	}
}

// BenchmarkShardOfHashFNV is the implementation ShardOf replaced (hash/fnv), for
// comparison.
func BenchmarkShardOfHashFNV(b *testing.B) {
	b.ReportAllocs()
	for range b.N {
		h := fnv.New32a()
		_, _ = io.WriteString(h, "drain-bridge.in/3/123456/5d225b121213")
		_ = int(h.Sum32() % 64)
	}
}
