package admin

import (
	"context"
	"net/http"
	"net/url"
)

// Recurring schedules (docs/CONTRACT.md "Recurring schedules"): POST|GET /v1/schedules,
// GET|PUT|DELETE /v1/schedules/{id}, POST /v1/schedules/{id}/pause|resume.

// ScheduleDef is a schedule's definition: the body of POST (with ID) and PUT (ID from
// the path) and part of every answer.
type ScheduleDef struct {
	ID     string `json:"id,omitempty"`
	Route  string `json:"route"`
	Target string `json:"target,omitempty"`
	// Spec: a cron expression (5 fields, or 6 with seconds first; CRON_TZ=<zone> in
	// front for a time zone, UTC otherwise), "@every <duration>", or "@at <RFC 3339
	// instant>[,<instant>…]".
	Spec       string            `json:"spec"`
	Payload    string            `json:"payload,omitempty"`
	Headers    map[string]string `json:"headers,omitempty"`
	Key        string            `json:"key,omitempty"`
	RoutingKey string            `json:"routing_key,omitempty"`
	// Start and End (RFC 3339) bound the slots; "" = unbounded.
	Start string `json:"start,omitempty"`
	End   string `json:"end,omitempty"`
	// JitterMs delays each slot by a fraction of it, the same on every instance.
	JitterMs int64 `json:"jitter_ms,omitempty"`
	// CatchUp is what happens to slots missed while no bridge ran: skip (default),
	// one (the latest, at once), all (the latest CatchUpLimit, default 100).
	CatchUp      string `json:"catch_up,omitempty"`
	CatchUpLimit int    `json:"catch_up_limit,omitempty"`
}

// Slot is one slot of a schedule: its time and its due time (the slot plus jitter),
// unix ms, and the id of its message.
type Slot struct {
	Slot int64  `json:"slot"`
	Due  int64  `json:"due"`
	ID   string `json:"id"`
}

// SlotOutcome is a recent slot: what the planner did with it (parked, late, missed,
// no_route) and, when its message is still known, the message's state.
type SlotOutcome struct {
	Slot
	Outcome string `json:"outcome"`
	State   string `json:"state,omitempty"`
}

// Schedule states.
const (
	ScheduleActive       = "active"
	SchedulePaused       = "paused"
	ScheduleRouteMissing = "route_missing" // its route is not configured: slots are not published
	ScheduleEnded        = "ended"         // no slot after now
)

// ScheduleInfo is a schedule as the API shows it.
type ScheduleInfo struct {
	ScheduleDef
	// Origin: "api" or "config" (from the config file: read-only over the API).
	Origin     string `json:"origin"`
	State      string `json:"state"`
	Paused     bool   `json:"paused"`
	Generation int64  `json:"generation"`
	UpdatedAt  int64  `json:"updated_at"`
	// Next are the next slots (5 for one schedule, 1 in the list).
	Next []Slot `json:"next"`
	// Last are the most recent slots decided (newest last).
	Last []SlotOutcome `json:"last"`
}

// ScheduleList is the body of GET /v1/schedules.
type ScheduleList struct {
	Schedules []ScheduleInfo `json:"schedules"`
}

// ScheduleBackend is implemented by backends that keep recurring schedules; without
// it the endpoints answer 501. Errors as Backend's: ErrInvalid (naming the field),
// ErrNotFound, ErrConflict (an id that exists, on create; a config-file schedule, on
// any change), ErrUnavailable.
type ScheduleBackend interface {
	CreateSchedule(ctx context.Context, def ScheduleDef) (ScheduleInfo, error)
	ListSchedules(ctx context.Context) ([]ScheduleInfo, error)
	GetSchedule(ctx context.Context, id string) (ScheduleInfo, error)
	UpdateSchedule(ctx context.Context, def ScheduleDef) (ScheduleInfo, error)
	PauseSchedule(ctx context.Context, id string, paused bool) (ScheduleInfo, error)
	DeleteSchedule(ctx context.Context, id string) error
}

func (s *Server) handleSchedules() {
	s.handle("POST /v1/schedules", s.scheduleCall(func(ctx context.Context, sb ScheduleBackend, w http.ResponseWriter, r *http.Request) (any, int, error) {
		var def ScheduleDef
		if !s.decode(w, r, &def) {
			return nil, 0, nil
		}
		info, err := sb.CreateSchedule(ctx, def)
		if err == nil {
			w.Header().Set("Location", "/v1/schedules/"+url.PathEscape(info.ID))
		}
		return info, http.StatusCreated, err
	}))
	s.handle("GET /v1/schedules", s.scheduleCall(func(ctx context.Context, sb ScheduleBackend, _ http.ResponseWriter, _ *http.Request) (any, int, error) {
		list, err := sb.ListSchedules(ctx)
		if list == nil {
			list = []ScheduleInfo{}
		}
		return ScheduleList{Schedules: list}, http.StatusOK, err
	}))
	s.handle("GET /v1/schedules/{id}", s.scheduleCall(func(ctx context.Context, sb ScheduleBackend, _ http.ResponseWriter, r *http.Request) (any, int, error) {
		info, err := sb.GetSchedule(ctx, r.PathValue("id"))
		return info, http.StatusOK, err
	}))
	s.handle("PUT /v1/schedules/{id}", s.scheduleCall(func(ctx context.Context, sb ScheduleBackend, w http.ResponseWriter, r *http.Request) (any, int, error) {
		var def ScheduleDef
		if !s.decode(w, r, &def) {
			return nil, 0, nil
		}
		if def.ID != "" && def.ID != r.PathValue("id") {
			return nil, 0, Invalid("id", "the body names %q, the path %q", def.ID, r.PathValue("id"))
		}
		def.ID = r.PathValue("id")
		info, err := sb.UpdateSchedule(ctx, def)
		return info, http.StatusOK, err
	}))
	for _, op := range []string{"pause", "resume"} {
		paused := op == "pause"
		s.handle("POST /v1/schedules/{id}/"+op, s.scheduleCall(func(ctx context.Context, sb ScheduleBackend, _ http.ResponseWriter, r *http.Request) (any, int, error) {
			info, err := sb.PauseSchedule(ctx, r.PathValue("id"), paused)
			return info, http.StatusOK, err
		}))
	}
	s.handle("DELETE /v1/schedules/{id}", s.scheduleCall(func(ctx context.Context, sb ScheduleBackend, _ http.ResponseWriter, r *http.Request) (any, int, error) {
		return nil, http.StatusNoContent, sb.DeleteSchedule(ctx, r.PathValue("id"))
	}))
}

// scheduleCall adapts a schedule handler: 501 without a ScheduleBackend, the
// request's timeout, errors mapped as everywhere. A handler returning status 0
// answered already.
func (s *Server) scheduleCall(h func(context.Context, ScheduleBackend, http.ResponseWriter, *http.Request) (any, int, error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sb, ok := s.opt.Backend.(ScheduleBackend)
		if !ok {
			s.fail(w, r, notImplemented("recurring schedules"))
			return
		}
		ctx, cancel := s.call(r)
		defer cancel()
		body, status, err := h(ctx, sb, w, r)
		switch {
		case err != nil:
			s.fail(w, r, err)
		case status == 0:
		case status == http.StatusNoContent:
			w.WriteHeader(status)
		default:
			writeJSON(w, status, body)
		}
	}
}
