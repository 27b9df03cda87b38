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

// ListDead lists dead letters (GET /v1/dead); limit <= 0 = the server's default.
func (c *Client) ListDead(ctx context.Context, limit int) (DeadList, error) {
	path := "/v1/dead"
	if limit > 0 {
		path += "?limit=" + strconv.Itoa(limit)
	}
	var out DeadList
	err := c.do(ctx, http.MethodGet, path, nil, &out)
	return out, err
}

// RequeueDead moves a dead letter back to pending (POST /v1/dead/{id}/requeue).
func (c *Client) RequeueDead(ctx context.Context, id string) (Scheduled, error) {
	var out Scheduled
	err := c.do(ctx, http.MethodPost, "/v1/dead/"+url.PathEscape(id)+"/requeue", nil, &out)
	return out, err
}

// PurgeDead deletes every dead letter (DELETE /v1/dead).
func (c *Client) PurgeDead(ctx context.Context) (PurgeResult, error) {
	var out PurgeResult
	err := c.do(ctx, http.MethodDelete, "/v1/dead", nil, &out)
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
