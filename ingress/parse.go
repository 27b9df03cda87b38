package ingress

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// Raw is a consumed record before parsing, in broker-neutral form.
type Raw struct {
	Broker     string // envelope.BrokerKafka, BrokerAMQP, BrokerHTTP
	Source     string // topic or queue name
	Key        []byte
	RoutingKey string
	Payload    []byte
	Headers    []envelope.Header
	AMQP       *envelope.AMQPProperties
	// BaseTime is what x-delay counts from: the Kafka record timestamp; for AMQP the
	// timestamp property if set, else ReceivedAt. Zero means ReceivedAt.
	BaseTime   time.Time
	ReceivedAt time.Time
	// DefaultID is used when no x-message-id header is present: the AMQP message_id
	// property, else a stable id from the source position (Kafka topic/partition/offset).
	DefaultID string
}

// Rules are the per-route limits applied while parsing.
type Rules struct {
	Route           string
	MaxDelay        time.Duration
	MaxPayloadBytes int
	AllowTargets    []string
}

// MaxIDBytes bounds x-message-id; longer ids are invalid input.
const MaxIDBytes = 512

// Invalid reasons (metric label values).
const (
	InvalidBadDelay         = "bad_delay"
	InvalidBadDeliverAt     = "bad_deliver_at"
	InvalidDelayOutOfRange  = "delay_out_of_range"
	InvalidPayloadTooLarge  = "payload_too_large"
	InvalidTargetNotAllowed = "target_not_allowed"
	InvalidBadMessageID     = "bad_message_id"
)

// InvalidReasons lists every Invalid* reason (metrics create these series at 0); a new
// reason is added here with its constant.
var InvalidReasons = []string{
	InvalidBadDelay, InvalidBadDeliverAt, InvalidDelayOutOfRange,
	InvalidPayloadTooLarge, InvalidTargetNotAllowed, InvalidBadMessageID,
}

// Parse turns a raw record into an Item following docs/CONTRACT.md §2. It never fails: bad input
// becomes an invalid Item carrying a reason, so it can be dead-lettered and counted.
func Parse(r Raw, rules Rules) Item {
	recv := r.ReceivedAt
	if recv.IsZero() {
		recv = time.Now()
	}
	base := r.BaseTime
	if base.IsZero() {
		base = recv
	}
	env := &envelope.Envelope{
		ID:           r.DefaultID,
		Route:        rules.Route,
		SourceBroker: r.Broker,
		Source:       r.Source,
		ReceivedAt:   recv.UnixMilli(),
		DueAt:        recv.UnixMilli(),
		Key:          r.Key,
		RoutingKey:   r.RoutingKey,
		Payload:      r.Payload,
		Headers:      r.Headers,
		AMQP:         r.AMQP,
	}
	invalid := func(label, format string, args ...any) Item {
		env.Reason = label + ": " + fmt.Sprintf(format, args...)
		return Item{Env: env, Invalid: label}
	}

	h := scanHeaders(env, r.Headers)
	if h.cancel != "" {
		return Item{Env: env, CancelID: h.cancel}
	}
	if env.ID == "" || len(env.ID) > MaxIDBytes || !utf8.ValidString(env.ID) {
		if len(env.ID) > MaxIDBytes {
			env.ID = env.ID[:MaxIDBytes]
		}
		if env.ID == "" {
			env.ID = fmt.Sprintf("%s/%s/%d", r.Broker, r.Source, recv.UnixNano())
		}
		return invalid(InvalidBadMessageID, "message id must be 1..%d bytes of UTF-8", MaxIDBytes)
	}
	if rules.MaxPayloadBytes > 0 && len(r.Payload) > rules.MaxPayloadBytes {
		return invalid(InvalidPayloadTooLarge, "payload is %d bytes, limit %d", len(r.Payload), rules.MaxPayloadBytes)
	}
	if h.hasTarget {
		t, ok := textOf(h.target)
		if !ok || !allowed(t, rules.AllowTargets) {
			return invalid(InvalidTargetNotAllowed, "x-delay-target %v is not in the route's allow_targets", h.target)
		}
		env.Target = t
	}
	due, label, reason := h.due(base, recv.UnixMilli(), rules.MaxDelay.Milliseconds())
	if label != "" {
		return invalid(label, "%s", reason)
	}
	env.DueAt = due
	return Item{Env: env, Replace: h.replace}
}

// delayHeaders are the headers Parse acts on, as found on a record.
type delayHeaders struct {
	cancel                            string // x-delay-cancel (non-empty text)
	replace                           bool   // x-delay-replace (truthy)
	delay, deliverAt, target          any
	hasDelay, hasDeliverAt, hasTarget bool
}

// scanHeaders reads the delay headers and sets env.ID from x-message-id. It stops at a
// cancel header: the rest of a cancel record is not read.
func scanHeaders(env *envelope.Envelope, headers []envelope.Header) delayHeaders {
	var h delayHeaders
	for _, hd := range headers {
		switch hd.Key {
		case envelope.HeaderMessageID:
			if s, ok := textOf(hd.Value); ok && s != "" {
				env.ID = s
			}
		case envelope.HeaderCancel:
			if s, ok := textOf(hd.Value); ok && s != "" {
				h.cancel = s
				return h
			}
		case envelope.HeaderReplace:
			h.replace = truthy(hd.Value)
		case envelope.HeaderDelay:
			h.delay, h.hasDelay = hd.Value, true
		case envelope.HeaderDeliverAt:
			h.deliverAt, h.hasDeliverAt = hd.Value, true
		case envelope.HeaderDelayTarget:
			h.target, h.hasTarget = hd.Value, true
		}
	}
	return h
}

// due is the due time (unix ms) the headers ask for: x-deliver-at wins over x-delay,
// which counts from base; neither, or a delay ≤ 0, is now. label and reason are set
// (and due is not) when the headers are invalid.
func (h delayHeaders) due(base time.Time, now, maxDelayMs int64) (due int64, label, reason string) {
	switch {
	case h.hasDeliverAt:
		at, err := deliverAtOf(h.deliverAt)
		if errors.Is(err, errOutOfRange) {
			return 0, InvalidDelayOutOfRange, fmt.Sprintf("x-deliver-at %v is out of range", h.deliverAt)
		}
		if err != nil {
			return 0, InvalidBadDeliverAt, fmt.Sprintf("x-deliver-at %v: %v", h.deliverAt, err)
		}
		if maxDelayMs > 0 && at-now > maxDelayMs {
			return 0, InvalidDelayOutOfRange, fmt.Sprintf("x-deliver-at is %d ms ahead, limit %d ms", at-now, maxDelayMs)
		}
		return at, "", ""
	case h.hasDelay:
		d, err := delayOf(h.delay)
		if errors.Is(err, errOutOfRange) {
			return 0, InvalidDelayOutOfRange, fmt.Sprintf("x-delay %v is out of range", h.delay)
		}
		if err != nil {
			return 0, InvalidBadDelay, fmt.Sprintf("x-delay %v: %v", h.delay, err)
		}
		if d > 0 && d > math.MaxInt64-base.UnixMilli() {
			return 0, InvalidDelayOutOfRange, fmt.Sprintf("x-delay %d ms is out of range", d)
		}
		if maxDelayMs > 0 && d > maxDelayMs {
			return 0, InvalidDelayOutOfRange, fmt.Sprintf("x-delay %d ms exceeds limit %d ms", d, maxDelayMs)
		}
		if d > 0 {
			return base.UnixMilli() + d, "", ""
		}
	}
	return now, "", ""
}

func allowed(t string, list []string) bool {
	for _, a := range list {
		if a == t {
			return true
		}
	}
	return false
}

// textOf returns the text of a string-like header value.
func textOf(v any) (string, bool) {
	switch x := v.(type) {
	case string:
		return x, true
	case []byte:
		return string(x), true
	}
	return "", false
}

// truthy reads x-delay-replace: a boolean true, a number other than 0 (any width, as
// an AMQP table carries it), or text "1", "true", "yes", "on", "y" or "t" in any case
// (also as bytes: Kafka header values). Anything else, "false" and "0" included, is
// false.
func truthy(v any) bool {
	if b, ok := v.(bool); ok {
		return b
	}
	if s, ok := textOf(v); ok {
		switch strings.ToLower(strings.TrimSpace(s)) {
		case "1", "true", "yes", "on", "y", "t":
			return true
		}
		return false
	}
	n, err := envelope.Millis(v)
	return err == nil && n != 0
}

// delayOf reads x-delay in any form an AMQP table or a Kafka header carries (see
// envelope.Millis).
func delayOf(v any) (int64, error) { return envelope.Millis(v) }

// errOutOfRange marks a well-formed number too large to be a delay or a time: the item is
// invalid as delay_out_of_range (not bad_delay, which is for unparsable values).
var errOutOfRange = envelope.ErrOutOfRange

// deliverAtOf reads x-deliver-at: unix milliseconds (integer or numeric text), RFC 3339
// text, or an AMQP timestamp. A number below envelope.MinUnixMillis (2000-01-01) is an
// error: unix seconds read as milliseconds would be due in 1970, that is at once.
func deliverAtOf(v any) (int64, error) {
	switch x := v.(type) {
	case time.Time:
		return x.UnixMilli(), nil
	case string, []byte:
		s, _ := textOf(x)
		s = strings.TrimSpace(s)
		if s == "" {
			return 0, fmt.Errorf("empty value")
		}
		if c := s[0]; c >= '0' && c <= '9' && !strings.ContainsAny(s, "T:-") {
			if _, ok := new(big.Float).SetString(s); ok {
				ms, err := envelope.Millis(s)
				if err != nil {
					return 0, err
				}
				return ms, envelope.CheckUnixMillis(ms)
			}
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return 0, fmt.Errorf("want unix milliseconds or RFC 3339")
		}
		return t.UnixMilli(), nil
	default:
		ms, err := delayOf(v)
		if err != nil {
			return 0, err
		}
		return ms, envelope.CheckUnixMillis(ms)
	}
}
