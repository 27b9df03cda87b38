package memstore

import (
	"context"

	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// ClaimMany implements storeapi.Store: Claim for each request in turn, with its byte
// budget (an Idempotent one that ran already answers its messages again).
func (s *Store) ClaimMany(ctx context.Context, reqs []storeapi.ClaimRequest) []storeapi.ClaimResult {
	out := make([]storeapi.ClaimResult, len(reqs))
	for i, r := range reqs {
		out[i] = s.claim(ctx, r)
	}
	return out
}
