package adminapi

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/schedules"
	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Recurring schedules over HTTP (admin.ScheduleBackend): definitions go to the store
// (storeapi.Schedules); the planner (schedules, run by app) parks
// their occurrences. Config-file schedules are read-only here (ErrConflict).

var _ admin.ScheduleBackend = (*Backend)(nil)

// nextSlots is how many next slots GET /v1/schedules/{id} shows (the list shows 1).
const nextSlots = 5

// defOf turns the API's definition into the model's, validated against the routes.
func (b *Backend) defOf(in admin.ScheduleDef) (schedules.Definition, error) {
	d := schedules.Definition{
		ID: in.ID, Route: in.Route, Target: in.Target, Spec: in.Spec, Payload: in.Payload, Headers: in.Headers,
		Key: in.Key, RoutingKey: in.RoutingKey, JitterMs: in.JitterMs, CatchUp: in.CatchUp, CatchUpLimit: in.CatchUpLimit,
		Origin: schedules.OriginAPI,
	}
	for _, f := range []struct {
		name string
		text string
		to   *time.Time
	}{{"start", in.Start, &d.Start}, {"end", in.End, &d.End}} {
		if f.text == "" {
			continue
		}
		t, err := admin.ParseTime(f.text)
		if err != nil {
			return d, admin.Invalid(f.name, "%v", err)
		}
		*f.to = t
	}
	if _, err := d.Validate(); err != nil {
		field, msg, _ := strings.Cut(err.Error(), ": ")
		return d, admin.Invalid(field, "%s", msg)
	}
	rules, ok := b.rules[d.Route]
	if !ok {
		return d, admin.Invalid("route", "no route named %q", d.Route)
	}
	if d.Target != "" && !slices.Contains(rules.AllowTargets, d.Target) {
		return d, admin.Invalid("target", "%q is not on route %s's allow_targets", d.Target, d.Route)
	}
	if len(d.Payload) > b.cfg.Limits.MaxPayloadBytes {
		return d, admin.Invalid("payload", "%d bytes, beyond limits.max_payload_bytes (%d)", len(d.Payload), b.cfg.Limits.MaxPayloadBytes)
	}
	d.Normalize()
	return d, nil
}

// put stores d (a new generation), cancels the occurrences the previous generation
// (old, if any) parked ahead at once — the planner would at its next round; doing it
// here means nothing of the old definition fires after the answer — and tells the
// planner.
func (b *Backend) put(ctx context.Context, st storeapi.Store, d schedules.Definition, old *storeapi.ScheduleRecord) (admin.ScheduleInfo, error) {
	raw, err := d.Encode()
	if err != nil {
		return admin.ScheduleInfo{}, err
	}
	if _, err := st.PutSchedule(ctx, d.ID, raw, clock.NowMs(b.clk)); err != nil {
		return admin.ScheduleInfo{}, storeErr(err)
	}
	if old != nil {
		_, sched, err := b.parts()
		if err == nil {
			err = schedules.CancelParked(ctx, sched, *old)
		}
		if err != nil {
			return admin.ScheduleInfo{}, storeErr(fmt.Errorf("cancel the previous definition's slots (the planner retries): %w", err))
		}
	}
	if p := b.runtime().Planner; p != nil {
		p.Kick()
	}
	return b.GetSchedule(ctx, d.ID)
}

// stored reads one schedule's record and definition.
func (b *Backend) stored(ctx context.Context, st storeapi.Store, id string) (storeapi.ScheduleRecord, schedules.Definition, error) {
	rec, err := st.GetSchedule(ctx, id)
	if err != nil {
		return rec, schedules.Definition{}, storeErr(fmt.Errorf("schedule %q: %w", id, err))
	}
	d, err := schedules.Decode(rec.Def)
	if err != nil {
		return rec, d, fmt.Errorf("schedule %q: stored definition unreadable: %w", id, err)
	}
	return rec, d, nil
}

// CreateSchedule implements admin.ScheduleBackend.
func (b *Backend) CreateSchedule(ctx context.Context, in admin.ScheduleDef) (admin.ScheduleInfo, error) {
	st, _, err := b.parts()
	if err != nil {
		return admin.ScheduleInfo{}, err
	}
	d, err := b.defOf(in)
	if err != nil {
		return admin.ScheduleInfo{}, err
	}
	if _, err := st.GetSchedule(ctx, d.ID); err == nil {
		return admin.ScheduleInfo{}, fmt.Errorf("%w: schedule %q exists (PUT /v1/schedules/%s changes it)", admin.ErrConflict, d.ID, d.ID)
	} else if !errors.Is(err, storeapi.ErrNotFound) {
		return admin.ScheduleInfo{}, storeErr(err)
	}
	return b.put(ctx, st, d, nil)
}

// UpdateSchedule implements admin.ScheduleBackend: a new generation, whose future
// slots replace the old ones (the planner cancels those). The paused flag is kept.
func (b *Backend) UpdateSchedule(ctx context.Context, in admin.ScheduleDef) (admin.ScheduleInfo, error) {
	st, _, err := b.parts()
	if err != nil {
		return admin.ScheduleInfo{}, err
	}
	rec, old, err := b.writable(ctx, st, in.ID)
	if err != nil {
		return admin.ScheduleInfo{}, err
	}
	d, err := b.defOf(in)
	if err != nil {
		return admin.ScheduleInfo{}, err
	}
	d.Paused = old.Paused
	return b.put(ctx, st, d, &rec)
}

// PauseSchedule implements admin.ScheduleBackend: pausing cancels the parked future
// slots and parks nothing until resumed; resuming plans from now (the slots in
// between are not caught up).
func (b *Backend) PauseSchedule(ctx context.Context, id string, paused bool) (admin.ScheduleInfo, error) {
	st, _, err := b.parts()
	if err != nil {
		return admin.ScheduleInfo{}, err
	}
	rec, d, err := b.writable(ctx, st, id)
	if err != nil {
		return admin.ScheduleInfo{}, err
	}
	if d.Paused == paused {
		return b.GetSchedule(ctx, id)
	}
	d.Paused = paused
	return b.put(ctx, st, d, &rec)
}

// DeleteSchedule implements admin.ScheduleBackend: the definition goes and its
// parked future slots are cancelled.
func (b *Backend) DeleteSchedule(ctx context.Context, id string) error {
	st, sched, err := b.parts()
	if err != nil {
		return err
	}
	if _, _, err := b.writable(ctx, st, id); err != nil {
		return err
	}
	rec, err := st.DeleteSchedule(ctx, id)
	if err != nil {
		return storeErr(err)
	}
	return storeErr(schedules.CancelParked(ctx, sched, rec))
}

// writable refuses config-file schedules (they change only with the file).
func (b *Backend) writable(ctx context.Context, st storeapi.Store, id string) (storeapi.ScheduleRecord, schedules.Definition, error) {
	rec, d, err := b.stored(ctx, st, id)
	if err == nil && d.Origin == schedules.OriginConfig {
		err = fmt.Errorf("%w: schedule %q comes from the config file (schedules:); change it there", admin.ErrConflict, id)
	}
	return rec, d, err
}

// GetSchedule implements admin.ScheduleBackend.
func (b *Backend) GetSchedule(ctx context.Context, id string) (admin.ScheduleInfo, error) {
	st, _, err := b.parts()
	if err != nil {
		return admin.ScheduleInfo{}, err
	}
	rec, d, err := b.stored(ctx, st, id)
	if err != nil {
		return admin.ScheduleInfo{}, err
	}
	return b.info(ctx, st, rec, d, nextSlots, true)
}

// ListSchedules implements admin.ScheduleBackend.
func (b *Backend) ListSchedules(ctx context.Context) ([]admin.ScheduleInfo, error) {
	st, _, err := b.parts()
	if err != nil {
		return nil, err
	}
	recs, err := st.ListSchedules(ctx)
	if err != nil {
		return nil, storeErr(err)
	}
	out := make([]admin.ScheduleInfo, 0, len(recs))
	for _, rec := range recs {
		d, err := schedules.Decode(rec.Def)
		if err != nil {
			return nil, fmt.Errorf("schedule %q: stored definition unreadable: %w", rec.ID, err)
		}
		info, err := b.info(ctx, st, rec, d, 1, false)
		if err != nil {
			return nil, err
		}
		out = append(out, info)
	}
	return out, nil
}

// info renders a schedule: its definition, state, next slots and recent outcomes
// (with their messages' states when states is set: one lookup per outcome).
func (b *Backend) info(ctx context.Context, st storeapi.Store, rec storeapi.ScheduleRecord, d schedules.Definition, next int, states bool) (admin.ScheduleInfo, error) {
	info := admin.ScheduleInfo{
		ScheduleDef: admin.ScheduleDef{
			ID: d.ID, Route: d.Route, Target: d.Target, Spec: d.Spec, Payload: d.Payload, Headers: d.Headers,
			Key: d.Key, RoutingKey: d.RoutingKey, JitterMs: d.JitterMs, CatchUp: d.CatchUp, CatchUpLimit: d.CatchUpLimit,
		},
		Origin: d.Origin, Paused: d.Paused, Generation: rec.Gen, UpdatedAt: rec.Updated,
		Next: []admin.Slot{}, Last: []admin.SlotOutcome{},
	}
	if !d.Start.IsZero() {
		info.Start = d.Start.UTC().Format(time.RFC3339Nano)
	}
	if !d.End.IsZero() {
		info.End = d.End.UTC().Format(time.RFC3339Nano)
	}
	sp, err := d.Validate()
	if err != nil {
		return info, fmt.Errorf("schedule %q: %w", d.ID, err)
	}
	now := clock.NowMs(b.clk)
	if d.Paused {
		next = 0 // nothing is published while paused
	}
	for _, s := range d.NextSlots(sp, now, next) {
		info.Next = append(info.Next, admin.Slot{Slot: s, Due: d.Due(s), ID: schedules.OccurrenceID(d.ID, s, rec.Gen)})
	}
	_, routeOK := b.rules[d.Route]
	switch {
	case d.Paused:
		info.State = admin.SchedulePaused
	case !routeOK:
		info.State = admin.ScheduleRouteMissing
	case len(info.Next) == 0:
		info.State = admin.ScheduleEnded
	default:
		info.State = admin.ScheduleActive
	}
	plan, err := schedules.DecodePlan(rec.Plan)
	if err != nil {
		return info, nil // shown without outcomes; the planner logs it
	}
	for _, o := range plan.Last {
		so := admin.SlotOutcome{Slot: admin.Slot{Slot: o.Slot, Due: o.Due, ID: schedules.OccurrenceID(d.ID, o.Slot, o.Gen)}, Outcome: o.Outcome}
		if states && o.Outcome != "missed" && o.Outcome != "no_route" {
			if state, _, _, err := st.Get(ctx, so.ID); err == nil && state != storeapi.StateUnknown {
				so.State = string(state)
			}
		}
		info.Last = append(info.Last, so)
	}
	return info, nil
}
