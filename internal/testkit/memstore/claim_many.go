package memstore

import (
	"context"

	"github.com/delaybridge/delay-bridge/scheduler/storeapi"
)

// ClaimMany implements storeapi.Store: Claim for each request in turn.
func (s *Store) ClaimMany(ctx context.Context, reqs []storeapi.ClaimRequest) []storeapi.ClaimResult {
	out := make([]storeapi.ClaimResult, len(reqs))
	for i, r := range reqs {
		out[i].Items, out[i].NextDue, out[i].Err = s.Claim(ctx, r.Shard, r.Instance, r.Token, r.UpTo, r.LeaseDeadline, r.Limit)
	}
	return out
}
