package admin

import (
	"context"
	"net/http"
	"net/url"
)

// The client's side of /v1/schedules.

// CreateSchedule creates a recurring schedule (POST /v1/schedules).
func (c *Client) CreateSchedule(ctx context.Context, def ScheduleDef) (ScheduleInfo, error) {
	var out ScheduleInfo
	err := c.do(ctx, http.MethodPost, "/v1/schedules", def, &out)
	return out, err
}

// ListSchedules lists every schedule (GET /v1/schedules).
func (c *Client) ListSchedules(ctx context.Context) ([]ScheduleInfo, error) {
	var out ScheduleList
	err := c.do(ctx, http.MethodGet, "/v1/schedules", nil, &out)
	return out.Schedules, err
}

// GetSchedule reads one schedule with its next 5 slots (GET /v1/schedules/{id}).
func (c *Client) GetSchedule(ctx context.Context, id string) (ScheduleInfo, error) {
	var out ScheduleInfo
	err := c.do(ctx, http.MethodGet, "/v1/schedules/"+url.PathEscape(id), nil, &out)
	return out, err
}

// UpdateSchedule replaces a schedule's definition (PUT /v1/schedules/{id}, id from def.ID).
func (c *Client) UpdateSchedule(ctx context.Context, def ScheduleDef) (ScheduleInfo, error) {
	var out ScheduleInfo
	id := def.ID
	def.ID = ""
	err := c.do(ctx, http.MethodPut, "/v1/schedules/"+url.PathEscape(id), def, &out)
	return out, err
}

// PauseSchedule pauses (paused) or resumes a schedule.
func (c *Client) PauseSchedule(ctx context.Context, id string, paused bool) (ScheduleInfo, error) {
	op := "/resume"
	if paused {
		op = "/pause"
	}
	var out ScheduleInfo
	err := c.do(ctx, http.MethodPost, "/v1/schedules/"+url.PathEscape(id)+op, nil, &out)
	return out, err
}

// DeleteSchedule deletes a schedule (DELETE /v1/schedules/{id}).
func (c *Client) DeleteSchedule(ctx context.Context, id string) error {
	return c.do(ctx, http.MethodDelete, "/v1/schedules/"+url.PathEscape(id), nil, nil)
}
