// Package membership is what the scheduler (shards) and Kafka ingress (source
// partitions) share to split work over the bridge's instances without a leader: the
// live members (a Redis sorted set of heartbeats), rendezvous hashing with bounded loads
// over them, and leases with fencing tokens (an owner key "holder|token" with a TTL and
// a counter that only grows). See docs/ARCHITECTURE.md ("Membership") and docs/HA.md.
package membership

import (
	"hash/fnv"
	"slices"
	"sort"
)

// Assign returns the shards instance should own among members (instance included
// whether listed or not): Owners, seen from one member.
func Assign(members []string, instance string, shards int) []bool {
	ms := append([]string(nil), members...)
	if !Contains(ms, instance) {
		ms = append(ms, instance)
	}
	owners := Owners(ms, shards)
	out := make([]bool, shards)
	for i, o := range owners {
		out[i] = o == instance
	}
	return out
}

// Owners assigns every shard to one of members by rendezvous (highest random weight)
// hashing with bounded loads: all (shard, member) pairs are taken in descending order
// of their hash weight, and a shard goes to the first member of its pairs that still
// has room, where room is shards/len(members), plus one for the first shards%len
// members to reach that. So the split is even (shard counts differ by at most one),
// every instance computes the same answer from the same member list with no
// coordination, and a member joining or leaving moves its own share plus, on average,
// one to three more shards (measured for 16 and 64 shards and up to 7 members) — plain
// rendezvous hashing moves only the member's share but splits 16 shards over 3 members
// as unevenly as 8/4/4. Duplicate names count once; an empty list owns nothing ("").
func Owners(members []string, shards int) []string { return OwnersOf("", members, shards) }

// OwnersOf is Owners for n items of a named set (salt): the same rule, with every
// weight also hashing salt, so that different sets (the partitions of two routes) are
// not split alike. OwnersOf("", m, n) is Owners(m, n).
func OwnersOf(salt string, members []string, shards int) []string {
	ms := append([]string(nil), members...)
	sort.Strings(ms)
	ms = slices.Compact(ms)
	out := make([]string, shards)
	n := len(ms)
	if n == 0 || shards <= 0 {
		return out
	}
	type pair struct {
		w      uint64
		shard  int32
		member int32
	}
	pairs := make([]pair, 0, n*shards)
	for sh := 0; sh < shards; sh++ {
		for m := range ms {
			pairs = append(pairs, pair{w: weight(ms[m], salt, sh), shard: int32(sh), member: int32(m)})
		}
	}
	sort.Slice(pairs, func(i, j int) bool {
		a, b := pairs[i], pairs[j]
		if a.w != b.w {
			return a.w > b.w
		}
		if a.shard != b.shard {
			return a.shard < b.shard
		}
		return a.member < b.member
	})
	base, extra := shards/n, shards%n
	count := make([]int, n)
	assigned := 0
	for _, p := range pairs {
		if out[p.shard] != "" {
			continue
		}
		c := count[p.member]
		if c < base || (c == base && extra > 0) {
			if c == base {
				extra--
			}
			out[p.shard] = ms[p.member]
			count[p.member]++
			if assigned++; assigned == shards {
				break
			}
		}
	}
	return out
}

// Contains reports whether list holds s.
func Contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func weight(member, salt string, shard int) uint64 {
	h := fnv.New64a()
	h.Write([]byte(member))
	if salt == "" {
		h.Write([]byte{0, byte(shard >> 8), byte(shard)}) // the shards' weights, unchanged
	} else {
		h.Write([]byte{1})
		h.Write([]byte(salt))
		h.Write([]byte{0, byte(shard >> 24), byte(shard >> 16), byte(shard >> 8), byte(shard)})
	}
	x := h.Sum64()
	// fnv's low bits mix poorly for near-identical inputs; finish with splitmix64.
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
