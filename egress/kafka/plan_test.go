package kafka

import (
	"fmt"
	"testing"
)

// TestPlanSplitsByLeaderAndSizeKeepingPartitionsWhole: one request per leader, a
// leader's share split when it exceeds the cap, never a partition split across two
// requests, and within a request the partitions in topic and partition order.
func TestPlanSplitsByLeaderAndSizeKeepingPartitionsWhole(t *testing.T) {
	mk := func(topic string, partition, leader int32, n int) partBatch {
		return partBatch{topic: topic, partition: partition, leader: leader, recs: make([]int, n)}
	}
	batches := []partBatch{
		mk("b", 0, 1, 100), mk("a", 1, 1, 100), mk("a", 0, 2, 10), mk("a", 2, 1, 300), mk("a", 3, 1, 50),
	}
	got := fmt.Sprint(describe(batches, plan(batches, 256, 1<<40)))
	// leader 1: a/1 (100) + a/2 (300) would exceed 256 -> a/1 alone; a/2 (300, more than
	// the cap on its own) alone; a/3 + b/0 (150). Leader 2: a/0.
	want := "[[1:a/1] [1:a/2] [1:a/3 1:b/0] [2:a/0]]"
	if got != want {
		t.Fatalf("plan = %s, want %s", got, want)
	}
	if got := fmt.Sprint(describe(batches, plan(batches, 1<<20, 1<<40))); got != "[[1:a/1 1:a/2 1:a/3 1:b/0] [2:a/0]]" {
		t.Fatalf("plan without a cap = %s, want one request per leader", got)
	}
}

// TestPlanSplitsByBytes: a leader's share is split when its partitions' bytes exceed
// the byte cap, whole partition runs only, one run over the cap alone.
func TestPlanSplitsByBytes(t *testing.T) {
	mk := func(partition int32, bytes int64) partBatch {
		return partBatch{topic: "a", partition: partition, leader: 1, recs: make([]int, 1), bytes: bytes}
	}
	batches := []partBatch{mk(0, 3<<20), mk(1, 2<<20), mk(2, 5<<20), mk(3, 1<<20)}
	want := "[[1:a/0] [1:a/1] [1:a/2] [1:a/3]]"
	if got := fmt.Sprint(describe(batches, plan(batches, 256, 4<<20))); got != want {
		t.Fatalf("plan = %s, want %s", got, want)
	}
	batches[1].bytes = 1 << 20
	want = "[[1:a/0 1:a/1] [1:a/2] [1:a/3]]"
	if got := fmt.Sprint(describe(batches, plan(batches, 256, 4<<20))); got != want {
		t.Fatalf("plan = %s, want %s", got, want)
	}
}

// TestCutRunsKeepsOrderAndPutsAnOversizedRecordAlone: a partition's records are cut
// into runs of at most the cap, in order; a record over the cap is a run alone.
func TestCutRunsKeepsOrderAndPutsAnOversizedRecordAlone(t *testing.T) {
	var recs []record
	for _, size := range []int{300, 300, 300, 1500, 100, 100} {
		recs = append(recs, record{value: make([]byte, size)})
	}
	b := partBatch{recs: []int{0, 1, 2, 3, 4, 5}}
	var got [][]int
	for _, r := range cutRuns(recs, &b, 1000) {
		got = append(got, r.recs)
		if len(r.recs) > 1 && r.bytes > 1000 {
			t.Errorf("run %v has %d bytes, over the cap", r.recs, r.bytes)
		}
	}
	if fmt.Sprint(got) != "[[0 1 2] [3] [4 5]]" {
		t.Fatalf("runs %v, want [[0 1 2] [3] [4 5]]", got)
	}
}

func describe(batches []partBatch, reqs [][]int) [][]string {
	out := make([][]string, len(reqs))
	for i, r := range reqs {
		for _, b := range r {
			out[i] = append(out[i], fmt.Sprintf("%d:%s/%d", batches[b].leader, batches[b].topic, batches[b].partition))
		}
	}
	return out
}
