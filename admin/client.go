package admin

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Client calls the admin API. The zero value is not usable; use NewClient.
type Client struct {
	base  string
	token string
	http  *http.Client
}

// NewClient returns a client for the API at baseURL ("http://127.0.0.1:8089"; a bare
// host:port gets "http://"). token, if non-empty, is sent as a bearer token. hc nil =
// a client with a 30 s timeout.
func NewClient(baseURL, token string, hc *http.Client) *Client {
	if !strings.Contains(baseURL, "://") {
		baseURL = "http://" + baseURL
	}
	if hc == nil {
		hc = &http.Client{Timeout: 30 * time.Second}
	}
	return &Client{base: strings.TrimRight(baseURL, "/"), token: token, http: hc}
}

// APIError is a non-2xx answer. errors.Is matches it against the sentinel of its status
// (ErrInvalid, ErrNotFound, ErrConflict, ErrUnavailable).
type APIError struct {
	Status  int
	Message string
	Field   string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.Status, http.StatusText(e.Status), e.Message)
}

// ErrUnauthorized matches a 401 APIError.
var ErrUnauthorized = errors.New("unauthorized")

func (e *APIError) Unwrap() error {
	switch e.Status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return ErrInvalid
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusConflict:
		return ErrConflict
	case http.StatusServiceUnavailable:
		return ErrUnavailable
	case http.StatusUnauthorized:
		return ErrUnauthorized
	case http.StatusNotImplemented:
		return ErrNotImplemented
	}
	return nil
}

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("admin client: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("admin client: %w", err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json")
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("admin client: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("admin client: %s %s: reading the answer: %w", method, path, err)
	}
	if resp.StatusCode/100 != 2 {
		var eb ErrorBody
		if json.Unmarshal(raw, &eb) != nil || eb.Error == "" {
			eb.Error = strings.TrimSpace(string(raw))
		}
		return &APIError{Status: resp.StatusCode, Message: eb.Error, Field: eb.Field}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("admin client: %s %s: decoding the answer: %w", method, path, err)
	}
	return nil
}

func msgPath(id string) string { return "/v1/messages/" + url.PathEscape(id) }

// Schedule submits a message (POST /v1/messages).
func (c *Client) Schedule(ctx context.Context, b ScheduleBody) (Scheduled, error) {
	var out Scheduled
	err := c.do(ctx, http.MethodPost, "/v1/messages", b, &out)
	return out, err
}

// Get looks a message up (GET /v1/messages/{id}).
func (c *Client) Get(ctx context.Context, id string) (Message, error) {
	var out Message
	err := c.do(ctx, http.MethodGet, msgPath(id), nil, &out)
	return out, err
}

// Cancel cancels a message (DELETE /v1/messages/{id}).
func (c *Client) Cancel(ctx context.Context, id string) (CancelResult, error) {
	var out CancelResult
	err := c.do(ctx, http.MethodDelete, msgPath(id), nil, &out)
	return out, err
}

// Reschedule gives a message a new due time (POST /v1/messages/{id}/reschedule).
func (c *Client) Reschedule(ctx context.Context, id string, b RescheduleBody) (Scheduled, error) {
	var out Scheduled
	err := c.do(ctx, http.MethodPost, msgPath(id)+"/reschedule", b, &out)
	return out, err
}

// Stats fetches GET /v1/stats.
func (c *Client) Stats(ctx context.Context) (Stats, error) {
	var out Stats
	err := c.do(ctx, http.MethodGet, "/v1/stats", nil, &out)
	return out, err
}

// queryPath is path with q's filter, limit (if > 0) and cursor as parameters.
func queryPath(path string, q Query) string {
	v := q.Filter.Values()
	if q.Limit > 0 {
		v.Set("limit", strconv.Itoa(q.Limit))
	}
	if q.Cursor != "" {
		v.Set("cursor", q.Cursor)
	}
	if len(v) == 0 {
		return path
	}
	return path + "?" + v.Encode()
}

// Browse lists one page of messages (GET /v1/messages): q.Filter, q.Limit (<= 0 = the
// server's default) and q.Cursor (a previous NextCursor). Page until NextCursor is "";
// a page may be short while more follow.
func (c *Client) Browse(ctx context.Context, q Query) (MessageList, error) {
	var out MessageList
	err := c.do(ctx, http.MethodGet, queryPath("/v1/messages", q), nil, &out)
	return out, err
}

// ListDead lists one page of dead letters (GET /v1/dead), oldest first, with the same
// filter and paging as Browse (Filter.State must be "" or dead).
func (c *Client) ListDead(ctx context.Context, q Query) (DeadList, error) {
	var out DeadList
	err := c.do(ctx, http.MethodGet, queryPath("/v1/dead", q), nil, &out)
	return out, err
}

// RequeueDead moves a dead letter back to pending (POST /v1/dead/{id}/requeue).
func (c *Client) RequeueDead(ctx context.Context, id string) (Scheduled, error) {
	var out Scheduled
	err := c.do(ctx, http.MethodPost, "/v1/dead/"+url.PathEscape(id)+"/requeue", nil, &out)
	return out, err
}

// PurgeDead deletes the dead letters of route ("" = every route) (DELETE /v1/dead).
func (c *Client) PurgeDead(ctx context.Context, route string) (PurgeResult, error) {
	path := "/v1/dead"
	if route != "" {
		path += "?route=" + url.QueryEscape(route)
	}
	var out PurgeResult
	err := c.do(ctx, http.MethodDelete, path, nil, &out)
	return out, err
}

// PreviewJob is a dry run of a bulk job (POST /v1/jobs with dry_run): how many
// messages it would touch and a sample of them. b.DryRun is set for you.
func (c *Client) PreviewJob(ctx context.Context, b JobBody) (JobPreview, error) {
	b.DryRun = true
	var out JobPreview
	err := c.do(ctx, http.MethodPost, "/v1/jobs", b, &out)
	return out, err
}

// StartJob starts a bulk job (POST /v1/jobs; 202). b.DryRun must be false.
func (c *Client) StartJob(ctx context.Context, b JobBody) (Job, error) {
	if b.DryRun {
		return Job{}, Invalid("dry_run", "StartJob with dry_run set: use PreviewJob")
	}
	var out Job
	err := c.do(ctx, http.MethodPost, "/v1/jobs", b, &out)
	return out, err
}

// GetJob fetches a job (GET /v1/jobs/{id}).
func (c *Client) GetJob(ctx context.Context, id string) (Job, error) {
	var out Job
	err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), nil, &out)
	return out, err
}

// ListJobs lists recent jobs, newest first (GET /v1/jobs); limit <= 0 = the default.
func (c *Client) ListJobs(ctx context.Context, limit int) ([]Job, error) {
	path := "/v1/jobs"
	if limit > 0 {
		path += "?limit=" + strconv.Itoa(limit)
	}
	var out JobList
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return out.Jobs, err
}

// Lateness fetches delivery lateness per route over window (GET /v1/lateness);
// window 0 = the server's default (5m).
func (c *Client) Lateness(ctx context.Context, window time.Duration) (Lateness, error) {
	path := "/v1/lateness"
	if window > 0 {
		path += "?window=" + url.QueryEscape(window.String())
	}
	var out Lateness
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return out, err
}

// Routes returns the per-route state (GET /v1/routes).
func (c *Client) Routes(ctx context.Context) (RoutesResponse, error) {
	var out RoutesResponse
	err := c.do(ctx, http.MethodGet, "/v1/routes", nil, &out)
	return out, err
}

// Ready calls /readyz: nil when ready, else an *APIError (503) carrying the reason.
func (c *Client) Ready(ctx context.Context) error {
	return c.do(ctx, http.MethodGet, "/readyz", nil, nil)
}
