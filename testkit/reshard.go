package testkit

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Resharding a RedisCluster the way an operator does: a new empty master joined with
// `redis-cli --cluster add-node`, slots moved onto it with `redis-cli --cluster
// rebalance --cluster-use-empty-masters` (docs/OPERATIONS.md "Resharding Redis Cluster").

// AddMaster starts one more cluster-enabled redis-server, joins it to the cluster as a
// master without slots (`redis-cli --cluster add-node`), and waits until every node
// knows it and `redis-cli --cluster check` says the nodes agree. It is appended to
// Nodes; the test's cleanup stops it like the others.
func (c *RedisCluster) AddMaster() *Redis {
	c.t.Helper()
	dir := c.t.TempDir()
	n := StartRedis(c.t,
		"--cluster-enabled", "yes",
		"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
		"--cluster-node-timeout", "5000",
		"--cluster-require-full-coverage", "no",
	)
	if out, err := c.cli(30*time.Second, "--cluster", "add-node", n.Addr(), c.Nodes[0].Addr()); err != nil {
		c.t.Fatalf("testutil: redis-cli --cluster add-node %s %s: %v\n%s", n.Addr(), c.Nodes[0].Addr(), err, out)
	}
	c.Nodes = append(c.Nodes, n)
	c.waitAgree(30 * time.Second)
	return n
}

// Rebalance runs `redis-cli --cluster rebalance <node> --cluster-use-empty-masters`
// (plus extra arguments) and waits until every node serves its share with
// cluster_state:ok. It returns redis-cli's output, which lists the slots moved.
func (c *RedisCluster) Rebalance(extra ...string) string {
	c.t.Helper()
	args := append([]string{"--cluster", "rebalance", c.Nodes[0].Addr(), "--cluster-use-empty-masters"}, extra...)
	out, err := c.cli(5*time.Minute, args...)
	if err != nil {
		c.t.Fatalf("testutil: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	c.waitOK(30 * time.Second)
	return string(out)
}

func (c *RedisCluster) cli(limit time.Duration, args ...string) ([]byte, error) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("redis-cli not found on PATH (install the Debian package redis-tools or redis-server): %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	return exec.CommandContext(ctx, cli, args...).CombinedOutput()
}

// waitAgree waits until every node knows every other and says cluster_state:ok (a
// node that does not yet refuses MIGRATE with CLUSTERDOWN), and `redis-cli --cluster check`
// finds their slot maps in agreement (rebalance refuses to start otherwise).
func (c *RedisCluster) waitAgree(limit time.Duration) {
	c.t.Helper()
	deadline := time.Now().Add(limit)
	ctx := context.Background()
	var last string
	for time.Now().Before(deadline) {
		known := true
		for _, n := range c.Nodes {
			cl := redis.NewClient(&redis.Options{Addr: n.Addr(), MaxRetries: -1})
			info, err := cl.ClusterInfo(ctx).Result()
			cl.Close()
			f := infoFields(info)
			if err != nil || f["cluster_known_nodes"] != fmt.Sprint(len(c.Nodes)) || f["cluster_state"] != "ok" {
				known, last = false, fmt.Sprintf("%s: %v %q", n.Addr(), err, info)
				break
			}
		}
		if known {
			out, err := c.cli(30*time.Second, "--cluster", "check", c.Nodes[0].Addr())
			if err == nil && strings.Contains(string(out), "All nodes agree about slots configuration") &&
				!strings.Contains(string(out), "[ERR]") && !strings.Contains(string(out), "[WARNING]") {
				return
			}
			last = string(out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	c.t.Fatalf("testutil: Redis Cluster %v did not agree on its configuration within %s: %s", c.Addrs(), limit, last)
}

// Misplaced scans every node and returns the keys it holds in slots it does not serve
// (orphans a migration left behind), as "node: key (slot n)", and how many keys each
// node holds (in Nodes order).
func (c *RedisCluster) Misplaced(ctx context.Context) (misplaced []string, keys []int, err error) {
	keys = make([]int, len(c.Nodes))
	for i, n := range c.Nodes {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr()})
		bad, count, err := misplacedOn(ctx, cl, n.Addr())
		cl.Close()
		if err != nil {
			return nil, nil, err
		}
		misplaced, keys[i] = append(misplaced, bad...), count
	}
	return misplaced, keys, nil
}

func misplacedOn(ctx context.Context, cl *redis.Client, addr string) ([]string, int, error) {
	slots, err := cl.ClusterSlots(ctx).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("testutil: CLUSTER SLOTS on %s: %w", addr, err)
	}
	myID, err := cl.ClusterMyID(ctx).Result()
	if err != nil {
		return nil, 0, fmt.Errorf("testutil: CLUSTER MYID on %s: %w", addr, err)
	}
	serves := func(slot int64) bool {
		for _, s := range slots {
			if int64(s.Start) <= slot && slot <= int64(s.End) && len(s.Nodes) > 0 && s.Nodes[0].ID == myID {
				return true
			}
		}
		return false
	}
	var bad []string
	count := 0
	iter := cl.Scan(ctx, 0, "*", 1000).Iterator()
	for iter.Next(ctx) {
		count++
		key := iter.Val()
		slot, err := cl.ClusterKeySlot(ctx, key).Result()
		if err != nil {
			return nil, 0, fmt.Errorf("testutil: CLUSTER KEYSLOT on %s: %w", addr, err)
		}
		if !serves(slot) {
			bad = append(bad, fmt.Sprintf("%s: %s (slot %d)", addr, key, slot))
		}
	}
	if err := iter.Err(); err != nil {
		return nil, 0, fmt.Errorf("testutil: SCAN on %s: %w", addr, err)
	}
	return bad, count, nil
}

// MoveSlot migrates one slot from the master at from to the master at to the way
// `redis-cli --cluster reshard` does (SETSLOT IMPORTING on the target, MIGRATING on the
// source, MIGRATE of its keys, SETSLOT NODE on every master), but one key per MIGRATE
// with pause after each, so the slot stays half-moved for as long as a test needs. first
// orders the keys: those it returns true for move first. It returns the keys moved and
// the first error (a MIGRATE refused with BUSYKEY says the target already had the key:
// a script created it there while the slot was importing).
func (c *RedisCluster) MoveSlot(ctx context.Context, slot int, from, to *Redis, pause time.Duration, first func(key string) bool) (int, error) {
	m, err := c.BeginSlotMove(ctx, slot, from, to)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	moved := 0
	for {
		keys, err := m.Keys(ctx)
		if err != nil || len(keys) == 0 {
			if err == nil {
				err = m.Finish(ctx)
			}
			return moved, err
		}
		key := keys[0]
		for _, k := range keys {
			if first != nil && first(k) {
				key = k
				break
			}
		}
		if err := m.Migrate(ctx, key); err != nil {
			return moved, err
		}
		moved++
		time.Sleep(pause)
	}
}

// SlotMove is one slot being migrated, step by step (BeginSlotMove).
type SlotMove struct {
	c            *RedisCluster
	slot         int
	from, to     *Redis
	src, dst     *redis.Client
	srcID, dstID string
}

// BeginSlotMove marks slot IMPORTING on to and MIGRATING on from: from then answers
// ASK or TRYAGAIN for the keys it no longer has, to serves ASKING clients.
func (c *RedisCluster) BeginSlotMove(ctx context.Context, slot int, from, to *Redis) (*SlotMove, error) {
	m := &SlotMove{c: c, slot: slot, from: from, to: to,
		src: redis.NewClient(&redis.Options{Addr: from.Addr()}), dst: redis.NewClient(&redis.Options{Addr: to.Addr()})}
	var err error
	if m.srcID, err = m.src.ClusterMyID(ctx).Result(); err != nil {
		m.Close()
		return nil, fmt.Errorf("testutil: CLUSTER MYID on %s: %w", from.Addr(), err)
	}
	if m.dstID, err = m.dst.ClusterMyID(ctx).Result(); err != nil {
		m.Close()
		return nil, fmt.Errorf("testutil: CLUSTER MYID on %s: %w", to.Addr(), err)
	}
	if err := m.dst.Do(ctx, "cluster", "setslot", slot, "importing", m.srcID).Err(); err != nil {
		m.Close()
		return nil, fmt.Errorf("testutil: SETSLOT %d IMPORTING on %s: %w", slot, to.Addr(), err)
	}
	if err := m.src.Do(ctx, "cluster", "setslot", slot, "migrating", m.dstID).Err(); err != nil {
		m.Close()
		return nil, fmt.Errorf("testutil: SETSLOT %d MIGRATING on %s: %w", slot, from.Addr(), err)
	}
	return m, nil
}

// Keys are the slot's keys still on the source.
func (m *SlotMove) Keys(ctx context.Context) ([]string, error) {
	keys, err := m.src.ClusterGetKeysInSlot(ctx, m.slot, 1000000).Result()
	if err != nil {
		return nil, fmt.Errorf("testutil: GETKEYSINSLOT %d on %s: %w", m.slot, m.from.Addr(), err)
	}
	return keys, nil
}

// Migrate moves keys to the target, one MIGRATE each.
func (m *SlotMove) Migrate(ctx context.Context, keys ...string) error {
	host, port, _ := strings.Cut(m.to.Addr(), ":")
	for _, key := range keys {
		if err := m.src.Migrate(ctx, host, port, key, 0, 10*time.Second).Err(); err != nil {
			return fmt.Errorf("testutil: MIGRATE %s from %s to %s: %w", key, m.from.Addr(), m.to.Addr(), err)
		}
	}
	return nil
}

// Finish migrates what is left and gives the slot to the target on every master.
func (m *SlotMove) Finish(ctx context.Context) error {
	keys, err := m.Keys(ctx)
	if err != nil {
		return err
	}
	if err := m.Migrate(ctx, keys...); err != nil {
		return err
	}
	for _, n := range append([]*Redis{m.to, m.from}, m.c.Nodes...) {
		cl := redis.NewClient(&redis.Options{Addr: n.Addr()})
		err := cl.Do(ctx, "cluster", "setslot", m.slot, "node", m.dstID).Err()
		cl.Close()
		if err != nil && (n == m.to || n == m.from) {
			return fmt.Errorf("testutil: SETSLOT %d NODE on %s: %w", m.slot, n.Addr(), err)
		}
	}
	return nil
}

// Close closes the move's connections (the slot stays as it is).
func (m *SlotMove) Close() {
	m.src.Close()
	m.dst.Close()
}

// RemoveMaster takes the master n out of the cluster the way an operator scales in:
// every slot moved off it (`redis-cli --cluster rebalance <other> --cluster-weight
// <id>=0`, keys and all), then `redis-cli --cluster del-node <other> <id>` (the others
// forget it; it is reset), then its process stopped. n is dropped from Nodes, and
// RemoveMaster waits until the remaining nodes agree. It returns rebalance's output.
// n must not be Nodes[0], which both commands go through.
func (c *RedisCluster) RemoveMaster(n *Redis) string {
	c.t.Helper()
	if n == c.Nodes[0] {
		c.t.Fatalf("testutil: RemoveMaster of Nodes[0] (%s): the commands go through it", n.Addr())
	}
	cl := redis.NewClient(&redis.Options{Addr: n.Addr()})
	id, err := cl.ClusterMyID(context.Background()).Result()
	cl.Close()
	if err != nil {
		c.t.Fatalf("testutil: CLUSTER MYID on %s: %v", n.Addr(), err)
	}
	args := []string{"--cluster", "rebalance", c.Nodes[0].Addr(), "--cluster-weight", id + "=0"}
	out, err := c.cli(5*time.Minute, args...)
	if err != nil {
		c.t.Fatalf("testutil: redis-cli %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	del := []string{"--cluster", "del-node", c.Nodes[0].Addr(), id}
	if dout, err := c.cli(time.Minute, del...); err != nil {
		c.t.Fatalf("testutil: redis-cli %s: %v\n%s", strings.Join(del, " "), err, dout)
	}
	n.Stop()
	for i, m := range c.Nodes {
		if m == n {
			c.Nodes = append(c.Nodes[:i:i], c.Nodes[i+1:]...)
			break
		}
	}
	c.waitAgree(30 * time.Second)
	return string(out)
}
