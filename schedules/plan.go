package schedules

import (
	"encoding/json"

	"github.com/delaybridge/delay-bridge/internal/observe"
)

// Plan is the planner's progress for one generation of a schedule, stored with it
// (storeapi.Schedules.SaveSchedulePlan).
type Plan struct {
	// Through: every slot at or before it has been decided (parked, late, missed or
	// no_route); the next round starts after it.
	Through int64 `json:"through"`
	// Parked lists the slots parked ahead that were not yet due at the last round,
	// ascending: an edit, pause or delete cancels their occurrences.
	Parked []int64 `json:"parked,omitempty"`
	// Last are the most recent decisions, newest last (at most LastOutcomes).
	Last []Decision `json:"last,omitempty"`
	// Route is the route the parked occurrences were parked on (their cancel is scoped
	// to it).
	Route string `json:"route,omitempty"`
	// RouteMissing is set while the schedule's route is not configured.
	RouteMissing bool `json:"route_missing,omitempty"`
}

// LastOutcomes is how many recent decisions a plan keeps.
const LastOutcomes = 10

// Decision is what the planner did with one slot.
type Decision struct {
	Slot    int64  `json:"slot"`
	Due     int64  `json:"due"`
	Outcome string `json:"outcome"`       // observe.SlotParked, SlotLate, SlotMissed, SlotNoRoute
	Gen     int64  `json:"gen,omitempty"` // the generation it was decided for (in Plan.Last)
}

// DecodePlan reads a stored plan (nil: the empty plan).
func DecodePlan(b []byte) (Plan, error) {
	var p Plan
	if len(b) == 0 {
		return p, nil
	}
	err := json.Unmarshal(b, &p)
	return p, err
}

// maxScan bounds how many passed slots one round walks (a per-second schedule down for
// 11 days); the rest are skipped without being counted one by one.
const maxScan = 1_000_000

// Window is what one planning round looks at (unix ms).
type Window struct {
	After   int64 // slots after this were not decided yet
	Now     int64
	Grace   int64 // a slot less than this old is still parked as usual; older ones are catch-up
	Horizon int64 // slots up to Now+Horizon are parked
	Max     int   // at most this many slots parked per round (the rest next round)
}

// Decide decides the slots of d in (w.After, w.Now+w.Horizon]: slots older than the
// grace go through the catch-up policy (skip: missed; one: the latest late, the others
// missed; all: the latest catch-up-limit late, the others missed), the rest are parked;
// without a route every slot is no_route. It returns the decisions to act on, the
// number of passed slots skipped without a decision of their own (counted missed), and
// the new Through.
func Decide(d *Definition, sp Spec, w Window, routeOK bool) (out []Decision, skipped int, through int64) {
	pastEnd := w.Now - w.Grace
	keep := 0
	switch d.CatchUp {
	case CatchUpOne:
		keep = 1
	case CatchUpAll:
		keep = d.catchUpLimit()
	}
	after := w.After
	if after < pastEnd {
		past, more := d.Slots(sp, after, pastEnd, maxScan)
		if more {
			skipped += len(past) // far too many: none is caught up
			past = nil
		}
		cut := len(past) - keep
		if cut < 0 {
			cut = 0
		}
		skipped += cut
		for _, s := range past[cut:] {
			out = append(out, Decision{Slot: s, Due: d.Due(s), Outcome: observe.SlotLate})
		}
		after = pastEnd
	}
	through = w.Now + w.Horizon
	future, more := d.Slots(sp, after, through, w.Max)
	if more {
		through = future[len(future)-1]
	}
	for _, s := range future {
		out = append(out, Decision{Slot: s, Due: d.Due(s), Outcome: observe.SlotParked})
	}
	if !routeOK {
		for i := range out {
			out[i].Outcome = observe.SlotNoRoute
		}
	}
	return out, skipped, through
}
