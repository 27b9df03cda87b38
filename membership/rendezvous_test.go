package membership

import (
	"fmt"
	"slices"
	"testing"
)

func TestOwnersEvenSplitDeterministicFewMoves(t *testing.T) {
	for _, shards := range []int{16, 64} {
		totalExtra, changes := 0, 0
		for n := 1; n <= 7; n++ {
			for trial := 0; trial < 20; trial++ {
				members := make([]string, n)
				for i := range members {
					members[i] = fmt.Sprintf("pod-%d-%d", trial, i)
				}
				owners := Owners(members, shards)
				count := map[string]int{}
				for sh, o := range owners {
					if o == "" {
						t.Fatalf("%d shards, %d members: shard %d has no owner", shards, n, sh)
					}
					count[o]++
				}
				lo, hi := shards/n, (shards+n-1)/n
				for _, m := range members {
					if count[m] < lo || count[m] > hi {
						t.Fatalf("%d shards over %v: %s owns %d, want %d..%d (%v)", shards, members, m, count[m], lo, hi, count)
					}
				}
				// Every member computes the same answer whatever order it lists members
				// in, with duplicates, and with or without itself in the list.
				rev := append([]string(nil), members...)
				slices.Reverse(rev)
				rev = append(rev, members[0])
				if got := Owners(rev, shards); !slices.Equal(got, owners) {
					t.Fatalf("Owners depends on the order of the member list")
				}
				for _, m := range members {
					others := slices.DeleteFunc(append([]string(nil), members...), func(x string) bool { return x == m })
					for sh, mine := range Assign(others, m, shards) {
						if mine != (owners[sh] == m) {
							t.Fatalf("Assign(%s) disagrees with Owners on shard %d", m, sh)
						}
					}
				}
				// A member joining takes its share; only a few other shards move to keep
				// the split even.
				joined := Owners(append(append([]string(nil), members...), "joiner"), shards)
				extra := 0
				for sh := range owners {
					if joined[sh] != owners[sh] && joined[sh] != "joiner" {
						extra++
					}
				}
				totalExtra += extra
				changes++
				if extra > shards/3 {
					t.Errorf("%d shards, %d -> %d members: %d shards moved between existing members", shards, n, n+1, extra)
				}
			}
		}
		avg := float64(totalExtra) / float64(changes)
		t.Logf("%d shards: on average %.2f shards move between existing members when one joins", shards, avg)
		if avg > 3 {
			t.Errorf("%d shards: %.2f extra moves per join on average; want a few", shards, avg)
		}
	}
	if got := Owners(nil, 4); !slices.Equal(got, []string{"", "", "", ""}) {
		t.Errorf("no members: %q", got)
	}
}

// TestOwnersOfSaltedSetsSplitEvenlyAndDiffer: OwnersOf("") is Owners (the shards'
// assignment is unchanged); a salted set splits as evenly, and two routes' partitions
// are not assigned alike.
func TestOwnersOfSaltedSetsSplitEvenlyAndDiffer(t *testing.T) {
	members := []string{"pod-a", "pod-b", "pod-c"}
	if !slices.Equal(OwnersOf("", members, 64), Owners(members, 64)) {
		t.Fatal(`OwnersOf("") differs from Owners`)
	}
	a, b := OwnersOf("orders\x00orders.delay", members, 12), OwnersOf("billing\x00billing.delay", members, 12)
	for _, owners := range [][]string{a, b} {
		count := map[string]int{}
		for _, o := range owners {
			count[o]++
		}
		for _, m := range members {
			if count[m] != 4 {
				t.Fatalf("split %v: want 4 partitions each", count)
			}
		}
	}
	if slices.Equal(a, b) {
		t.Errorf("two routes' partitions assigned alike: %v", a)
	}
}
