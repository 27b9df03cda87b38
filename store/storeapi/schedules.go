package storeapi

import "context"

// Recurring schedules (docs/CONTRACT.md "Recurring schedules"): the definitions and the
// planner's progress per schedule. The occurrences themselves are ordinary messages
// (Intake.ParkEach with deterministic ids); this role stores only what is about the
// schedule. The definition and the plan are opaque bytes here: schedules
// encodes them.

// ScheduleRecord is one stored schedule.
type ScheduleRecord struct {
	ID string
	// Def is the definition as PutSchedule stored it.
	Def []byte
	// Gen is the generation PutSchedule gave this definition: 1 for the first put of an
	// id, and every later put (also after a delete) gets a greater one. Occurrence ids
	// carry it, so a cancelled occurrence of an earlier generation never stops a slot
	// of a later one.
	Gen int64
	// Updated is the now of the put (unix ms).
	Updated int64
	// Plan is the last plan SaveSchedulePlan stored (nil when none), for generation
	// PlanGen (which may be older than Gen: the definition changed since).
	Plan    []byte
	PlanGen int64
}

// Schedules stores schedule definitions and their plans. All of one cluster's
// schedules live together (on Redis, in one hash slot); there are few of them.
type Schedules interface {
	// PutSchedule stores def as id's definition (creating or replacing it), updated at
	// now, and returns its new generation. The plan stays as it was (for the
	// generation it was made for). An empty id or def: ErrInvalid.
	PutSchedule(ctx context.Context, id string, def []byte, now int64) (gen int64, err error)
	// GetSchedule reads one schedule; ErrNotFound if there is none.
	GetSchedule(ctx context.Context, id string) (ScheduleRecord, error)
	// ListSchedules returns every schedule, ordered by id.
	ListSchedules(ctx context.Context) ([]ScheduleRecord, error)
	// DeleteSchedule removes id's definition and plan and returns them as they were
	// (ErrNotFound if there is none). The generation counter is kept, so a schedule
	// created again under the same id gets a greater generation.
	DeleteSchedule(ctx context.Context, id string) (ScheduleRecord, error)
	// SaveSchedulePlan stores plan for generation gen of id, only if gen is still id's
	// generation: false (nothing written) when the schedule was changed or deleted
	// since the caller read it.
	SaveSchedulePlan(ctx context.Context, id string, gen int64, plan []byte) (bool, error)
}
