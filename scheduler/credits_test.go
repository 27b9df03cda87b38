package scheduler

import "testing"

// takeNow with reserve stops where taking more would leave less than half of the
// credits (rounded up) or of the byte budget free; without it, only what is free and
// the claim's share (budget/claimShares, counting what the same park took already)
// bound it.
func TestTakeNowReserveKeepsHalfFree(t *testing.T) {
	type step struct {
		what    string
		n       int   // messages offered
		sz      int64 // bytes each
		reserve bool
		already int64
		want    int
	}
	for _, tc := range []struct {
		credits int
		budget  int64
		steps   []step
	}{
		{10, 0, []step{
			{"without reserve", 3, 1, false, 0, 3},
			{"with reserve: down to half of 10", 9, 1, true, 0, 2},
			{"with reserve at half", 1, 1, true, 0, 0},
			{"without reserve at half: the 5 left", 9, 1, false, 0, 5},
		}},
		{1, 0, []step{{"one credit: the reserve keeps it", 1, 1, true, 0, 0}}},
		{1000, 1600, []step{ // a claim's share is 200 B
			{"without reserve: the share", 4, 100, false, 0, 2},
			{"without reserve: the share again", 4, 100, false, 0, 2},
			{"without reserve: the share a third time", 4, 100, false, 0, 2},
			{"with reserve: 1000 B free, 800 kept", 4, 100, true, 0, 2},
			{"with reserve at half the bytes", 1, 100, true, 0, 0},
			{"without reserve at half the bytes", 1, 100, false, 0, 1},
			{"100 B of the share taken already", 4, 100, false, 100, 1},
		}},
	} {
		c := newCredits(tc.credits, tc.budget)
		for _, st := range tc.steps {
			sizes := make([]int64, st.n)
			for i := range sizes {
				sizes[i] = st.sz
			}
			if n, _ := c.takeNow(sizes, st.reserve, st.already); n != st.want {
				t.Fatalf("%d credits, %d B: %s: took %d, want %d", tc.credits, tc.budget, st.what, n, st.want)
			}
		}
	}
}
