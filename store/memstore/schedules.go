package memstore

import (
	"context"
	"fmt"
	"sort"

	"github.com/delaybridge/delay-bridge/store/storeapi"
)

// schedules mirrors the Redis store's three hashes: definitions, generations (never
// deleted) and plans.
type schedules struct {
	defs map[string]storeapi.ScheduleRecord // Plan and PlanGen unused here
	gens map[string]int64
	plan map[string]storeapi.ScheduleRecord // only Plan and PlanGen
}

func (s *Store) schedInit() {
	if s.sched.defs == nil {
		s.sched = schedules{defs: map[string]storeapi.ScheduleRecord{}, gens: map[string]int64{}, plan: map[string]storeapi.ScheduleRecord{}}
	}
}

func (s *Store) schedRecord(id string) (storeapi.ScheduleRecord, bool) {
	rec, ok := s.sched.defs[id]
	if !ok {
		return rec, false
	}
	rec.Def = append([]byte(nil), rec.Def...)
	if p, ok := s.sched.plan[id]; ok {
		rec.Plan, rec.PlanGen = append([]byte(nil), p.Plan...), p.PlanGen
	}
	return rec, true
}

// PutSchedule implements storeapi.Schedules.
func (s *Store) PutSchedule(ctx context.Context, id string, def []byte, now int64) (int64, error) {
	if id == "" || len(def) == 0 {
		return 0, fmt.Errorf("%w: schedule id and definition must not be empty", storeapi.ErrInvalid)
	}
	after, err := s.begin(ctx, OpSchedules)
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.schedInit()
	s.sched.gens[id]++
	gen := s.sched.gens[id]
	s.sched.defs[id] = storeapi.ScheduleRecord{ID: id, Def: append([]byte(nil), def...), Gen: gen, Updated: now}
	return gen, after
}

// GetSchedule implements storeapi.Schedules.
func (s *Store) GetSchedule(ctx context.Context, id string) (storeapi.ScheduleRecord, error) {
	after, err := s.begin(ctx, OpSchedules)
	if err != nil {
		return storeapi.ScheduleRecord{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.schedInit()
	rec, ok := s.schedRecord(id)
	if !ok {
		return rec, fmt.Errorf("schedule %s: %w", id, storeapi.ErrNotFound)
	}
	return rec, after
}

// ListSchedules implements storeapi.Schedules.
func (s *Store) ListSchedules(ctx context.Context) ([]storeapi.ScheduleRecord, error) {
	after, err := s.begin(ctx, OpSchedules)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.schedInit()
	out := make([]storeapi.ScheduleRecord, 0, len(s.sched.defs))
	for id := range s.sched.defs {
		rec, _ := s.schedRecord(id)
		out = append(out, rec)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, after
}

// DeleteSchedule implements storeapi.Schedules.
func (s *Store) DeleteSchedule(ctx context.Context, id string) (storeapi.ScheduleRecord, error) {
	after, err := s.begin(ctx, OpSchedules)
	if err != nil {
		return storeapi.ScheduleRecord{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.schedInit()
	rec, ok := s.schedRecord(id)
	if !ok {
		return rec, fmt.Errorf("schedule %s: %w", id, storeapi.ErrNotFound)
	}
	delete(s.sched.defs, id)
	delete(s.sched.plan, id)
	return rec, after
}

// SaveSchedulePlan implements storeapi.Schedules.
func (s *Store) SaveSchedulePlan(ctx context.Context, id string, gen int64, plan []byte) (bool, error) {
	after, err := s.begin(ctx, OpSchedules)
	if err != nil {
		return false, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.schedInit()
	rec, ok := s.sched.defs[id]
	if !ok || rec.Gen != gen {
		return false, after
	}
	s.sched.plan[id] = storeapi.ScheduleRecord{Plan: append([]byte(nil), plan...), PlanGen: gen}
	return true, after
}
