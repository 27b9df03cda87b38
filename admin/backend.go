// Package admin is the bridge's HTTP admin API (docs/CONTRACT.md §6): scheduling, lookup, cancel
// and reschedule by id, statistics, the dead letters, health and readiness, and the
// Prometheus metrics. The server works over the Backend interface, which
// app/adminapi implements (app hands it the running parts); Client is the
// Go client that `bridge ctl` uses.
//
// Routes (JSON in and out; every error is {"error": "...", "field"?: "..."}):
//
//	POST   /v1/messages                 schedule            201 new, 200 duplicate id
//	GET    /v1/messages/{id}            look up             200, 404
//	DELETE /v1/messages/{id}            cancel              200 {id, prior_state}, 404 (unknown:
//	                                                        nothing recorded), 409 {error,
//	                                                        id, prior_state}
//	POST   /v1/messages/{id}/reschedule new due time        200 {id, due_at}, 404, 409
//	GET    /v1/messages?filter…         browse              200 {messages, count, next_cursor}
//	GET    /v1/stats                    shard/route counts  200
//	GET    /v1/routes                   per-route state     200
//	GET    /v1/lateness?window=D        delivery lateness   200 p50/p99 per route
//	GET    /v1/dead?filter…             dead letters        200 {messages, count, next_cursor}
//	POST   /v1/dead/{id}/requeue        dead -> due now     200 {id, due_at}, 404
//	DELETE /v1/dead?route=R             purge dead letters  200 {purged: n}
//	POST   /v1/jobs                     bulk job            202 job, 200 dry-run preview
//	GET    /v1/jobs, /v1/jobs/{id}      job state           200, 404
//	GET    /v1/openapi.json             this API            OpenAPI 3 document
//	GET    /ui/                         web console         HTML, JS, CSS
//	GET    /healthz                     alive               200 while the process serves
//	GET    /readyz                      Backend.Ready       200, or 503 {error: reason}
//	GET    /metrics                     Prometheus          text exposition
//
// With a token configured every /v1/ route needs "Authorization: Bearer <token>" (401
// otherwise); /healthz, /readyz and /metrics stay open so probes and scrapers need no
// secret — put the admin listener on a private address or network policy if metrics
// are sensitive. /v1/openapi.json and the console's static files (/ui/) are open too:
// they hold no data, and the console sends the token on every API call it makes.
// Backend failures map to status codes by sentinel error: ErrInvalid 400, ErrNotFound
// 404, ErrConflict 409, ErrNotImplemented 501, ErrUnavailable 503, anything else 500.
package admin

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Message states, as reported by Get and Cancel.
const (
	StatePending  = "pending"  // parked in Redis, waiting for its due time
	StateInflight = "inflight" // claimed by an owner, being fired and published
	StateDead     = "dead"     // in the dead letters (Reason says why)
	// StateDelivered: published (broker-confirmed), remembered for
	// scheduler.done_window.
	StateDelivered = "delivered"
	// StateCancelled: cancelled (over HTTP or by an x-delay-cancel record, also one
	// that arrived before its message), remembered for scheduler.done_window.
	StateCancelled = "cancelled"
)

// Sentinel errors a Backend returns (wrapped, with %w, so errors.Is finds them).
var (
	// ErrNotFound: no message with that id (or none in the state the call needs, for
	// RequeueDead). HTTP 404.
	ErrNotFound = errors.New("not found")
	// ErrInvalid: the request is wrong; return it through Invalid so the field is named.
	// HTTP 400.
	ErrInvalid = errors.New("invalid request")
	// ErrConflict: the message exists but its state does not allow the operation (for
	// example rescheduling a message that is being published). HTTP 409.
	ErrConflict = errors.New("conflict")
	// ErrUnavailable: a dependency (Redis) cannot be reached; the client may retry.
	// HTTP 503.
	ErrUnavailable = errors.New("unavailable")
	// ErrNotImplemented: this backend does not do the operation yet (wrap it with a
	// sentence saying what is missing). HTTP 501, so nothing silently succeeds.
	ErrNotImplemented = errors.New("not implemented")
)

// InvalidError is an ErrInvalid naming the offending request field (JSON name, such as
// "route", "deliver_at", "payload").
type InvalidError struct {
	Field string
	Msg   string
}

func (e *InvalidError) Error() string { return e.Field + ": " + e.Msg }

// Is makes errors.Is(err, ErrInvalid) true.
func (e *InvalidError) Is(target error) bool { return target == ErrInvalid }

// Invalid returns an *InvalidError for field.
func Invalid(field, format string, args ...any) error {
	return &InvalidError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// When is a due time as a client gave it. If DeliverAt is non-zero it is the due time;
// otherwise the due time is the backend's now + Delay (Delay <= 0 means due now). This
// is the meaning of the x-deliver-at and x-delay headers (docs/CONTRACT.md §2).
type When struct {
	Delay     time.Duration
	DeliverAt time.Time
}

// ScheduleRequest is one message submitted over HTTP.
type ScheduleRequest struct {
	// ID is the message id (x-message-id); "" = the backend generates a unique one.
	ID string
	// Route names a configured route; the message goes to that route's target.
	Route string
	// Key is the Kafka key (nil = none). RoutingKey is the AMQP routing key ("" = the
	// route's to.amqp.routing_key, if any).
	Key        []byte
	RoutingKey string
	Payload    []byte
	// Headers are added to the message as string headers. The delay is never read from
	// them: x-delay, x-deliver-at and the other x-delay-* headers are the bridge's own.
	Headers map[string]string
	When    When
	// Replace: replace the message with this id on this route (x-delay-replace).
	Replace bool
}

// Scheduled is the result of Schedule, Reschedule and RequeueDead.
type Scheduled struct {
	ID    string `json:"id"`
	DueAt int64  `json:"due_at"` // unix milliseconds
	// Duplicate is set by Schedule when the id was already known (pending, in flight,
	// dead, delivered or cancelled): nothing was changed and DueAt is the existing
	// message's due time (0 unless it is pending).
	Duplicate bool `json:"duplicate,omitempty"`
	// Replaced is set by Schedule with Replace when the message took the place of the
	// pending, in-flight or dead message with its id; DueAt is the new due time.
	Replaced bool `json:"replaced,omitempty"`
}

// Message describes one message. Times are unix milliseconds.
type Message struct {
	ID    string `json:"id"`
	State string `json:"state"` // StatePending, StateInflight, StateDead, StateDelivered or StateCancelled
	// The fields below are filled for pending, inflight and dead messages; a delivered
	// or cancelled message has only ID and State (its envelope is gone).
	DueAt        int64             `json:"due_at,omitempty"`
	Route        string            `json:"route,omitempty"`
	Source       string            `json:"source,omitempty"`        // topic, queue or "http"
	SourceBroker string            `json:"source_broker,omitempty"` // kafka, amqp or http
	Target       string            `json:"target,omitempty"`        // x-delay-target override, if any
	ReceivedAt   int64             `json:"received_at,omitempty"`
	Attempt      int               `json:"attempt"`           // publish attempts made so far
	Reason       string            `json:"reason,omitempty"`  // dead letters: why
	DeadAt       int64             `json:"dead_at,omitempty"` // dead letters: when
	Headers      map[string]string `json:"headers,omitempty"` // values rendered as text
	PayloadSize  int               `json:"payload_size"`
	RoutingKey   string            `json:"routing_key,omitempty"` // AMQP routing key
	// Key is the Kafka key as text when it is valid UTF-8, else KeyBase64 (standard
	// base64); both empty = no key. The server fills them from RawKey.
	Key       string `json:"key,omitempty"`
	KeyBase64 string `json:"key_base64,omitempty"`
	// Payload (valid UTF-8) or PayloadBase64 (anything else) shows the payload by id
	// (GET /v1/messages/{id}), at most Options.PayloadCap bytes of it; PayloadTruncated
	// says the cap cut it (PayloadSize is the full size). The server fills them from
	// RawPayload; lists carry neither.
	Payload          *string `json:"payload,omitempty"`
	PayloadBase64    *string `json:"payload_base64,omitempty"`
	PayloadTruncated bool    `json:"payload_truncated,omitempty"`

	// RawKey and RawPayload are what a Backend fills (Get: both; Browse: RawKey, and
	// RawPayload may be nil); they are never sent as such.
	RawKey     []byte `json:"-"`
	RawPayload []byte `json:"-"`
}

// Counts are message counts in one scope.
type Counts struct {
	Pending  int64 `json:"pending"`
	Inflight int64 `json:"inflight"`
	Dead     int64 `json:"dead"`
}

// ShardStats is one shard's state.
type ShardStats struct {
	Shard int `json:"shard"`
	Counts
	NextDue int64  `json:"next_due,omitempty"` // earliest due time in the shard, 0 = none
	Owner   string `json:"owner"`              // instance holding the lease, "" = none
	// Routes are the shard's counts per route (routes with messages), when kept.
	Routes map[string]Counts `json:"routes,omitempty"`
}

// Stats is the answer of GET /v1/stats.
type Stats struct {
	Totals Counts       `json:"totals"`
	Shards []ShardStats `json:"shards"`
	// Routes has per-route counts when the backend can tell them cheaply; nil otherwise.
	Routes map[string]Counts `json:"routes,omitempty"`
	// Instance is the answering instance; Members the live instances (heartbeating).
	Instance string   `json:"instance,omitempty"`
	Members  []string `json:"members,omitempty"`
}

// Backend is what the admin API drives. *app.Bridge implements it. Every method must
// be safe for concurrent use, honour ctx (each HTTP request has a deadline), and report
// failures with the sentinel errors above: ErrInvalid (through Invalid, naming the
// field) for bad input, ErrNotFound, ErrConflict, ErrUnavailable when Redis cannot be
// reached, ErrNotImplemented for an operation it does not do yet (501); any other error
// is reported as an internal error (500).
type Backend interface {
	// Schedule parks one message on req.Route's shard, exactly as if it had arrived on
	// the route's source, with SourceBroker "http" and Source "http". It validates what
	// ingress validates: unknown route, delay beyond limits.max_delay or payload over
	// limits.max_payload_bytes are ErrInvalid naming "route", "delay_ms"/"deliver_at"
	// or "payload". It is idempotent by id: an id that is already pending, in flight,
	// dead, delivered or cancelled is not parked again and Scheduled.Duplicate is set
	// (decided atomically by the park itself, never by reading the state back). It returns once
	// Redis has the message (with redis.min_replicas, once replicas have it).
	Schedule(ctx context.Context, req ScheduleRequest) (Scheduled, error)

	// Get looks a message up by id wherever it is. ErrNotFound if unknown (never seen,
	// or delivered or cancelled longer ago than scheduler.done_window).
	Get(ctx context.Context, id string) (Message, error)

	// Cancel removes a pending, in-flight or dead message, whatever its route, and
	// returns the state it was in. Cancelling an in-flight message is best effort: a
	// publish already under way may still reach the target. ErrNotFound if unknown, and
	// then nothing is recorded (no tombstone: a message with that id arriving later is
	// parked); ErrConflict if it is delivered or cancelled already.
	Cancel(ctx context.Context, id string) (priorState string, err error)

	// Reschedule gives a pending message a new due time (a dead message is requeued at
	// that time, attempt reset). ErrNotFound if unknown; ErrConflict if in flight,
	// delivered or cancelled; ErrInvalid if the new time is beyond limits.max_delay.
	Reschedule(ctx context.Context, id string, when When) (Scheduled, error)

	// Stats reports counts per shard (and per route when cheap) and shard owners.
	Stats(ctx context.Context) (Stats, error)

	// Browse lists messages matching q.Filter (see Filter for each field), q.Limit at
	// most (1 <= Limit <= MaxBrowseLimit; the server checks), after q.Cursor ("" = from
	// the start), across all shards. Pending and in-flight messages are ordered by due
	// time, dead letters by the time they were dead-lettered (oldest first); ties by id.
	// GET /v1/messages calls it with Filter.State "" replaced by "pending"; GET /v1/dead
	// with State "dead".
	//
	// Cost: one page must be bounded whatever is stored (10M pending): bounded range reads
	// per shard, merged, never a scan of everything per page. So a page may hold fewer
	// than Limit messages — even none — while NextCursor is non-empty (filters such as
	// IDPrefix and KeyPrefix are applied to what the bounded reads return); a client pages
	// until NextCursor is "". NextCursor is opaque, valid with the same Filter; a
	// malformed or foreign cursor is Invalid("cursor", …). A filter the backend cannot
	// apply is Invalid naming that field (HTTP 400) — never silently ignored. An unknown
	// Route is Invalid("route", …). Messages carry what Get returns, except the payload
	// (PayloadSize only; RawPayload may be left nil).
	Browse(ctx context.Context, q Query) (Page, error)

	// RequeueDead moves one dead letter back to pending, due now, with its attempt
	// count reset and its reason cleared. ErrNotFound if there is no dead letter with
	// that id.
	RequeueDead(ctx context.Context, id string) (Scheduled, error)

	// PurgeDead deletes the dead letters of route f.Route ("" = every route) and
	// returns how many it deleted. Only Route is set by the server (DELETE /v1/dead
	// accepts no other filter; a filtered purge of other kinds is a job, purge_dead).
	// A route filter the backend cannot apply is Invalid("route", …).
	PurgeDead(ctx context.Context, f Filter) (int64, error)

	// PreviewJob is a dry run of spec (validated by the server: see JobSpec): it
	// counts the messages spec.Filter matches now and returns up to sample of them
	// (sample <= MaxJobSample), changing nothing. Counting may read every matching
	// entry, in bounded batches; it must not block Redis (no single long script).
	PreviewJob(ctx context.Context, spec JobSpec, sample int) (JobPreview, error)

	// StartJob records spec as a new job (state queued) and returns at once; the job
	// runs in the background in bounded batches, so a job over a million messages never
	// blocks Redis or starves firing. Job state lives in Redis: any instance answers
	// GetJob, and a job whose instance died is reported as JobAbandoned (or resumed),
	// never lost. Each matched message counts once in Matched, then in Done or Failed
	// (a message that changed state meanwhile — fired, cancelled — is Failed with a
	// reason in Errors, not an error of the job).
	StartJob(ctx context.Context, spec JobSpec) (Job, error)

	// GetJob returns a job by id; ErrNotFound if unknown (or expired).
	GetJob(ctx context.Context, id string) (Job, error)

	// ListJobs returns up to limit recent jobs, newest first (1 <= limit <= MaxJobList).
	ListJobs(ctx context.Context, limit int) ([]Job, error)

	// Ready returns nil when the instance can do its job (Redis reachable, shard
	// ownership established, every route's ingress consuming and its egress broker
	// reachable) and otherwise an error saying what is missing — preferably a
	// *NotReadyError listing every check; /readyz shows it.
	Ready(ctx context.Context) error
}

// Check is one readiness check (GET /readyz, GET /v1/routes).
type Check struct {
	// Name says what was checked: "redis", "store", "eviction", "shards", "clock",
	// "ingress <route>", "egress <broker>".
	Name string `json:"name"`
	OK   bool   `json:"ok"`
	// Detail says why a check failed; on a passing check, a caveat if any (an evicting
	// Redis policy allowed by redis.allow_eviction, one that could not be read).
	Detail string `json:"detail,omitempty"`
}

// NotReadyError is what Backend.Ready returns when some check failed; /readyz lists
// every check in its body. Error names the failing ones.
type NotReadyError struct {
	Checks []Check
}

func (e *NotReadyError) Error() string {
	var b strings.Builder
	for _, c := range e.Checks {
		if c.OK {
			continue
		}
		if b.Len() > 0 {
			b.WriteString("; ")
		}
		b.WriteString(c.Name)
		if c.Detail != "" {
			b.WriteString(": ")
			b.WriteString(c.Detail)
		}
	}
	return b.String()
}

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *NotReadyError) Is(target error) bool { return target == ErrUnavailable }

// IngressStatus is a route's consumer as GET /v1/routes shows it.
type IngressStatus struct {
	Source string `json:"source"` // kafka:<topic> or amqp:<queue>
	// State: starting, consuming, joining, stalled, unreachable or stopped. Only
	// consuming is ready.
	State  string    `json:"state"`
	Detail string    `json:"detail,omitempty"`
	Since  time.Time `json:"since,omitzero"`
	// Partitions are the Kafka partitions this instance owns (their leases).
	Partitions []int `json:"partitions,omitempty"`
	// PartitionStates: each owned Kafka partition as its owner sees it.
	PartitionStates []PartitionStatus `json:"partition_states,omitempty"`
	// Lag: Kafka end offset minus committed offset over the owned partitions; AMQP
	// queue depth; -1 unknown.
	Lag int64 `json:"lag"`
	// Rebuilds: AMQP consumers rebuilt by the stall watchdog; Kafka partition readers
	// reset (offset out of range) or replaced (stall).
	Rebuilds int `json:"rebuilds"`
}

// PartitionStatus is one owned Kafka partition: state owned (lease held, reader being
// set up), fetching, lagging (lag without progress) or unreachable.
type PartitionStatus struct {
	Partition int       `json:"partition"`
	State     string    `json:"state"`
	Detail    string    `json:"detail,omitempty"`
	Since     time.Time `json:"since,omitzero"`
	Lag       int64     `json:"lag"`       // end offset minus committed; -1 unknown
	Committed int64     `json:"committed"` // last committed (or started from) by this owner; -1 unknown
	Resets    int       `json:"resets"`
}

// EgressStatus is a route's target broker as GET /v1/routes shows it.
type EgressStatus struct {
	Broker    string `json:"broker"` // kafka or amqp
	Target    string `json:"target"` // topic or exchange
	Reachable bool   `json:"reachable"`
	Detail    string `json:"detail,omitempty"`
}

// RouteStatus is one route in GET /v1/routes, as seen by the answering instance.
type RouteStatus struct {
	Name    string        `json:"name"`
	Ingress IngressStatus `json:"ingress"`
	Egress  EgressStatus  `json:"egress"`
	// Ready is true when the ingress is consuming and the egress broker is reachable.
	Ready bool `json:"ready"`
	// Counts and NextDue (unix ms, 0 = nothing pending) are the route's messages
	// cluster-wide, when the backend keeps them incrementally (never by a full scan);
	// nil / 0 when it does not.
	Counts  *Counts `json:"counts,omitempty"`
	NextDue int64   `json:"next_due,omitempty"`
}

// RoutesResponse is the body of GET /v1/routes.
type RoutesResponse struct {
	Instance string        `json:"instance,omitempty"`
	Routes   []RouteStatus `json:"routes"`
}

// RouteLister is implemented by backends that report per-route state (GET /v1/routes;
// 404 on backends without it). Routes must not call the brokers: it reports the last
// known state, so it is cheap and never blocks on a broker that is down.
type RouteLister interface {
	Routes(ctx context.Context) (RoutesResponse, error)
}
