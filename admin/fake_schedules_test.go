package admin

import (
	"context"
	"fmt"
	"sort"
	"strings"
)

// The fake backend's recurring schedules: enough state for the handlers' paths (the
// real backend, app/adminapi, is tested in a composed bridge in app).

func (f *fakeBackend) schedLocked() map[string]*ScheduleInfo {
	if f.scheds == nil {
		f.scheds = map[string]*ScheduleInfo{"from-config": {
			ScheduleDef: ScheduleDef{ID: "from-config", Route: "orders", Spec: "@every 1h", CatchUp: "skip"},
			Origin:      "config", State: ScheduleActive, Generation: 1, UpdatedAt: 1_700_000_000_000,
			Next: []Slot{{Slot: 1_700_003_600_000, Due: 1_700_003_600_000, ID: "from-config@1700003600000"}},
			Last: []SlotOutcome{{Slot: Slot{Slot: 1_700_000_000_000, Due: 1_700_000_000_000, ID: "from-config@1700000000000"}, Outcome: "parked", State: "delivered"}},
		}}
	}
	return f.scheds
}

func fakeInfo(def ScheduleDef, gen int64, paused bool) *ScheduleInfo {
	if def.CatchUp == "" {
		def.CatchUp = "skip"
	}
	state := ScheduleActive
	if paused {
		state = SchedulePaused
	}
	return &ScheduleInfo{ScheduleDef: def, Origin: "api", State: state, Paused: paused, Generation: gen, UpdatedAt: 1_700_000_000_000,
		Next: []Slot{{Slot: 1_700_000_060_000, Due: 1_700_000_060_000 + def.JitterMs/2, ID: fmt.Sprintf("%s@1700000060000", def.ID)}},
		Last: []SlotOutcome{{Slot: Slot{Slot: 1_700_000_000_000, Due: 1_700_000_000_000, ID: def.ID + "@1700000000000"}, Outcome: "missed"}}}
}

func (f *fakeBackend) CreateSchedule(_ context.Context, def ScheduleDef) (ScheduleInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return ScheduleInfo{}, f.failWith
	}
	if strings.Count(def.Spec, " ") == 3 {
		return ScheduleInfo{}, Invalid("spec", "cron: expected 5 to 6 fields")
	}
	if _, ok := f.schedLocked()[def.ID]; ok {
		return ScheduleInfo{}, fmt.Errorf("%w: schedule %q exists", ErrConflict, def.ID)
	}
	info := fakeInfo(def, 1, false)
	f.schedLocked()[def.ID] = info
	return *info, nil
}

func (f *fakeBackend) ListSchedules(context.Context) ([]ScheduleInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return nil, f.failWith
	}
	var out []ScheduleInfo
	for _, s := range f.schedLocked() {
		out = append(out, *s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID }) // as the real backend
	return out, nil
}

func (f *fakeBackend) writableLocked(id string) (*ScheduleInfo, error) {
	if f.failWith != nil {
		return nil, f.failWith
	}
	s, ok := f.schedLocked()[id]
	switch {
	case !ok:
		return nil, fmt.Errorf("schedule %q: %w", id, ErrNotFound)
	case s.Origin == "config":
		return nil, fmt.Errorf("%w: from the config file", ErrConflict)
	}
	return s, nil
}

func (f *fakeBackend) GetSchedule(_ context.Context, id string) (ScheduleInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failWith != nil {
		return ScheduleInfo{}, f.failWith
	}
	s, ok := f.schedLocked()[id]
	if !ok {
		return ScheduleInfo{}, fmt.Errorf("schedule %q: %w", id, ErrNotFound)
	}
	return *s, nil
}

func (f *fakeBackend) UpdateSchedule(_ context.Context, def ScheduleDef) (ScheduleInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.writableLocked(def.ID)
	if err != nil {
		return ScheduleInfo{}, err
	}
	info := fakeInfo(def, s.Generation+1, s.Paused)
	f.scheds[def.ID] = info
	return *info, nil
}

func (f *fakeBackend) PauseSchedule(_ context.Context, id string, paused bool) (ScheduleInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.writableLocked(id)
	if err != nil {
		return ScheduleInfo{}, err
	}
	info := fakeInfo(s.ScheduleDef, s.Generation+1, paused)
	f.scheds[id] = info
	return *info, nil
}

func (f *fakeBackend) DeleteSchedule(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, err := f.writableLocked(id); err != nil {
		return err
	}
	delete(f.scheds, id)
	return nil
}
