package scheduler

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Intake: messages coming in (from ingress or the admin API) are parked, buried or
// cancelled here, each counted once by its outcome, and pumps are woken by the wake
// rule. app only converts its inputs and calls these.

// Incoming is one message (or cancel record) handed to Accept.
type Incoming struct {
	// Env is the message; for a cancel record only its Route is read.
	Env *envelope.Envelope
	// Invalid, when not "", is why the message is invalid (the metric reason): it is
	// buried in the dead letters, or delivered at once when Deliver is set.
	Invalid string
	// Deliver: an invalid message is delivered at once rather than buried (the route's
	// on_invalid: deliver).
	Deliver bool
	// CancelID, when not "", makes this a cancel record for that id on Env.Route.
	CancelID string
	// Replace: a valid message replaces the message with its id on its route
	// (x-delay-replace; see Replace).
	Replace bool
}

// Accept makes a batch durable in the store, leaving items and their envelopes
// unchanged (a batch may be handed again after a failure). It returns an error (so the source
// acknowledges nothing and redelivers) when any part could not be stored. Every item is
// counted once by its outcome: parked, dead-lettered (and invalid), duplicate (with the
// state its id was already in), replaced, or cancelled; a replay of a batch stored before
// counts its items as duplicates, never as parked or dead-lettered again — except its
// replaces, which replace (and count) again: a replace cannot tell its replay from a
// new one (docs/CONTRACT.md "Replace").
func (s *Scheduler) Accept(ctx context.Context, items []Incoming) error {
	now := clock.NowMs(s.clk)
	var park, bury []*envelope.Envelope
	var parkInvalid, buryInvalid []string // metric reason per item, "" for valid ones
	var cancels, replaces []*envelope.Envelope
	for _, it := range items {
		switch {
		case it.CancelID != "":
			cancels = append(cancels, &envelope.Envelope{ID: it.CancelID, Route: it.Env.Route})
		case it.Invalid != "":
			if it.Deliver {
				e := *it.Env // a copy: Accept leaves its input as it was (ingress.Handler)
				e.DueAt = now
				park, parkInvalid = append(park, &e), append(parkInvalid, it.Invalid)
			} else {
				bury, buryInvalid = append(bury, it.Env), append(buryInvalid, it.Invalid)
			}
		case it.Replace:
			replaces = append(replaces, it.Env)
		default:
			park, parkInvalid = append(park, it.Env), append(parkInvalid, "")
		}
	}
	if _, err := s.Park(ctx, park, parkInvalid); err != nil {
		return fmt.Errorf("park: %w", err)
	}
	// After the plain parks: a replace in the same batch as its message replaces it.
	if _, err := s.Replace(ctx, replaces); err != nil {
		return fmt.Errorf("replace: %w", err)
	}
	if err := s.bury(ctx, bury, buryInvalid, now); err != nil {
		return fmt.Errorf("dead-letter invalid input: %w", err)
	}
	for _, c := range cancels {
		// A cancel record cancels only a message of its own route, and leaves a
		// tombstone when it overtakes its message.
		_, err := s.Cancel(ctx, c.ID, storeapi.CancelOptions{Route: c.Route, Tombstone: true})
		if errors.Is(err, storeapi.ErrOtherRoute) {
			s.log.Info("x-delay-cancel ignored: the id names a message of another route", "route", c.Route, "id", c.ID, "err", err)
			continue
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Park parks envs and counts each outcome once: Parked (with its requested delay, and
// Invalid for an invalid message delivered at once, invalid[i] naming the reason; invalid
// may be nil) or Duplicate with the state the id was already in. Results of a partly
// failed call are counted too (those messages are stored; the replay reports them as
// duplicates). It wakes the pumps concerned (Wake) and returns the per-message prior
// states of Store.ParkEach.
func (s *Scheduler) Park(ctx context.Context, envs []*envelope.Envelope, invalid []string) ([]storeapi.State, error) {
	if len(envs) == 0 {
		return nil, nil
	}
	toStore, want, g := s.parkClaims(envs)                              // claimed as they are parked where they can be (parkclaim.go)
	out := s.parks.park(ctx, parkBatch{toStore, want}, s.parkClaimEach) // merged with concurrent parks (parkgroup.go)
	prior, minDue, err := out.prior, out.minDue, out.err
	if prior == nil {
		s.credits.settle(g, 0, 0)
		return nil, err
	}
	s.scheduleParkClaimed(toStore, out, g)
	if err != nil {
		s.parkClaimsUnknown(toStore, want, out)
	}
	parked := map[string]int{}
	var dups []int
	for i, st := range prior {
		switch st {
		case storeapi.StateUnknown:
			e := envs[i]
			parked[e.Route]++
			s.obs.RequestedDelay(e.Route, time.Duration(e.DueAt-e.ReceivedAt)*time.Millisecond)
			if invalid != nil && invalid[i] != "" {
				s.obs.Invalid(e.Route, invalid[i])
			}
		case storeapi.StateNotStored:
		default:
			dups = append(dups, i)
		}
	}
	for route, n := range parked {
		s.obs.Parked(route, n)
	}
	s.duplicates(ctx, envs, prior, dups)
	s.Wake(ctx, minDue)
	return prior, err
}

// Replace stores envs, each replacing the message with its id on its route
// (storeapi.Intake.ReplaceEach), and counts each outcome once: parked (Parked, with
// its requested delay), replaced (Replaced, with its requested delay, and OnReplaced
// for the replaced receipts) or refused (Duplicate, with the state its id was in). It
// wakes the pumps concerned and returns the per-message results.
func (s *Scheduler) Replace(ctx context.Context, envs []*envelope.Envelope) ([]storeapi.ReplaceResult, error) {
	if len(envs) == 0 {
		return nil, nil
	}
	res, minDue, err := s.store.ReplaceEach(ctx, envs)
	if res == nil {
		return nil, err
	}
	parked, replaced := map[string]int{}, map[string][]string{}
	prior := make([]storeapi.State, len(res))
	var dups []int
	var inflight []string
	for i, r := range res {
		e := envs[i]
		prior[i] = r.Prior
		switch r.Outcome {
		case storeapi.ReplaceParked:
			parked[e.Route]++
		case storeapi.ReplaceReplaced:
			replaced[e.Route] = append(replaced[e.Route], e.ID)
			if r.Prior == storeapi.StateInflight {
				inflight = append(inflight, e.ID)
			}
		case storeapi.ReplaceRefused:
			dups = append(dups, i)
			continue
		default:
			continue // not stored: the batch is handed again
		}
		s.obs.RequestedDelay(e.Route, time.Duration(e.DueAt-e.ReceivedAt)*time.Millisecond)
	}
	for route, n := range parked {
		s.obs.Parked(route, n)
	}
	for route, ids := range replaced {
		s.obs.Replaced(route, len(ids))
		if s.opt.OnReplaced != nil {
			s.opt.OnReplaced(route, ids)
		}
	}
	s.duplicates(ctx, envs, prior, dups)
	s.Wake(ctx, minDue)
	s.releaseReplaced(ctx, inflight)
	return res, err
}

// releaseReplaced makes the old versions of ids, replaced while in flight, give way to
// their successors if they have not fired yet: the instance holding one in its wheel
// (claimed up to the lookahead before due) puts it back (ReleaseLocal), so the old
// version is not published and the successor becomes pending at once. One already
// being published finishes; its ack hands over to the successor.
func (s *Scheduler) releaseReplaced(ctx context.Context, ids []string) {
	for _, id := range ids {
		if s.ReleaseLocal(id) {
			continue
		}
		if err := s.BroadcastCancel(ctx, id); err != nil {
			s.log.Warn("broadcast the release of a replaced in-flight message (its old version may still be published)", "id", id, "err", err)
		}
	}
}

// bury stores invalid messages in the dead letters and counts only the ones buried now
// (Invalid with reasons[i], DeadLettered) and copies only those to the dead-letter
// target (OnDead); ids already known count as duplicates, so a replayed batch neither
// counts nor publishes its dead letters twice.
func (s *Scheduler) bury(ctx context.Context, envs []*envelope.Envelope, reasons []string, now int64) error {
	if len(envs) == 0 {
		return nil
	}
	prior, err := s.store.Bury(ctx, envs, now)
	if prior == nil {
		return err
	}
	var buried []*envelope.Envelope
	var dups []int
	for i, st := range prior {
		if st != storeapi.StateUnknown {
			dups = append(dups, i)
			continue
		}
		buried = append(buried, envs[i])
		s.obs.Invalid(envs[i].Route, reasons[i])
	}
	byRoute := map[string]int{}
	for _, e := range buried {
		byRoute[e.Route]++
	}
	for route, n := range byRoute {
		s.obs.DeadLettered(route, n)
	}
	s.duplicates(ctx, envs, prior, dups)
	if len(buried) > 0 && s.opt.OnDead != nil {
		s.opt.OnDead(buried)
	}
	return err
}

// duplicates counts the refused messages envs[dups[...]] by route and reason (the state
// their id was in) and logs one info line per batch when any of them differs in content
// from the message stored under its id: a producer reusing ids, or a default id that
// collided, rather than a replay. The comparison reads the stored envelopes (pending, in
// flight or dead ones; delivered and cancelled ids have none left, so those are only
// counted) and compares their encoded bytes with the per-delivery fields cleared:
// receive and due time, attempt and dead-letter reason (a replayed AMQP message gets a
// new receive time, and with it a new due time).
func (s *Scheduler) duplicates(ctx context.Context, envs []*envelope.Envelope, prior []storeapi.State, dups []int) {
	if len(dups) == 0 {
		return
	}
	type key struct{ route, reason string }
	counts := map[key]int{}
	var stored []int // indexes into envs whose id still has an envelope
	for _, i := range dups {
		counts[key{envs[i].Route, string(prior[i])}]++
		switch prior[i] {
		case storeapi.StatePending, storeapi.StateInflight, storeapi.StateDead:
			stored = append(stored, i)
		}
	}
	for k, n := range counts {
		s.obs.Duplicate(k.route, k.reason, n)
	}
	if len(stored) == 0 {
		return
	}
	ids := make([]string, len(stored))
	for j, i := range stored {
		ids[j] = envs[i].ID
	}
	have, err := s.store.Envelopes(ctx, ids)
	if err != nil {
		s.log.Debug("read stored envelopes to compare duplicates", "err", err)
		return
	}
	differ, first := 0, -1
	for j, i := range stored {
		if have[j] != nil && !sameContent(have[j], envs[i]) {
			differ++
			if first < 0 {
				first = i
			}
		}
	}
	if differ > 0 {
		e := envs[first]
		s.log.Info("messages refused as duplicates of a known id have different content (ids reused by the producer?)",
			"route", e.Route, "count", differ, "of", len(dups), "id", e.ID, "state", string(prior[first]), "source", e.Source)
	}
}

// sameContent compares two envelopes without their per-delivery fields.
func sameContent(a, b *envelope.Envelope) bool {
	strip := func(e *envelope.Envelope) []byte {
		c := *e
		c.ReceivedAt, c.DueAt, c.FireAt, c.Attempt, c.Reason = 0, 0, 0, 0, ""
		data, err := envelope.Encode(&c)
		if err != nil {
			return nil
		}
		return data
	}
	x, y := strip(a), strip(b)
	return x != nil && bytes.Equal(x, y)
}

// Cancel removes id from the store wherever it is (within opt's route scope) and from
// this instance's wheel; other instances hear of it through the store's cancel channel.
// A message cancelled now (it was pending, in flight or dead) is counted as Cancelled.
func (s *Scheduler) Cancel(ctx context.Context, id string, opt storeapi.CancelOptions) (storeapi.State, error) {
	prior, route, err := s.store.Cancel(ctx, id, clock.NowMs(s.clk), opt)
	if err != nil {
		return prior, fmt.Errorf("cancel %q: %w", id, err)
	}
	switch prior {
	case storeapi.StatePending, storeapi.StateInflight, storeapi.StateDead:
		s.obs.Cancelled(route, 1)
		if s.opt.OnCancelled != nil {
			s.opt.OnCancelled(route, []string{id})
		}
	}
	if prior == storeapi.StateInflight && !s.CancelLocal(id) {
		if err := s.BroadcastCancel(ctx, id); err != nil {
			s.log.Warn("broadcast cancel of an in-flight message", "id", id, "err", err)
		}
	}
	return prior, nil
}

// Wake is the wake rule: it tells local pumps (Notify) and, for messages due soon
// (NeedsBroadcast), other instances' pumps through the store's wake channel that
// something earlier than their next claim was parked. minDue maps shard → earliest due.
// A lost wake-up only delays a message to the pump's safety scan.
func (s *Scheduler) Wake(ctx context.Context, minDue map[int]int64) {
	if len(minDue) == 0 {
		return
	}
	s.Notify(minDue)
	soon := map[int]int64{}
	for shard, due := range minDue {
		if s.NeedsBroadcast(due) {
			soon[shard] = due
		}
	}
	if len(soon) > 0 {
		if err := s.store.PublishWake(ctx, soon); err != nil {
			s.log.Debug("publish wake-up (the safety scan covers it)", "err", err)
		}
	}
}
