package admin

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// Wire types shared by the server and Client.

// ScheduleBody is the JSON body of POST /v1/messages. Exactly one of DelayMs and
// DeliverAt is required; at most one of Payload and PayloadBase64, and of Key and
// KeyBase64.
type ScheduleBody struct {
	ID            string            `json:"id,omitempty"`
	Route         string            `json:"route"`
	Key           *string           `json:"key,omitempty"`
	KeyBase64     *string           `json:"key_base64,omitempty"`
	RoutingKey    string            `json:"routing_key,omitempty"`
	Payload       *string           `json:"payload,omitempty"`
	PayloadBase64 *string           `json:"payload_base64,omitempty"`
	Headers       map[string]string `json:"headers,omitempty"`
	// DelayMs is the delay in milliseconds from when the bridge receives the request.
	DelayMs *int64 `json:"delay_ms,omitempty"`
	// DeliverAt is an absolute due time: unix milliseconds, or an RFC 3339 string.
	DeliverAt *Timestamp `json:"deliver_at,omitempty"`
	// Replace: the message replaces the one with its id on its route, as
	// x-delay-replace does (docs/CONTRACT.md "Replace").
	Replace bool `json:"replace,omitempty"`
}

// RescheduleBody is the JSON body of POST /v1/messages/{id}/reschedule: exactly one of
// DelayMs and DeliverAt.
type RescheduleBody struct {
	DelayMs   *int64     `json:"delay_ms,omitempty"`
	DeliverAt *Timestamp `json:"deliver_at,omitempty"`
}

// CancelResult is the answer of DELETE /v1/messages/{id}.
type CancelResult struct {
	ID         string `json:"id"`
	PriorState string `json:"prior_state"`
}

// CancelConflict is the 409 answer of DELETE /v1/messages/{id} for a message that is
// already delivered or cancelled: an ErrorBody plus the state (PriorState "delivered"
// or "cancelled").
type CancelConflict struct {
	Error      string `json:"error"`
	ID         string `json:"id"`
	PriorState string `json:"prior_state"`
}

// PurgeResult is the answer of DELETE /v1/dead.
type PurgeResult struct {
	Purged int64 `json:"purged"`
}

// ErrorBody is every error answer.
type ErrorBody struct {
	Error string `json:"error"`
	// Field names the offending request field for a 400, when known.
	Field string `json:"field,omitempty"`
}

// Timestamp is an absolute time given as unix milliseconds (a JSON number or a string
// of digits) or as an RFC 3339 string. It marshals as unix milliseconds. It is the type
// of the deliver_at fields: a parse failure is an *InvalidError naming deliver_at.
type Timestamp struct{ time.Time }

// UnixMilli returns a Timestamp for unix milliseconds ms.
func UnixMilli(ms int64) *Timestamp { return &Timestamp{time.UnixMilli(ms)} }

func (t Timestamp) MarshalJSON() ([]byte, error) {
	return []byte(strconv.FormatInt(t.UnixMilli(), 10)), nil
}

func (t *Timestamp) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return Invalid("deliver_at", "%v", err)
		}
		v, err := ParseTime(s)
		if err != nil {
			return Invalid("deliver_at", "%v", err)
		}
		t.Time = v
		return nil
	}
	ms, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		return Invalid("deliver_at", "want unix milliseconds or an RFC 3339 time, got %s", b)
	}
	if err := envelope.CheckUnixMillis(ms); err != nil {
		return Invalid("deliver_at", "%v", err)
	}
	t.Time = time.UnixMilli(ms)
	return nil
}

// ParseTime parses unix milliseconds ("1700000000000") or RFC 3339
// ("2026-01-02T15:04:05Z", fractional seconds allowed). A number below
// envelope.MinUnixMillis (2000-01-01) is an error: unix seconds read as milliseconds
// would be a time in 1970.
func ParseTime(s string) (time.Time, error) {
	s = strings.TrimSpace(s)
	if ms, err := strconv.ParseInt(s, 10, 64); err == nil {
		if err := envelope.CheckUnixMillis(ms); err != nil {
			return time.Time{}, err
		}
		return time.UnixMilli(ms), nil
	}
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("want unix milliseconds or an RFC 3339 time, got %q", s)
	}
	return v, nil
}
