package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// Recurring schedules (storeapi.Schedules): three hashes of the cluster, in its hash
// tag, so every call touches one slot:
//
//	P:{C}:schedules       HASH  id -> "<gen>:<updated ms>:<definition>"
//	P:{C}:schedules:gen   HASH  id -> last generation (never deleted)
//	P:{C}:schedules:plan  HASH  id -> "<gen>:<plan>"

func (s *Store) schedKeys() (defs, gens, plans string) {
	base := fmt.Sprintf("%s:{%s}:schedules", s.opt.Prefix, s.opt.Cluster)
	return base, base + ":gen", base + ":plan"
}

var (
	schedulePutScript    = newScript("schedule_put", "schedule_put")
	scheduleDeleteScript = newScript("schedule_delete", "schedule_delete")
	schedulePlanScript   = newScript("schedule_plan", "schedule_plan")
)

// PutSchedule implements storeapi.Schedules.
func (s *Store) PutSchedule(ctx context.Context, id string, def []byte, now int64) (int64, error) {
	if id == "" || len(def) == 0 {
		return 0, fmt.Errorf("%w: schedule id and definition must not be empty", ErrInvalid)
	}
	defs, gens, _ := s.schedKeys()
	gen, err := s.eval(ctx, schedulePutScript, []string{defs, gens}, id, now, def).Int64()
	if err != nil {
		return 0, fmt.Errorf("scheduler: put schedule %s: %w", id, err)
	}
	return gen, nil
}

// GetSchedule implements storeapi.Schedules.
func (s *Store) GetSchedule(ctx context.Context, id string) (storeapi.ScheduleRecord, error) {
	defs, _, plans := s.schedKeys()
	var d, p *redis.StringCmd
	// One slot ({cluster}), so one call of add queues both.
	if err := s.pipelined(ctx, "get schedule", 1, func(int) string { return defs }, func(pipe redis.Pipeliner, _ int) {
		d, p = pipe.HGet(ctx, defs, id), pipe.HGet(ctx, plans, id)
	}); err != nil {
		return storeapi.ScheduleRecord{}, fmt.Errorf("scheduler: get schedule %s: %w", id, redisErr(err))
	}
	if d.Err() != nil {
		return storeapi.ScheduleRecord{}, fmt.Errorf("schedule %s: %w", id, ErrNotFound)
	}
	return scheduleRecord(id, d.Val(), p.Val())
}

// ListSchedules implements storeapi.Schedules.
func (s *Store) ListSchedules(ctx context.Context) ([]storeapi.ScheduleRecord, error) {
	defs, _, plans := s.schedKeys()
	var d, p *redis.MapStringStringCmd
	// One slot ({cluster}), so one call of add queues both.
	if err := s.pipelined(ctx, "list schedules", 1, func(int) string { return defs }, func(pipe redis.Pipeliner, _ int) {
		d, p = pipe.HGetAll(ctx, defs), pipe.HGetAll(ctx, plans)
	}); err != nil {
		return nil, fmt.Errorf("scheduler: list schedules: %w", redisErr(err))
	}
	out := make([]storeapi.ScheduleRecord, 0, len(d.Val()))
	for id, v := range d.Val() {
		rec, err := scheduleRecord(id, v, p.Val()[id])
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// DeleteSchedule implements storeapi.Schedules.
func (s *Store) DeleteSchedule(ctx context.Context, id string) (storeapi.ScheduleRecord, error) {
	defs, _, plans := s.schedKeys()
	res, err := s.eval(ctx, scheduleDeleteScript, []string{defs, plans}, id).Slice()
	if errors.Is(err, redis.Nil) {
		return storeapi.ScheduleRecord{}, fmt.Errorf("schedule %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return storeapi.ScheduleRecord{}, fmt.Errorf("scheduler: delete schedule %s: %w", id, err)
	}
	def, _ := res[0].(string)
	plan := ""
	if len(res) > 1 {
		plan, _ = res[1].(string)
	}
	return scheduleRecord(id, def, plan)
}

// SaveSchedulePlan implements storeapi.Schedules.
func (s *Store) SaveSchedulePlan(ctx context.Context, id string, gen int64, plan []byte) (bool, error) {
	defs, _, plans := s.schedKeys()
	n, err := s.eval(ctx, schedulePlanScript, []string{defs, plans}, id, gen, plan).Int64()
	if err != nil {
		return false, fmt.Errorf("scheduler: save schedule plan %s: %w", id, err)
	}
	return n == 1, nil
}

// scheduleRecord decodes the stored values of id ("" plan: none).
func scheduleRecord(id, def, plan string) (storeapi.ScheduleRecord, error) {
	rec := storeapi.ScheduleRecord{ID: id}
	parts := strings.SplitN(def, ":", 3)
	var err1, err2 error
	if len(parts) == 3 {
		rec.Gen, err1 = strconv.ParseInt(parts[0], 10, 64)
		rec.Updated, err2 = strconv.ParseInt(parts[1], 10, 64)
		rec.Def = []byte(parts[2])
	}
	if len(parts) != 3 || err1 != nil || err2 != nil {
		return rec, fmt.Errorf("scheduler: schedule %s: stored definition unreadable", id)
	}
	if plan != "" {
		gen, rest, ok := strings.Cut(plan, ":")
		g, err := strconv.ParseInt(gen, 10, 64)
		if !ok || err != nil {
			return rec, fmt.Errorf("scheduler: schedule %s: stored plan unreadable", id)
		}
		rec.PlanGen, rec.Plan = g, []byte(rest)
	}
	return rec, nil
}
