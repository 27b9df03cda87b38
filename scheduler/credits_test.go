package scheduler

import "testing"

// takeNow with reserve stops where taking more would leave less than half of the
// credits or of the byte budget free; without it, only the claim's share
// (budget/claimShares) and what is free bound it.
func TestTakeNowReserveKeepsHalfFree(t *testing.T) {
	sizes := func(n int, sz int64) []int64 {
		s := make([]int64, n)
		for i := range s {
			s[i] = sz
		}
		return s
	}
	// By count: 10 credits, no byte budget.
	c := newCredits(10, 0)
	if n, _ := c.takeNow(sizes(3, 1), false, 0); n != 3 {
		t.Fatalf("without reserve took %d of 3, want 3", n)
	}
	if n, _ := c.takeNow(sizes(9, 1), true, 0); n != 2 || c.available() != 5 {
		t.Fatalf("with reserve took %d, %d left; want 2, 5 (half of 10)", n, c.available())
	}
	if n, _ := c.takeNow(sizes(1, 1), true, 0); n != 0 {
		t.Fatalf("with reserve at half took %d, want 0", n)
	}
	if n, _ := c.takeNow(sizes(9, 1), false, 0); n != 5 {
		t.Fatalf("without reserve at half took %d, want the 5 left", n)
	}
	// Of a single credit, the reserve keeps it.
	if n, _ := newCredits(1, 0).takeNow(sizes(1, 1), true, 0); n != 0 {
		t.Fatalf("with reserve and one credit took %d, want 0", n)
	}
	// By bytes: a budget of 1600 (a claim's share 200), plenty of credits.
	c = newCredits(1000, 1600)
	for range 3 {
		if n, b := c.takeNow(sizes(4, 100), false, 0); n != 2 || b != 200 {
			t.Fatalf("without reserve took %d (%d B), want 2 (200 B: the claim's share)", n, b)
		}
	}
	// 1000 B free: with reserve, 800 must stay free, so 200 more.
	if n, b := c.takeNow(sizes(4, 100), true, 0); n != 2 || b != 200 {
		t.Fatalf("with reserve took %d (%d B), want 2 (200 B)", n, b)
	}
	if n, _ := c.takeNow(sizes(1, 100), true, 0); n != 0 {
		t.Fatalf("with reserve at half the bytes took %d, want 0", n)
	}
	if n, _ := c.takeNow(sizes(1, 100), false, 0); n != 1 {
		t.Fatalf("without reserve at half the bytes took %d, want 1", n)
	}
	// The claim's share counts what the same park took already.
	if n, _ := newCredits(1000, 1600).takeNow(sizes(4, 100), false, 100); n != 1 {
		t.Fatalf("with 100 B of the share taken already took %d, want 1", n)
	}
}
