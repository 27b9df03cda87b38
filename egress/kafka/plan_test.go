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
	got := fmt.Sprint(describe(batches, plan(batches, 256)))
	// leader 1: a/1 (100) + a/2 (300) would exceed 256 -> a/1 alone; a/2 (300, more than
	// the cap on its own) alone; a/3 + b/0 (150). Leader 2: a/0.
	want := "[[1:a/1] [1:a/2] [1:a/3 1:b/0] [2:a/0]]"
	if got != want {
		t.Fatalf("plan = %s, want %s", got, want)
	}
	if got := fmt.Sprint(describe(batches, plan(batches, 1<<20))); got != "[[1:a/1 1:a/2 1:a/3 1:b/0] [2:a/0]]" {
		t.Fatalf("plan without a cap = %s, want one request per leader", got)
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
