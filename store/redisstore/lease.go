package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Shard leases and membership. A shard is worked by the instance holding its lease: the
// owner key "instance|token" with a TTL. Every acquisition from free takes a new token
// from the shard's fence counter, so tokens only grow; Claim checks the owner key
// against the caller's token inside the same script, which is what keeps an instance
// that stalled past its TTL (GC pause, partition) from claiming after another took over.

// Time is Redis's clock (TIME): the reference each instance's clock is measured
// against at every ownership round (docs/HA.md "One clock"). On a Redis Cluster it is
// the clock of whichever master go-redis asks.
func (s *Store) Time(ctx context.Context) (time.Time, error) {
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return time.Time{}, fmt.Errorf("scheduler: time: %w", redisErr(err))
	}
	return t, nil
}

// AcquireLease takes the lease of shard for instance for ttl if it is free, and returns
// the fencing token to present to Claim; 0 means another instance holds it. If instance
// already holds it (e.g. it restarted under the same name) the TTL is renewed and the
// same token returned.
func (s *Store) AcquireLease(ctx context.Context, shard int, instance string, ttl time.Duration) (int64, error) {
	k, err := s.shardKeys(shard)
	if err != nil {
		return 0, err
	}
	if err := storeapi.CheckInstance(instance); err != nil {
		return 0, err
	}
	ms, err := storeapi.LeaseTTLMs(ttl)
	if err != nil {
		return 0, err
	}
	tok, err := s.eval(ctx, s.leaseAcquire, []string{k.owner, k.fence}, instance, ms).Int64()
	if err != nil {
		return 0, fmt.Errorf("scheduler: acquire lease of shard %d: %w", shard, err)
	}
	return tok, nil
}

// AcquireLeases is AcquireLease for many shards in one pipelined round trip: tokens[i]
// is the token for shards[i], 0 where another instance holds it. On error the results
// are not meaningful (some leases may have been taken: they expire after ttl unless
// renewed).
func (s *Store) AcquireLeases(ctx context.Context, shards []int, instance string, ttl time.Duration) ([]int64, error) {
	if err := storeapi.CheckInstance(instance); err != nil {
		return nil, err
	}
	ms, err := storeapi.LeaseTTLMs(ttl)
	if err != nil {
		return nil, err
	}
	calls := make([]call, len(shards))
	for i, sh := range shards {
		k, err := s.shardKeys(sh)
		if err != nil {
			return nil, err
		}
		calls[i] = call{sc: s.leaseAcquire, keys: []string{k.owner, k.fence}, args: []any{instance, ms}}
	}
	tokens := make([]int64, len(shards))
	cmds, err := s.evalPipelined(ctx, calls, false)
	if err != nil {
		return tokens, fmt.Errorf("scheduler: acquire leases: %w", err)
	}
	for i, c := range cmds {
		tokens[i], _ = c.Int64()
	}
	return tokens, nil
}

// RenewLease extends the lease for ttl if instance still holds it with token. false
// means the lease was lost: stop working the shard (claims would fail with ErrFenced).
func (s *Store) RenewLease(ctx context.Context, shard int, instance string, token int64, ttl time.Duration) (bool, error) {
	k, err := s.shardKeys(shard)
	if err != nil {
		return false, err
	}
	ms, err := storeapi.LeaseTTLMs(ttl)
	if err != nil {
		return false, err
	}
	n, err := s.eval(ctx, s.leaseRenew, []string{k.owner}, OwnerValue(instance, token), ms).Int64()
	if err != nil {
		return false, fmt.Errorf("scheduler: renew lease of shard %d: %w", shard, err)
	}
	return n == 1, nil
}

// RenewLeases renews many leases of instance in one pipelined round trip and reports,
// per lease, whether it is still held. On error the results are not meaningful.
func (s *Store) RenewLeases(ctx context.Context, instance string, leases []Lease, ttl time.Duration) ([]bool, error) {
	ms, err := storeapi.LeaseTTLMs(ttl)
	if err != nil {
		return nil, err
	}
	calls := make([]call, len(leases))
	for i, l := range leases {
		k, err := s.shardKeys(l.Shard)
		if err != nil {
			return nil, err
		}
		calls[i] = call{sc: s.leaseRenew, keys: []string{k.owner}, args: []any{OwnerValue(instance, l.Token), ms}}
	}
	held := make([]bool, len(leases))
	cmds, err := s.evalPipelined(ctx, calls, false)
	if err != nil {
		return held, err
	}
	for i, c := range cmds {
		held[i] = c.Val() == int64(1)
	}
	return held, nil
}

// ReleaseLease gives the lease up if instance still holds it with token (a late release
// never frees a lease someone else has taken since).
func (s *Store) ReleaseLease(ctx context.Context, shard int, instance string, token int64) error {
	k, err := s.shardKeys(shard)
	if err != nil {
		return err
	}
	if err := s.eval(ctx, s.leaseRelease, []string{k.owner}, OwnerValue(instance, token)).Err(); err != nil {
		return fmt.Errorf("scheduler: release lease of shard %d: %w", shard, err)
	}
	return nil
}

// Heartbeat records that instance is alive at now (unix ms) in the members set
// (membership.Redis, which Kafka ingress reads too).
func (s *Store) Heartbeat(ctx context.Context, instance string, now int64) error {
	if err := storeapi.CheckInstance(instance); err != nil {
		return err
	}
	if err := s.members.Heartbeat(ctx, instance, now); err != nil {
		return fmt.Errorf("scheduler: %w", redisErr(err))
	}
	return nil
}

// Members returns, sorted by name, the instances whose last heartbeat is within maxAge
// of now (see LiveMembers).
func (s *Store) Members(ctx context.Context, now int64, maxAge time.Duration) ([]string, error) {
	live, err := s.LiveMembers(ctx, now, maxAge)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(live))
	for i, m := range live {
		out[i] = m.Name
	}
	return out, nil
}

// LiveMembers is Members with each member's last heartbeat, so that a caller can tell
// when the next one ages out (Heartbeat + maxAge): a member that stopped heartbeating
// is noticed at that moment rather than at the caller's next periodic look.
func (s *Store) LiveMembers(ctx context.Context, now int64, maxAge time.Duration) ([]Member, error) {
	members, err := s.members.Live(ctx, now, maxAge)
	if err != nil {
		return nil, fmt.Errorf("scheduler: %w", redisErr(err))
	}
	out := make([]Member, len(members))
	for i, m := range members {
		out[i] = Member{Name: m.Name, Heartbeat: m.Heartbeat}
	}
	return out, nil
}

// Leave removes instance from the members at once (graceful shutdown), so the others
// take its shards over without waiting for its heartbeat to age out.
func (s *Store) Leave(ctx context.Context, instance string) error {
	if err := s.members.Leave(ctx, instance); err != nil {
		return fmt.Errorf("scheduler: %w", redisErr(err))
	}
	return nil
}
