package scheduler

import "fmt"

// idsOnShard returns n ids that all hash to shard.
func idsOnShard(s interface{ ShardOf(string) int }, shard, n int, prefix string) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		id := fmt.Sprintf("%s-%d", prefix, i)
		if s.ShardOf(id) == shard {
			out = append(out, id)
		}
	}
	return out
}
