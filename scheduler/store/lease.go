package store

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Shard leases and membership. A shard is worked by the instance holding its lease: the
// owner key "instance|token" with a TTL. Every acquisition from free takes a new token
// from the shard's fence counter, so tokens only grow; Claim checks the owner key
// against the caller's token inside the same script, which is what keeps an instance
// that stalled past its TTL (GC pause, partition) from claiming after another took over.

// CheckInstance refuses an instance name no lease can hold (empty, or with '|', which
// separates it from the token in the owner value). Both stores use it.
func CheckInstance(instance string) error {
	if instance == "" || strings.ContainsRune(instance, '|') {
		return fmt.Errorf("%w: instance name %q must be non-empty without '|'", ErrInvalid, instance)
	}
	return nil
}

// LeaseTTLMs is ttl in whole milliseconds, refusing one under 1 ms. Both stores use it.
func LeaseTTLMs(ttl time.Duration) (int64, error) {
	ms := ttl.Milliseconds()
	if ms <= 0 {
		return 0, fmt.Errorf("%w: lease TTL %s must be at least 1ms", ErrInvalid, ttl)
	}
	return ms, nil
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
	if err := CheckInstance(instance); err != nil {
		return 0, err
	}
	ms, err := LeaseTTLMs(ttl)
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
	if err := CheckInstance(instance); err != nil {
		return nil, err
	}
	ms, err := LeaseTTLMs(ttl)
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
	ms, err := LeaseTTLMs(ttl)
	if err != nil {
		return false, err
	}
	n, err := s.eval(ctx, s.leaseRenew, []string{k.owner}, OwnerValue(instance, token), ms).Int64()
	if err != nil {
		return false, fmt.Errorf("scheduler: renew lease of shard %d: %w", shard, err)
	}
	return n == 1, nil
}

// Lease names one held shard lease, for RenewLeases.
type Lease struct {
	Shard int
	Token int64
}

// RenewLeases renews many leases of instance in one pipelined round trip and reports,
// per lease, whether it is still held. On error the results are not meaningful.
func (s *Store) RenewLeases(ctx context.Context, instance string, leases []Lease, ttl time.Duration) ([]bool, error) {
	ms, err := LeaseTTLMs(ttl)
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

// Heartbeat records that instance is alive at now (unix ms).
func (s *Store) Heartbeat(ctx context.Context, instance string, now int64) error {
	if err := CheckInstance(instance); err != nil {
		return err
	}
	// With the layout this build writes, so that the others know when every member can
	// read layout 3 (compat.go).
	pipe := s.rdb.TxPipeline()
	pipe.ZAdd(ctx, s.membersKey, redis.Z{Score: float64(now), Member: instance})
	pipe.HSet(ctx, s.layoutsKey, instance, currentLayout)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("scheduler: heartbeat: %w", redisErr(err))
	}
	return nil
}

// Members returns, sorted by name, the instances whose last heartbeat is within maxAge
// of now. Entries ten times older than that are deleted on the way, so instances that
// went away without Leave (a crashed pod with a generated name) do not pile up, while
// one with a lagging clock is not evicted by the next reader.
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

// Member is a live instance and the time of its last heartbeat (unix ms).
type Member struct {
	Name      string
	Heartbeat int64
}

// LiveMembers is Members with each member's last heartbeat, so that a caller can tell
// when the next one ages out (Heartbeat + maxAge): a member that stopped heartbeating
// is noticed at that moment rather than at the caller's next periodic look.
func (s *Store) LiveMembers(ctx context.Context, now int64, maxAge time.Duration) ([]Member, error) {
	age := maxAge.Milliseconds()
	pipe := s.rdb.Pipeline()
	pipe.ZRemRangeByScore(ctx, s.membersKey, "-inf", "("+strconv.FormatInt(now-10*age, 10))
	live := pipe.ZRangeByScoreWithScores(ctx, s.membersKey, &redis.ZRangeBy{Min: strconv.FormatInt(now-age, 10), Max: "+inf"})
	layouts := pipe.HGetAll(ctx, s.layoutsKey)
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("scheduler: members: %w", redisErr(err))
	}
	out := make([]Member, 0, len(live.Val()))
	names := make([]string, 0, len(live.Val()))
	for _, z := range live.Val() {
		name, _ := z.Member.(string)
		out = append(out, Member{Name: name, Heartbeat: int64(z.Score)})
		names = append(names, name)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	s.decideLayout(names, layouts.Val())
	s.pruneLayouts(ctx, names, layouts.Val())
	return out, nil
}

// pruneLayouts forgets the recorded layouts of instances that are no longer live once
// they outnumber the live ones by 16 (crashed pods with generated names); one that
// comes back records its layout again with its next heartbeat.
func (s *Store) pruneLayouts(ctx context.Context, live []string, recorded map[string]string) {
	if len(recorded) <= len(live)+16 {
		return
	}
	isLive := make(map[string]bool, len(live))
	for _, name := range live {
		isLive[name] = true
	}
	var gone []string
	for name := range recorded {
		if !isLive[name] {
			gone = append(gone, name)
		}
	}
	// Best effort: a failure leaves them for the next round.
	_ = s.rdb.HDel(ctx, s.layoutsKey, gone...).Err()
}

// Leave removes instance from the members at once (graceful shutdown), so the others
// take its shards over without waiting for its heartbeat to age out.
func (s *Store) Leave(ctx context.Context, instance string) error {
	pipe := s.rdb.TxPipeline()
	pipe.ZRem(ctx, s.membersKey, instance)
	pipe.HDel(ctx, s.layoutsKey, instance)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("scheduler: leave: %w", redisErr(err))
	}
	return nil
}
