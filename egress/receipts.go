package egress

import (
	"fmt"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
)

// Receipt outcomes (docs/CONTRACT.md "Receipts", docs/receipt.schema.json).
const (
	ReceiptDelivered    = "delivered"
	ReceiptDeadLettered = "dead_lettered"
	ReceiptCancelled    = "cancelled"
	// ReceiptReplaced: the message was replaced by a newer version with its id
	// (x-delay-replace); the new version has receipts of its own.
	ReceiptReplaced = "replaced"
)

// ReceiptVersion is the receipt schema's version (the "v" field).
const ReceiptVersion = 1

// Headers a receipt carries over from its message (besides traceparent).
const (
	HeaderTraceparent   = "traceparent"
	HeaderCorrelationID = "x-correlation-id"
)

// Receipt is one outcome of one message, published as JSON (docs/receipt.schema.json).
// Times are RFC 3339 in UTC with milliseconds.
type Receipt struct {
	V       int    `json:"v"`
	Outcome string `json:"outcome"`
	ID      string `json:"id"`
	Route   string `json:"route"`
	// At is when the outcome became final (delivered: the broker's confirm).
	At    string `json:"at"`
	DueAt string `json:"due_at,omitempty"`
	// Delivered: when the broker confirmed, how late that was, and where it went.
	PublishedAt string         `json:"published_at,omitempty"`
	LatenessMs  *int64         `json:"lateness_ms,omitempty"`
	Target      *ReceiptTarget `json:"target,omitempty"`
	Reason      string         `json:"reason,omitempty"`   // dead_lettered
	Attempts    *int32         `json:"attempts,omitempty"` // dead_lettered: publish attempts made
	Traceparent string         `json:"traceparent,omitempty"`
	Correlation string         `json:"correlation_id,omitempty"`
}

// ReceiptTarget is where a delivered message went. Partition and Offset are the ones
// the Kafka broker assigned (absent for AMQP).
type ReceiptTarget struct {
	Broker     string `json:"broker"`
	Topic      string `json:"topic,omitempty"`
	Exchange   string `json:"exchange,omitempty"`
	RoutingKey string `json:"routing_key,omitempty"`
	Partition  *int32 `json:"partition,omitempty"`
	Offset     *int64 `json:"offset,omitempty"`
}

// ReceiptRoute is one route's receipts: the broker of its receipts target (the
// SidePublisher target the receipts are offered to) and, to name a delivered message's
// target, the route's own target.
type ReceiptRoute struct {
	Broker string // envelope.BrokerKafka or BrokerAMQP: where receipts go
	// To is the route's target: broker, topic or exchange, fixed routing key.
	To ReceiptTarget
}

// Receipts makes the receipts of the routes that have them and offers them to a
// SidePublisher (queue observe.SideQueueReceipts, one target per broker): it never
// waits for a broker, so it may be called on a dispatcher worker, the ingress handler
// or a job's goroutine. A route without receipts costs one map lookup per batch.
type Receipts struct {
	routes map[string]ReceiptRoute
	side   interface {
		OfferTo(target string, envs []*envelope.Envelope)
	}
	clk clock.Clock
}

// NewReceipts builds the receipts maker of routes, offering to side.
func NewReceipts(routes map[string]ReceiptRoute, side *SidePublisher, clk clock.Clock) *Receipts {
	if clk == nil {
		clk = clock.Real{}
	}
	return &Receipts{routes: routes, side: side, clk: clk}
}

// Enabled reports whether route has receipts.
func (r *Receipts) Enabled(route string) bool {
	if r == nil {
		return false
	}
	_, ok := r.routes[route]
	return ok
}

// Delivered offers the delivered receipts of envs (one route, confirmed by the broker
// at confirmed; a Kafka envelope's Placed gives partition and offset).
func (r *Receipts) Delivered(route string, envs []*envelope.Envelope, confirmed time.Time) {
	rr, ok := r.routes[route]
	if !ok || len(envs) == 0 {
		return
	}
	out := make([]*envelope.Envelope, 0, len(envs))
	at := stamp(confirmed)
	for _, env := range envs {
		late := confirmed.UnixMilli() - env.DueAt
		t := rr.To
		if env.Target != "" {
			t.Topic, t.Exchange = targetName(t.Broker, env.Target)
		}
		if t.Broker == envelope.BrokerAMQP && t.RoutingKey == "" {
			t.RoutingKey = env.RoutingKey
		}
		if p := env.Placed; p != nil {
			part, off := p.Partition, p.Offset
			t.Partition, t.Offset = &part, &off
		}
		out = append(out, r.envelope(env, Receipt{
			Outcome: ReceiptDelivered, At: at, DueAt: stampMs(env.DueAt),
			PublishedAt: at, LatenessMs: &late, Target: &t,
		}))
	}
	r.side.OfferTo(rr.Broker, out)
}

func targetName(broker, name string) (topic, exchange string) {
	if broker == envelope.BrokerAMQP {
		return "", name
	}
	return name, ""
}

// DeadLettered offers the dead-lettered receipts of envs (any routes): reason and the
// publish attempts made.
func (r *Receipts) DeadLettered(envs []*envelope.Envelope) {
	if r == nil {
		return
	}
	at := stamp(r.clk.Now())
	byBroker := map[string][]*envelope.Envelope{}
	for _, env := range envs {
		rr, ok := r.routes[env.Route]
		if !ok {
			continue
		}
		attempts := env.Attempt
		rc := Receipt{Outcome: ReceiptDeadLettered, At: at, Reason: env.Reason, Attempts: &attempts}
		if env.DueAt > 0 {
			rc.DueAt = stampMs(env.DueAt)
		}
		byBroker[rr.Broker] = append(byBroker[rr.Broker], r.envelope(env, rc))
	}
	for broker, out := range byBroker {
		r.side.OfferTo(broker, out)
	}
}

// Cancelled offers the cancelled receipts of ids (all of route). The message is gone
// from the store by then, so these carry neither due time nor trace headers.
func (r *Receipts) Cancelled(route string, ids []string) {
	r.byID(route, ids, ReceiptCancelled)
}

// Replaced offers the replaced receipts of ids (all of route): the versions that a
// message with the same id and x-delay-replace took the place of. Like Cancelled they
// carry neither due time nor trace headers (the old version is gone from the store).
func (r *Receipts) Replaced(route string, ids []string) {
	r.byID(route, ids, ReceiptReplaced)
}

func (r *Receipts) byID(route string, ids []string, outcome string) {
	if r == nil {
		return
	}
	rr, ok := r.routes[route]
	if !ok || len(ids) == 0 {
		return
	}
	at := stamp(r.clk.Now())
	out := make([]*envelope.Envelope, 0, len(ids))
	for _, id := range ids {
		out = append(out, r.envelope(&envelope.Envelope{ID: id, Route: route}, Receipt{Outcome: outcome, At: at}))
	}
	r.side.OfferTo(rr.Broker, out)
}

// envelope wraps receipt rc of env as the message the receipts target publishes: key
// the message id, payload the JSON, headers traceparent and x-correlation-id (the
// message's, or its AMQP correlation_id), AMQP properties content type JSON, the
// correlation id and message id; routing key "<route>.<outcome>".
func (r *Receipts) envelope(env *envelope.Envelope, rc Receipt) *envelope.Envelope {
	rc.V, rc.ID, rc.Route = ReceiptVersion, env.ID, env.Route
	var hs []envelope.Header
	if v, ok := headerText(env, HeaderTraceparent); ok {
		rc.Traceparent = v
		hs = append(hs, envelope.Header{Key: HeaderTraceparent, Value: v})
	}
	if v, ok := headerText(env, HeaderCorrelationID); ok {
		rc.Correlation = v
	} else if env.AMQP != nil && env.AMQP.CorrelationID != "" {
		rc.Correlation = env.AMQP.CorrelationID
	}
	if rc.Correlation != "" {
		hs = append(hs, envelope.Header{Key: HeaderCorrelationID, Value: rc.Correlation})
	}
	payload := rc.AppendJSON(make([]byte, 0, 384))
	return &envelope.Envelope{
		ID: env.ID, Route: env.Route, Key: []byte(env.ID), RoutingKey: env.Route + "." + rc.Outcome,
		Payload: payload, Headers: hs,
		AMQP: &envelope.AMQPProperties{ContentType: "application/json", DeliveryMode: 2, CorrelationID: rc.Correlation,
			MessageID: env.ID, Type: "delay-bridge.receipt." + rc.Outcome},
	}
}

// headerText is header key of env as text ("" values count as absent).
func headerText(env *envelope.Envelope, key string) (string, bool) {
	v, ok := env.Header(key)
	if !ok || v == nil {
		return "", false
	}
	var s string
	switch x := v.(type) {
	case string:
		s = x
	case []byte:
		s = string(x)
	default:
		s = fmt.Sprint(x)
	}
	return s, s != ""
}

func stamp(t time.Time) string { return t.UTC().Format(stampLayout) }

const stampLayout = "2006-01-02T15:04:05.000Z07:00"

func stampMs(ms int64) string { return stamp(time.UnixMilli(ms)) }
