package memstore

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Park, bury, claim, ack, retry, recover: as the Redis store's scripts of those names.

// encodeAll encodes envs, refusing the batch (nothing stored) if one has no id or does
// not encode, as the Redis store does.
func encodeAll(envs []*envelope.Envelope) ([][]byte, error) {
	out := make([][]byte, len(envs))
	for i, e := range envs {
		if e == nil || e.ID == "" {
			return nil, fmt.Errorf("%w: envelope %d has no id", storeapi.ErrInvalid, i)
		}
		data, err := envelope.Encode(e)
		if err != nil {
			return nil, fmt.Errorf("memstore: encode envelope %q: %w", e.ID, errors.Join(storeapi.ErrInvalid, err))
		}
		out[i] = data
	}
	return out, nil
}

// doneState is what a done entry says to a message of route: delivered, cancelled (a
// cancel of that route), or "" (not done, or only other routes' tombstones).
func doneState(sh *shard, id, route string) storeapi.State {
	if _, ok := sh.done[id]; !ok {
		return storeapi.StateUnknown
	}
	routes, ok := sh.cancelled[id]
	switch {
	case !ok:
		return storeapi.StateDelivered
	case slices.Contains(routes, route):
		return storeapi.StateCancelled
	}
	return storeapi.StateUnknown
}

// Park is ParkEach with the refusal reasons folded into a bool (true: parked now).
func (s *Store) Park(ctx context.Context, envs []*envelope.Envelope) (parked []bool, minDue map[int]int64, err error) {
	prior, minDue, err := s.ParkEach(ctx, envs)
	if prior == nil {
		return nil, nil, err
	}
	parked = make([]bool, len(envs))
	for i, st := range prior {
		parked[i] = st == storeapi.StateUnknown
	}
	return parked, minDue, err
}

// ParkEach stores envs, each in the shard of its id, due at its DueAt; prior[i] is
// StateUnknown for a message parked now, else the state that refused it (see
// storeapi.Intake.ParkEach). minDue: per shard, the earliest due time parked now.
func (s *Store) ParkEach(ctx context.Context, envs []*envelope.Envelope) (prior []storeapi.State, minDue map[int]int64, err error) {
	prior, _, minDue, err = s.ParkClaimEach(ctx, envs, storeapi.ParkClaim{})
	return prior, minDue, err
}

// ParkClaimEach is ParkEach that claims, as it parks, the new messages claim wants of
// shards claim.Instance holds (storeapi.Intake.ParkClaimEach).
func (s *Store) ParkClaimEach(ctx context.Context, envs []*envelope.Envelope, claim storeapi.ParkClaim) (prior []storeapi.State, claimed []bool, minDue map[int]int64, err error) {
	prior = make([]storeapi.State, len(envs))
	claimed = make([]bool, len(envs))
	minDue = make(map[int]int64)
	if len(envs) == 0 {
		return prior, claimed, minDue, nil
	}
	data, err := encodeAll(envs)
	if err != nil {
		return nil, nil, nil, err
	}
	after, err := s.begin(ctx, OpPark)
	if err != nil {
		for i := range prior {
			prior[i] = storeapi.StateNotStored
		}
		return prior, claimed, minDue, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range envs {
		n := s.ShardOfEnv(e)
		sh := s.shards[n]
		st := doneState(sh, e.ID, e.Route)
		k := ""
		if st == storeapi.StateUnknown {
			st = parkOne(sh, e.ID, e.DueAt, data[i])
			if k = s.keyOf(e); k != "" && st == storeapi.StateUnknown {
				s.oadd(n, e.ID, e.DueAt, k)
			}
		}
		l, leased := claim.Leases[n]
		wanted := leased && k == "" && len(claim.Want) > i && claim.Want[i] && s.ownerNow(sh) == holder(claim.Instance, l.Token)
		if st == storeapi.StateInflight && wanted && sh.inflight[e.ID] == l.LeaseDeadline {
			st = storeapi.StateUnknown // this call ran before (its reply lost) and claimed it then
		}
		prior[i] = st
		if st != storeapi.StateUnknown {
			continue
		}
		if wanted {
			delete(sh.due, e.ID)
			sh.inflight[e.ID] = l.LeaseDeadline
			e.FireAt = e.DueAt
			e.ClaimedFrom = n + 1
			e.ClaimedBytes = int64(len(data[i])) + storeapi.MemOverhead
			claimed[i] = true
			continue
		}
		if old, ok := minDue[n]; !ok || e.DueAt < old {
			minDue[n] = e.DueAt
		}
	}
	if after != nil { // a lost reply: the caller learns nothing of what the call did
		for i := range prior {
			prior[i], claimed[i] = storeapi.StateNotStored, false
		}
		clear(minDue)
	}
	return prior, claimed, minDue, after
}

// parkOne stores one message not refused by done: StateUnknown when parked now.
func parkOne(sh *shard, id string, due int64, data []byte) storeapi.State {
	if _, ok := sh.msg[id]; !ok {
		sh.msg[id] = data
		sh.due[id] = due
		return storeapi.StateUnknown
	}
	if _, ok := sh.inflight[id]; ok {
		return storeapi.StateInflight
	}
	if _, ok := sh.dead[id]; ok {
		return storeapi.StateDead
	}
	return storeapi.StatePending
}

// Bury stores envs straight into the dead letters at now, idempotently like Park:
// prior[i] is StateUnknown when buried now, else the state the id is already in.
func (s *Store) Bury(ctx context.Context, envs []*envelope.Envelope, now int64) (prior []storeapi.State, err error) {
	prior = make([]storeapi.State, len(envs))
	if len(envs) == 0 {
		return prior, nil
	}
	data, err := encodeAll(envs)
	if err != nil {
		return nil, err
	}
	after, err := s.begin(ctx, OpBury)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, e := range envs {
		sh := s.shards[s.ShardOfEnv(e)]
		st := doneState(sh, e.ID, e.Route)
		if st == storeapi.StateUnknown {
			st = stateOf(sh, e.ID)
		}
		if st == storeapi.StateUnknown {
			sh.msg[e.ID] = data[i]
			sh.dead[e.ID] = now
		}
		prior[i] = st
	}
	return prior, after
}

// stateOf is pending, inflight, dead or unknown (done is not looked at).
func stateOf(sh *shard, id string) storeapi.State {
	if _, ok := sh.due[id]; ok {
		return storeapi.StatePending
	}
	if _, ok := sh.inflight[id]; ok {
		return storeapi.StateInflight
	}
	if _, ok := sh.dead[id]; ok {
		return storeapi.StateDead
	}
	return storeapi.StateUnknown
}

// Claim moves up to limit messages of shard due ≤ upTo into inflight (deadline
// leaseDeadline) and returns them in due order with FireAt the later of score and
// DueAt; nextDue is the earliest due time left, -1 if none. ErrFenced unless instance
// holds the shard's lease with token. An envelope that does not decode is moved to the
// dead letters, as the Redis store does.
func (s *Store) Claim(ctx context.Context, shard int, instance string, token int64, upTo, leaseDeadline int64, limit int) (items []*envelope.Envelope, nextDue int64, err error) {
	r := s.claim(ctx, storeapi.ClaimRequest{Shard: shard, Instance: instance, Token: token, UpTo: upTo, LeaseDeadline: leaseDeadline, Limit: limit})
	return r.Items, r.NextDue, r.Err
}

// claim is Claim with ClaimMany's byte budget (storeapi.ClaimRequest.MaxBytes, Alone)
// and its replay of an Idempotent request that ran already (Replayed).
func (s *Store) claim(ctx context.Context, r storeapi.ClaimRequest) storeapi.ClaimResult {
	shard := r.Shard
	sh, err := s.shard(shard)
	if err != nil {
		return storeapi.ClaimResult{Err: err}
	}
	if r.Limit <= 0 {
		return storeapi.ClaimResult{Err: fmt.Errorf("%w: claim limit %d", storeapi.ErrInvalid, r.Limit)}
	}
	after, err := s.begin(ctx, OpClaim)
	if err != nil {
		return storeapi.ClaimResult{Err: err}
	}
	defer s.afterClaim(ctx) // runs after the unlock below
	s.mu.Lock()
	defer s.mu.Unlock()
	want := holder(r.Instance, r.Token)
	if s.ownerNow(sh) != want {
		return storeapi.ClaimResult{Err: fmt.Errorf("%w: shard %d, %s: lease is not held by %s", storeapi.ErrFenced, shard, want, want)}
	}
	if r.Idempotent {
		if again := replayClaim(sh, shard, r.UpTo, r.LeaseDeadline, r.Limit); len(again) > 0 {
			return storeapi.ClaimResult{Items: again, Replayed: true, Err: after}
		}
	}
	upTo, leaseDeadline := r.UpTo, r.LeaseDeadline
	items := []*envelope.Envelope{}
	var used, need int64
	for _, m := range sortedUpTo(sh.due, upTo, r.Limit) {
		raw, ok := sh.msg[m.id]
		size := int64(len(raw)) + storeapi.MemOverhead
		if ok && r.MaxBytes > 0 && used+size > r.MaxBytes && (!r.Alone || len(items) > 0) {
			need = size
			break
		}
		used += size
		delete(sh.due, m.id)
		if !ok {
			continue // an id without an envelope is dropped, as by the claim script
		}
		e, derr := envelope.Decode(raw, m.id)
		if derr != nil {
			sh.dead[m.id] = upTo
			continue
		}
		sh.inflight[m.id] = leaseDeadline
		e.FireAt = max(m.score, e.DueAt)
		e.ClaimedFrom = shard + 1
		e.ClaimedBytes = size
		items = append(items, e)
	}
	nextDue := int64(-1)
	if head := sortedUpTo(sh.due, storeapi.GateBase-1, 1); len(head) > 0 {
		nextDue = head[0].score
	}
	if after != nil {
		return storeapi.ClaimResult{Err: after}
	}
	return storeapi.ClaimResult{Items: items, NextDue: nextDue, Need: need}
}

// replayClaim is a claim sent again whose first run's reply was lost: what that run
// moved to in flight under leaseDeadline, due at upTo (as claim.lua answers).
func replayClaim(sh *shard, shardIdx int, upTo, leaseDeadline int64, limit int) []*envelope.Envelope {
	var again []scored
	for id, d := range sh.inflight {
		if d == leaseDeadline {
			again = append(again, scored{id, d})
		}
	}
	sortScored(again)
	var out []*envelope.Envelope
	for _, m := range again[:min(limit, len(again))] {
		if raw, ok := sh.msg[m.id]; ok {
			if e, err := envelope.Decode(raw, m.id); err == nil {
				e.FireAt = max(upTo, e.DueAt)
				e.ClaimedFrom = shardIdx + 1
				e.ClaimedBytes = int64(len(raw)) + storeapi.MemOverhead
				out = append(out, e)
			}
		}
	}
	return out
}

const maxScore = int64(^uint64(0) >> 1)

// Ack records ids of shard as delivered at now (see storeapi.Delivery.Ack); ids not in flight
// on that shard are ignored.
func (s *Store) Ack(ctx context.Context, shard int, ids []string, now int64) error {
	if _, err := s.shard(shard); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	return s.ack(ctx, map[int][]string{shard: ids}, now)
}

// AckMany is Ack for ids of any shards.
func (s *Store) AckMany(ctx context.Context, ids []string, now int64) error {
	if len(ids) == 0 {
		return nil
	}
	byShard := make(map[int][]string)
	for _, id := range ids {
		n := s.ShardOf(id)
		byShard[n] = append(byShard[n], id)
	}
	return s.ack(ctx, byShard, now)
}

// AckEnvelopes is AckMany for the ids of envs, each in its shard (ShardOfEnv).
func (s *Store) AckEnvelopes(ctx context.Context, envs []*envelope.Envelope, now int64) error {
	if len(envs) == 0 {
		return nil
	}
	byShard := make(map[int][]string)
	for _, e := range envs {
		n := s.ShardOfEnv(e)
		byShard[n] = append(byShard[n], e.ID)
	}
	return s.ack(ctx, byShard, now)
}

func (s *Store) ack(ctx context.Context, byShard map[int][]string, now int64) error {
	after, err := s.begin(ctx, OpAck)
	if err != nil {
		return err
	}
	s.mu.Lock()
	for n, part := range byShard {
		for start := 0; start < len(part); start += maxPerCall {
			s.ackCall(n, part[start:min(start+maxPerCall, len(part))], now)
		}
	}
	woke := s.takeWake()
	s.mu.Unlock()
	s.wakeUp(ctx, woke)
	return after
}

// ackCall is one ack script call.
func (s *Store) ackCall(n int, ids []string, now int64) {
	sh := s.shards[n]
	remember, trimBefore, trimLimit := s.trimArgs(now, len(ids))
	for _, id := range ids {
		if _, ok := sh.inflight[id]; !ok {
			continue
		}
		delete(sh.inflight, id)
		delete(sh.msg, id)
		if promote(sh, id) {
			continue // its successor is pending now (its key's head): not remembered as delivered
		}
		s.ogone(n, id)
		delete(sh.cancelled, id)
		if remember {
			sh.done[id] = doneSecond(now)
		}
	}
	trim(sh, trimBefore, trimLimit)
}

// Retry puts failed in-flight messages of shard back to pending or into the dead
// letters (see storeapi.RetryItem); ids no longer in flight are ignored.
func (s *Store) Retry(ctx context.Context, shard int, items []storeapi.RetryItem, now int64) error {
	return s.RetryMany(ctx, map[int][]storeapi.RetryItem{shard: items}, now)
}

// RetryMany is Retry for items of any shards.
func (s *Store) RetryMany(ctx context.Context, byShard map[int][]storeapi.RetryItem, now int64) error {
	type enc struct {
		n    int
		sh   *shard
		it   storeapi.RetryItem
		data []byte
	}
	var all []enc
	for n, items := range byShard {
		sh, err := s.shard(n)
		if err != nil {
			return err
		}
		for i, it := range items {
			if it.Env == nil {
				return fmt.Errorf("%w: retry item %d has no envelope", storeapi.ErrInvalid, i)
			}
			data, err := envelope.Encode(it.Env)
			if err != nil {
				return fmt.Errorf("memstore: encode envelope %q: %w", it.Env.ID, errors.Join(storeapi.ErrInvalid, err))
			}
			all = append(all, enc{n, sh, it, data})
		}
	}
	if len(all) == 0 {
		return nil
	}
	after, err := s.begin(ctx, OpRetry)
	if err != nil {
		return err
	}
	s.mu.Lock()
	for _, e := range all {
		id := e.it.Env.ID
		if _, ok := e.sh.inflight[id]; !ok {
			continue
		}
		delete(e.sh.inflight, id)
		if promote(e.sh, id) {
			s.oclaimed(e.n, id) // its successor keeps its key's head
			continue            // not retried: its successor replaces it
		}
		e.sh.msg[id] = e.data
		if e.it.Dead {
			e.sh.dead[id] = now
			s.ogone(e.n, id) // a dead letter unblocks its key
		} else {
			e.sh.due[id] = e.it.Due
			s.oclaimed(e.n, id)
		}
	}
	woke := s.takeWake()
	s.mu.Unlock()
	s.wakeUp(ctx, woke)
	return after
}

// Recover moves up to limit in-flight messages of shard with deadline ≤ now back to
// pending at now; more reports that expired ones remain.
func (s *Store) Recover(ctx context.Context, shard int, now int64, limit int) (moved int, more bool, err error) {
	return s.recoverInflight(ctx, shard, now, limit, now)
}

// RecoverAll is Recover whatever the deadlines.
func (s *Store) RecoverAll(ctx context.Context, shard int, now int64, limit int) (moved int, more bool, err error) {
	return s.recoverInflight(ctx, shard, now, limit, maxScore)
}

func (s *Store) recoverInflight(ctx context.Context, shard int, now int64, limit int, cutoff int64) (int, bool, error) {
	sh, err := s.shard(shard)
	if err != nil {
		return 0, false, err
	}
	if limit <= 0 {
		return 0, false, fmt.Errorf("%w: recover limit %d", storeapi.ErrInvalid, limit)
	}
	after, err := s.begin(ctx, OpRecover)
	if err != nil {
		return 0, false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ms := sortedUpTo(sh.inflight, cutoff, limit)
	for _, m := range ms {
		delete(sh.inflight, m.id)
		if !promote(sh, m.id) {
			sh.due[m.id] = now
		}
		s.oclaimed(shard, m.id)
	}
	more := len(sortedUpTo(sh.inflight, cutoff, 1)) > 0
	if after != nil {
		return 0, false, after
	}
	return len(ms), more, nil
}
