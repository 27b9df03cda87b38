package testkit

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// StartKafka runs an in-process kfake cluster (a real Kafka wire-protocol broker) on a
// free port and returns its bootstrap address. Topics are auto-created on first use;
// topics lists ones to create up front with the given partition count.
func StartKafka(t testing.TB, partitions int, topics ...string) (addr string, c *kfake.Cluster) {
	t.Helper()
	opts := []kfake.Opt{kfake.NumBrokers(1), kfake.Ports(FreePort(t)), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(partitions)}
	if len(topics) > 0 {
		opts = append(opts, kfake.SeedTopics(int32(partitions), topics...))
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatalf("testutil: start kfake: %v", err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()[0], c
}
