package storeapi

import (
	"fmt"
	"hash/fnv"
	"io"
	"regexp"
	"strconv"
	"testing"
)

// refShardOf is ShardOf written from its documentation with the standard library:
// FNV-1a 32 (hash/fnv) of the shard name — "<topic>/<partition>/<offset / ShardBlock>"
// for an id of the Kafka default form, else the id — modulo shards.
func refShardOf(id string, shards int) int {
	name := id
	if m := kafkaForm.FindStringSubmatch(id); m != nil {
		if off, err := strconv.ParseInt(m[3], 10, 64); err == nil {
			name = m[1] + "/" + m[2] + "/" + strconv.FormatInt(off/ShardBlock, 10)
		}
	}
	h := fnv.New32a()
	_, _ = io.WriteString(h, name)
	return int(h.Sum32() % uint32(shards))
}

var kafkaForm = regexp.MustCompile(`(?s)\A(.+)/([0-9]{1,10})/([0-9]{1,19})/[0-9a-f]{12}\z`)

// TestShardOfIsFNV1a: ShardOf is FNV-1a (32-bit) of the id's shard name modulo the
// shard count, as hash/fnv computes it — the mapping of every parked id depends on it —
// for ids of every length up to 300 bytes (all byte values), ids of the Kafka default
// form and near misses of it, the shard counts in use, and a few pinned values.
func TestShardOfIsFNV1a(t *testing.T) {
	b := make([]byte, 0, 300)
	ids := []string{}
	for i := range 300 {
		ids = append(ids, string(b))
		b = append(b, byte(i*37+11))
	}
	ids = append(ids,
		"orders.delay/3/42/5d225b121213", "a/0/0/000000000000", "t/1/9223372036854775807/abcdefabcdef",
		"a/b/c/7/1023/0123456789ab", "x/2147483647/5/0123456789ab", "//0/1/0123456789ab",
		// near misses: the id's own hash
		"t/1/9223372036854775808/abcdefabcdef", "/0/0/000000000000", "t/0/1/ABCDEFABCDEF",
		"t/0/1/0123456789a", "t/0/1/0123456789abc", "t/0//0123456789ab", "t//1/0123456789ab",
		"t/0/-1/0123456789ab", "t/12345678901/1/0123456789ab", "t/0/12345678901234567890/0123456789ab",
		"0/1/0123456789ab", "t/0/1/0123456789ab/", "t/0/x1/0123456789ab")
	for _, id := range ids {
		for _, shards := range []int{1, 7, 16, 64, 1024} {
			if got, want := ShardOf(id, shards), refShardOf(id, shards); got != want {
				t.Fatalf("ShardOf(%q, %d) = %d, the rule says %d", id, shards, got, want)
			}
		}
	}
	for id, want := range map[string]int{"": 5, "orders.delay/3/42/5d225b121213": 12, "orders.delay/3/1023/000000000000": 12, "orders.delay/3/1024/000000000000": 31, "m-1": 26} {
		if got := ShardOf(id, 64); got != want || refShardOf(id, 64) != want {
			t.Errorf("ShardOf(%q, 64) = %d, want %d", id, got, want)
		}
	}
}

// TestShardOfKeepsABlockTogether: the default ids of ShardBlock consecutive offsets of
// one partition share a shard whatever their content hash, and the blocks of one
// partition spread over every shard: 1,000 blocks per shard on average, each shard
// within ±15 %.
func TestShardOfKeepsABlockTogether(t *testing.T) {
	const shards = 64
	id := func(off int64, hash int) string {
		return fmt.Sprintf("orders.in/5/%d/%012x", off, hash)
	}
	for _, base := range []int64{0, 7 * ShardBlock, 123456 * ShardBlock} {
		want := ShardOf(id(base, 0), shards)
		for off := base; off < base+ShardBlock; off++ {
			if got := ShardOf(id(off, int(off)*7919), shards); got != want {
				t.Fatalf("offset %d: shard %d, offset %d: shard %d", base, want, off, got)
			}
		}
	}
	n := make([]int, shards)
	for blk := int64(0); blk < 1000*shards; blk++ {
		n[ShardOf(id(blk*ShardBlock, 0), shards)]++
	}
	for sh, c := range n {
		if c < 850 || c > 1150 {
			t.Errorf("shard %d holds %d blocks, want 1000 ± 15 %%", sh, c)
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

// TestKafkaOffset reads the offset and record hash of ids of the Kafka default form
// only, as ShardOf places them.
func TestKafkaOffset(t *testing.T) {
	for _, c := range []struct {
		id, prefix, hash string
		offset           uint64
		ok               bool
	}{
		{"orders.delay/3/1025/0123456789ab", "orders.delay/3/", "0123456789ab", 1025, true},
		{"a/b/0/7/ffffffffffff", "a/b/0/", "ffffffffffff", 7, true},
		{"orders.delay/3/1025/0123456789AB", "", "", 0, false}, // upper-case hex: not the form
		{"orders.delay/3/1025", "", "", 0, false},
		{"orders.delay//1025/0123456789ab", "", "", 0, false},
		{"plain-id", "", "", 0, false},
	} {
		prefix, offset, hash, ok := KafkaOffset(c.id)
		if prefix != c.prefix || offset != c.offset || hash != c.hash || ok != c.ok {
			t.Errorf("KafkaOffset(%q) = %q %d %q %v, want %q %d %q %v", c.id, prefix, offset, hash, ok, c.prefix, c.offset, c.hash, c.ok)
		}
	}
}
