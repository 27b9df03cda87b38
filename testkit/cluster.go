package testkit

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// RedisCluster is a Redis Cluster of redis-server child processes owned by one test:
// masters only, no replicas, every node on a free port of 127.0.0.1.
type RedisCluster struct {
	t     testing.TB
	Nodes []*Redis
}

// Addrs are the nodes' host:port, the seed list a cluster client takes.
func (c *RedisCluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr()
	}
	return out
}

// StartRedisCluster starts masters redis-server processes with cluster mode enabled
// (each with its cluster config file in its own temporary directory), joins them with
// `redis-cli --cluster create ... --cluster-replicas 0` (which spreads the 16384 slots
// evenly), and waits until every node reports cluster_state:ok and agrees on the slot
// map. The processes are killed when the test ends. redis-server and redis-cli must be
// on PATH (Debian package redis-server, or redis-tools for the CLI); a missing one fails
// the test with a message saying so.
func StartRedisCluster(t testing.TB, masters int) *RedisCluster {
	t.Helper()
	if masters < 3 {
		t.Fatalf("testutil: a Redis Cluster needs at least 3 masters, asked for %d", masters)
	}
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("testutil: redis-cli not found on PATH (install the Debian package redis-tools or redis-server); it creates the cluster: %v", err)
	}
	c := &RedisCluster{t: t}
	for i := 0; i < masters; i++ {
		dir := t.TempDir()
		c.Nodes = append(c.Nodes, StartRedis(t,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--cluster-node-timeout", "5000",
			// Keep serving the slots it has while another node is down (fault tests).
			"--cluster-require-full-coverage", "no",
		))
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("testutil: redis-cli --cluster create %s: %v\n%s", strings.Join(c.Addrs(), " "), err, out)
	}
	c.waitOK(30 * time.Second)
	return c
}

// waitOK waits until every node says cluster_state:ok, knows all masters and has all
// 16384 slots assigned, and a cluster client can write to every node.
func (c *RedisCluster) waitOK(limit time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	ctx := context.Background()
	var last string
	for {
		ok := true
		for _, n := range c.Nodes {
			cl := redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1})
			info, err := cl.ClusterInfo(ctx).Result()
			cl.Close()
			if err != nil {
				ok, last = false, fmt.Sprintf("%s: %v", n.Addr(), err)
				break
			}
			f := infoFields(info)
			if f["cluster_state"] != "ok" || f["cluster_slots_assigned"] != "16384" ||
				f["cluster_known_nodes"] != strconv.Itoa(len(c.Nodes)) || f["cluster_size"] != strconv.Itoa(len(c.Nodes)) {
				ok, last = false, fmt.Sprintf("%s: %s", n.Addr(), strings.ReplaceAll(strings.TrimSpace(info), "\r\n", " "))
				break
			}
		}
		if ok {
			// Every master answers writes for its own slots through a cluster client.
			cc := c.Client()
			err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
				return m.Ping(ctx).Err()
			})
			if err == nil {
				return
			}
			last = err.Error()
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("testutil: Redis Cluster %v not ready after %s: %s", c.Addrs(), limit, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func infoFields(info string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out
}

// Client returns a cluster client seeded with every node, closed when the test ends.
func (c *RedisCluster) Client() *redis.ClusterClient {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	c.t.Cleanup(func() { cc.Close() })
	return cc
}

// DBSize returns each node's key count, in Nodes order.
func (c *RedisCluster) DBSize(ctx context.Context) ([]int64, error) {
	out := make([]int64, len(c.Nodes))
	for i, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr()})
		v, err := cl.DBSize(ctx).Result()
		cl.Close()
		if err != nil {
			return nil, fmt.Errorf("testutil: DBSIZE on %s: %w", n.Addr(), err)
		}
		out[i] = v
	}
	return out, nil
}
