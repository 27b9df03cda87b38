package memstore

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Shard leases (TTLs on Options.Clock) and membership.

// AcquireLease takes shard's lease for instance for ttl if it is free and returns the
// new fencing token (larger than every earlier one of the shard); 0 if another holds
// it. The holder acquiring again keeps its token, with the TTL renewed.
func (s *Store) AcquireLease(ctx context.Context, shard int, instance string, ttl time.Duration) (int64, error) {
	toks, err := s.AcquireLeases(ctx, []int{shard}, instance, ttl)
	if err != nil {
		return 0, err
	}
	return toks[0], nil
}

// AcquireLeases is AcquireLease for many shards: tokens[i] for shards[i].
func (s *Store) AcquireLeases(ctx context.Context, shards []int, instance string, ttl time.Duration) ([]int64, error) {
	if err := storeapi.CheckInstance(instance); err != nil {
		return nil, err
	}
	if _, err := storeapi.LeaseTTLMs(ttl); err != nil {
		return nil, err
	}
	for _, n := range shards {
		if _, err := s.shard(n); err != nil {
			return nil, err
		}
	}
	after, err := s.begin(ctx, OpLeaseAcquire)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	exp := s.opt.Clock.Now().Add(ttl)
	tokens := make([]int64, len(shards))
	for i, n := range shards {
		sh := s.shards[n]
		cur := s.ownerNow(sh)
		if cur == "" {
			sh.fence++
			sh.owner, sh.ownerExp = holder(instance, sh.fence), exp
			tokens[i] = sh.fence
			continue
		}
		if holder, tok := splitOwner(cur); holder == instance {
			sh.ownerExp = exp
			tokens[i] = tok
		}
	}
	if after != nil {
		return make([]int64, len(shards)), after
	}
	return tokens, nil
}

func splitOwner(v string) (string, int64) {
	i := strings.LastIndexByte(v, '|')
	tok, _ := strconv.ParseInt(v[i+1:], 10, 64)
	return v[:i], tok
}

// RenewLease extends the lease for ttl if instance still holds it with token.
func (s *Store) RenewLease(ctx context.Context, shard int, instance string, token int64, ttl time.Duration) (bool, error) {
	held, err := s.RenewLeases(ctx, instance, []storeapi.Lease{{Shard: shard, Token: token}}, ttl)
	if err != nil {
		return false, err
	}
	return held[0], nil
}

// RenewLeases renews many leases of instance; held[i] says whether leases[i] is held.
func (s *Store) RenewLeases(ctx context.Context, instance string, leases []storeapi.Lease, ttl time.Duration) ([]bool, error) {
	if _, err := storeapi.LeaseTTLMs(ttl); err != nil {
		return nil, err
	}
	for _, l := range leases {
		if _, err := s.shard(l.Shard); err != nil {
			return nil, err
		}
	}
	after, err := s.begin(ctx, OpLeaseRenew)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	exp := s.opt.Clock.Now().Add(ttl)
	held := make([]bool, len(leases))
	for i, l := range leases {
		sh := s.shards[l.Shard]
		if s.ownerNow(sh) == holder(instance, l.Token) {
			sh.ownerExp = exp
			held[i] = true
		}
	}
	if after != nil {
		return make([]bool, len(leases)), after
	}
	return held, nil
}

// ReleaseLease gives shard's lease up if instance still holds it with token.
func (s *Store) ReleaseLease(ctx context.Context, shard int, instance string, token int64) error {
	sh, err := s.shard(shard)
	if err != nil {
		return err
	}
	after, err := s.begin(ctx, OpLeaseRelease)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ownerNow(sh) == holder(instance, token) {
		sh.owner = ""
	}
	return after
}

// Heartbeat records instance as alive at now.
func (s *Store) Heartbeat(ctx context.Context, instance string, now int64) error {
	if err := storeapi.CheckInstance(instance); err != nil {
		return err
	}
	after, err := s.begin(ctx, OpHeartbeat)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.members[instance] = now
	return after
}

// Time is the store's clock (Options.Clock), as the Redis store answers TIME.
func (s *Store) Time(ctx context.Context) (time.Time, error) {
	after, err := s.begin(ctx, OpTime)
	if err != nil {
		return time.Time{}, err
	}
	return s.opt.Clock.Now(), after
}

// Members is LiveMembers' names.
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

// LiveMembers returns, sorted by name, the instances whose last heartbeat is within
// maxAge of now, forgetting those ten times older than that.
func (s *Store) LiveMembers(ctx context.Context, now int64, maxAge time.Duration) ([]storeapi.Member, error) {
	after, err := s.begin(ctx, OpMembers)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	age := maxAge.Milliseconds()
	out := []storeapi.Member{}
	for name, at := range s.members {
		switch {
		case at < now-10*age:
			delete(s.members, name)
		case at >= now-age:
			out = append(out, storeapi.Member{Name: name, Heartbeat: at})
		}
	}
	if after != nil {
		return nil, after
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// Leave removes instance from the members.
func (s *Store) Leave(ctx context.Context, instance string) error {
	after, err := s.begin(ctx, OpLeave)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.members, instance)
	return after
}

// ExpireLease makes shard's lease lapse now, as if its TTL had passed (a test control,
// like deleting the owner key in Redis). The fence counter is kept.
func (s *Store) ExpireLease(shard int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sh, err := s.shard(shard); err == nil {
		sh.owner = ""
	}
}

// StealLeases hands shards' leases to instance for ttl in one step, as if each lease
// had lapsed and instance had acquired it before its holder could renew or acquire it
// again (a test control: ExpireLease then AcquireLeases leaves the old holder a window
// to take the lease back). It returns the new fencing tokens.
func (s *Store) StealLeases(shards []int, instance string, ttl time.Duration) []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	exp := s.opt.Clock.Now().Add(ttl)
	tokens := make([]int64, len(shards))
	for i, n := range shards {
		if sh, err := s.shard(n); err == nil {
			sh.fence++
			sh.owner, sh.ownerExp = holder(instance, sh.fence), exp
			tokens[i] = sh.fence
		}
	}
	return tokens
}

// holder is the owner value of instance holding a lease with token, "instance|token"
// as the Redis store keeps it (storeapi.CheckInstance refuses '|' in instance names).
func holder(instance string, token int64) string {
	return instance + "|" + strconv.FormatInt(token, 10)
}
