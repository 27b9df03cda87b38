package app

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/scheduler"
	"github.com/delaybridge/delay-bridge/scheduler/store"
)

// parkEnvs parks envs and counts each outcome once: Parked (with its requested delay,
// and Invalid for an invalid message delivered at once under `on_invalid: deliver`,
// invalid[i] naming the reason) or Duplicate with the state the id was already in.
// Results of a partly failed call are counted too (those messages are stored; the
// replay reports them as duplicates). It returns the per-message prior states of
// Store.ParkEach.
func (b *Bridge) parkEnvs(ctx context.Context, shardStore *store.Store, sched *scheduler.Scheduler, envs []*envelope.Envelope, invalid []string) ([]store.State, error) {
	if len(envs) == 0 {
		return nil, nil
	}
	prior, minDue, err := shardStore.ParkEach(ctx, envs)
	if prior == nil {
		return nil, err
	}
	parked := map[string]int{}
	var dups []int
	for i, st := range prior {
		switch st {
		case store.StateUnknown:
			e := envs[i]
			parked[e.Route]++
			b.obs.RequestedDelay(e.Route, time.Duration(e.DueAt-e.ReceivedAt)*time.Millisecond)
			if invalid != nil && invalid[i] != "" {
				b.obs.Invalid(e.Route, invalid[i])
			}
		case store.StateNotStored:
		default:
			dups = append(dups, i)
		}
	}
	for route, n := range parked {
		b.obs.Parked(route, n)
	}
	b.duplicates(ctx, shardStore, envs, prior, dups)
	b.wake(ctx, sched, shardStore, minDue)
	return prior, err
}

// buryEnvs stores invalid messages in the dead letters and counts only the ones buried
// now (Invalid with reasons[i], DeadLettered) and copies only those to the dead-letter
// target; ids already known count as duplicates, so a replayed batch neither counts
// nor publishes its dead letters twice.
func (b *Bridge) buryEnvs(ctx context.Context, shardStore *store.Store, envs []*envelope.Envelope, reasons []string, now int64) error {
	if len(envs) == 0 {
		return nil
	}
	prior, err := shardStore.Bury(ctx, envs, now)
	if prior == nil {
		return err
	}
	var buried []*envelope.Envelope
	var dups []int
	for i, st := range prior {
		if st != store.StateUnknown {
			dups = append(dups, i)
			continue
		}
		buried = append(buried, envs[i])
		b.obs.Invalid(envs[i].Route, reasons[i])
	}
	byRoute := map[string]int{}
	for _, e := range buried {
		byRoute[e.Route]++
	}
	for route, n := range byRoute {
		b.obs.DeadLettered(route, n)
	}
	b.duplicates(ctx, shardStore, envs, prior, dups)
	b.publishDead(buried)
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
func (b *Bridge) duplicates(ctx context.Context, shardStore *store.Store, envs []*envelope.Envelope, prior []store.State, dups []int) {
	if len(dups) == 0 {
		return
	}
	type key struct{ route, reason string }
	counts := map[key]int{}
	var stored []int // indexes into envs whose id still has an envelope
	for _, i := range dups {
		counts[key{envs[i].Route, string(prior[i])}]++
		switch prior[i] {
		case store.StatePending, store.StateInflight, store.StateDead:
			stored = append(stored, i)
		}
	}
	for k, n := range counts {
		b.obs.Duplicate(k.route, k.reason, n)
	}
	if len(stored) == 0 {
		return
	}
	ids := make([]string, len(stored))
	for j, i := range stored {
		ids[j] = envs[i].ID
	}
	have, err := shardStore.Envelopes(ctx, ids)
	if err != nil {
		b.log.Debug("read stored envelopes to compare duplicates", "err", err)
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
		b.log.Info("messages refused as duplicates of a known id have different content (ids reused by the producer?)",
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

// cancel removes id from Redis wherever it is (within opt's route scope) and from this
// instance's wheel; other instances hear of it through the wake channel. A message
// cancelled now (it was pending, in flight or dead) is counted as Cancelled.
func (b *Bridge) cancel(ctx context.Context, id string, opt store.CancelOptions) (store.State, error) {
	b.mu.Lock()
	shardStore, sched := b.shardStore, b.sched
	b.mu.Unlock()
	prior, route, err := shardStore.Cancel(ctx, id, clock.NowMs(b.clk), opt)
	if err != nil {
		return prior, fmt.Errorf("cancel %q: %w", id, err)
	}
	switch prior {
	case store.StatePending, store.StateInflight, store.StateDead:
		b.obs.Cancelled(route, 1)
	}
	if prior == store.StateInflight {
		if !sched.CancelLocal(id) {
			if err := sched.BroadcastCancel(ctx, id); err != nil {
				b.log.Warn("broadcast cancel of an in-flight message", "id", id, "err", err)
			}
		}
	}
	return prior, nil
}
