// Package kafka is the Kafka sink (import it as kafkaout): it republishes fired messages
// with segmentio/kafka-go's protocol API (produce requests sent through the
// *kafka.Transport of Conn, so TLS and SASL are the transport's) for every route that
// targets Kafka.
//
// Write path. A publish resolves each message's topic, fails alone any record larger
// than BatchBytes (measured as kafka-go's Writer did), picks each record's partition
// with kafka-go's Murmur2Balancer (a key lands on the same partition as with the Java
// client's default partitioner) over the topic's partitions, and sends one produce
// request per partition leader (several at once when a leader's share exceeds
// BatchSize; a partition's records always travel together, in batch order), all
// leaders at once, with RequiredAcks all (the broker confirms only once every in-sync
// replica has the record). Records carry no timestamp of their own, so the encoder
// stamps the time of sending as the Writer did. Partitions and leaders come from the
// transport's cluster metadata, cached per topic for a few seconds; an answer that
// means stale metadata (not the leader, unknown partition) drops the entry and makes
// the transport read the cluster again at once. There is no automatic topic creation:
// a missing target topic fails its own records (unroutable), retried by the dispatcher
// and then dead-lettered; a topic created meanwhile is seen once the transport's own
// refresh (every 6 s at most) lists it.
//
// No re-sends of unknown outcome. A produce request waits up to AnswerTimeout for its
// answer (the broker is asked to give up on its replicas after half of it); one left
// without an answer fails with fault.ErrUnknownOutcome, which the completer does not
// re-send at once, because a stalled broker may still apply it when it wakes. The sink
// writes again within one Publish only records that surely were not appended (no
// connection could be made, or the broker answered with a retriable error code that
// means "not appended"), after a backoff on the sink's clock.
//
// One bad record never fails its neighbours: an oversized record fails before sending,
// and when the broker refuses a partition's set as too large the sink writes those
// records again one by one, in order, so only the culprit fails.
//
// Health. A background probe (owned by the sink, stopped by Close) reads the cluster
// metadata from the brokers every ProbeInterval; Healthy reports the latest of the
// probe's and the publishes' results.
//
// Each message goes to env.Target if set, else to the default topic of env.Route; key and
// payload are unchanged and the headers are egress.OutgoingHeaders rendered with
// egress.HeaderBytes.
package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/fault"
)

// HeaderDeadReason carries why a message was dead-lettered, on dead-letter copies.
const HeaderDeadReason = "x-delay-dead-reason"

// ErrClosed is returned for messages published after Close.
var ErrClosed = errors.New("kafka sink closed")

// Sink publishes to Kafka. It implements egress.Sink and egress.HealthChecker and is
// safe for concurrent use.
type Sink struct {
	tr            *kafka.Transport
	addr          net.Addr
	meta          metaCache
	balancer      kafka.Balancer
	batchBytes    int64
	batchSize     int
	requestBytes  int64
	answerTimeout time.Duration
	routes        map[string]string
	log           *slog.Logger
	clk           clock.Clock
	closed        atomic.Bool
	once          sync.Once
	// publishing is held (read) by every publish and taken by Close, which so waits for
	// the publishes in flight: a publish after the transport was released would build
	// a new connection pool that nothing stops.
	publishing sync.RWMutex
	health     health

	stopProbe context.CancelFunc
	probeDone chan struct{}
}

var (
	_ egress.Sink          = (*Sink)(nil)
	_ egress.HealthChecker = (*Sink)(nil)
)

// New returns a sink for the brokers of cfg. routes maps each route name that targets
// Kafka to its default topic (to.kafka.topic). It checks cfg, opts (defaults filled
// in, then Options.Validate) and routes, errors marked fault.Permanent, and starts the
// health probe; records are dialed for on the first Publish.
func New(cfg Conn, routes map[string]string, opts Options) (*Sink, error) {
	opts = opts.withDefaults()
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if cfg == nil {
		return nil, fault.Permanent(errors.New("egress/kafka: no Kafka connection (Conn)"))
	}
	tr, err := cfg.NewTransport()
	if err != nil {
		return nil, fault.Permanent(fmt.Errorf("egress/kafka: %w", err))
	}
	rt := make(map[string]string, len(routes))
	for name, topic := range routes {
		if topic == "" {
			return nil, fault.Permanent(fmt.Errorf("egress/kafka: route %q: empty default topic", name))
		}
		rt[name] = topic
	}
	addr := kafka.TCP(cfg.Addrs()...)
	s := &Sink{
		tr: tr, addr: addr, meta: metaCache{tr: tr, addr: addr}, balancer: &kafka.Murmur2Balancer{},
		batchBytes: opts.BatchBytes, batchSize: opts.BatchSize, requestBytes: opts.RequestBytes, answerTimeout: opts.AnswerTimeout,
		routes: rt, log: opts.Logger.With("sink", "kafka"), clk: opts.Clock, probeDone: make(chan struct{}),
	}
	s.health.err = errors.New("kafka: brokers not probed yet")
	ctx, cancel := context.WithCancel(context.Background())
	s.stopProbe = cancel
	go s.probe(ctx, cfg, opts.ProbeInterval)
	return s, nil
}

// Publish implements egress.Sink.
func (s *Sink) Publish(ctx context.Context, msgs []*envelope.Envelope) []error {
	return s.publish(ctx, msgs, func(env *envelope.Envelope) (string, error) {
		if env.Target != "" {
			return env.Target, nil
		}
		if t, ok := s.routes[env.Route]; ok {
			return t, nil
		}
		return "", fault.Permanent(fmt.Errorf("kafka: route %q has no kafka target and the message names none", env.Route))
	}, func(env *envelope.Envelope) []kafka.Header {
		return outgoingKafkaHeaders(env, env.Attempt+1)
	}, true)
}

// Close stops the health probe, waits for the publishes in flight (each request at
// most AnswerTimeout) and releases the transport's connections. Publish afterwards
// fails with ErrClosed. Close may be called more than once.
func (s *Sink) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		s.stopProbe()
		<-s.probeDone
		s.publishing.Lock()
		s.tr.CloseIdleConnections()
		s.publishing.Unlock()
	})
	return nil
}

// DeadLetters returns a publisher of dead-letter copies to topic (dead_letter.kafka.topic)
// through this sink.
func (s *Sink) DeadLetters(topic string) *DeadLetters { return &DeadLetters{s: s, topic: topic} }

// DeadLetters publishes dead-letter copies to one topic: key and payload unchanged, the
// egress headers with x-delay-attempt = the attempts made, and x-delay-dead-reason.
type DeadLetters struct {
	s     *Sink
	topic string
}

// Topic is the dead-letter topic.
func (d *DeadLetters) Topic() string { return d.topic }

// Publish returns one error per message, like egress.Sink.Publish.
func (d *DeadLetters) Publish(ctx context.Context, envs []*envelope.Envelope) []error {
	return d.s.publish(ctx, envs, func(*envelope.Envelope) (string, error) {
		if d.topic == "" {
			return "", fault.Permanent(errors.New("kafka: no dead-letter topic configured"))
		}
		return d.topic, nil
	}, func(env *envelope.Envelope) []kafka.Header {
		h := egress.OutgoingHeaders(env, env.Attempt)
		return kafkaHeaders(append(h, envelope.Header{Key: HeaderDeadReason, Value: env.Reason}))
	}, false)
}

// PublishDead publishes envs and returns the failures joined (nil when all arrived).
func (d *DeadLetters) PublishDead(ctx context.Context, envs []*envelope.Envelope) error {
	var failed []error
	for i, err := range d.Publish(ctx, envs) {
		if err != nil {
			failed = append(failed, fmt.Errorf("dead letter %q: %w", envs[i].ID, err))
		}
	}
	return errors.Join(failed...)
}

// Receipts returns a publisher of delivery receipts (egress.Receipts) through this
// sink: each receipt goes to topics[its route], key = the message id, headers exactly
// the receipt's (traceparent, x-correlation-id), nothing added.
func (s *Sink) Receipts(topics map[string]string) *Receipts {
	return &Receipts{s: s, topics: maps.Clone(topics)}
}

// Receipts publishes receipts to each route's receipts topic.
type Receipts struct {
	s      *Sink
	topics map[string]string
}

// Publish returns one error per receipt, like egress.Sink.Publish.
func (r *Receipts) Publish(ctx context.Context, envs []*envelope.Envelope) []error {
	return r.s.publish(ctx, envs, func(env *envelope.Envelope) (string, error) {
		if t, ok := r.topics[env.Route]; ok {
			return t, nil
		}
		return "", fault.Permanent(fmt.Errorf("kafka: route %q has no receipts topic", env.Route))
	}, func(env *envelope.Envelope) []kafka.Header { return kafkaHeaders(env.Headers) }, false)
}

// publish builds the records and writes them; errs has one slot per message. With
// place, each confirmed message's envelope gets its Placed (partition and offset).
func (s *Sink) publish(ctx context.Context, msgs []*envelope.Envelope, topicOf func(*envelope.Envelope) (string, error), headersOf func(*envelope.Envelope) []kafka.Header, place bool) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	fail := func(err error) []error {
		for i := range errs {
			if errs[i] == nil {
				errs[i] = err
			}
		}
		return errs
	}
	s.publishing.RLock()
	defer s.publishing.RUnlock()
	if s.closed.Load() {
		return fail(ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return fail(fmt.Errorf("kafka: publish: %w", err))
	}
	recs := make([]record, 0, len(msgs))
	for i, env := range msgs {
		topic, err := topicOf(env)
		if err != nil {
			errs[i] = err
			continue
		}
		rec := record{topic: topic, key: kafkaKey(env), value: env.Payload, headers: headersOf(env), slot: i}
		if place {
			env.Placed = nil
			rec.placed = &env.Placed
		}
		if size := recordSize(&rec); size > s.batchBytes {
			errs[i] = classify(topic, kafka.MessageTooLargeError{Message: kafka.Message{Topic: topic, Key: rec.key, Value: rec.value, Headers: rec.headers}})
			continue
		}
		recs = append(recs, rec)
	}
	if len(recs) > 0 {
		s.writeRetrying(ctx, recs, errs)
	}
	return errs
}

// Retries within one Publish of records surely not applied (see retrySafe).
const (
	safeRetries    = 3
	safeBackoffMin = 20 * time.Millisecond
	safeBackoffMax = time.Second
)

// writeRetrying writes recs and writes again, up to safeRetries times with backoff
// (on the sink's clock), the records whose failure surely left them unwritten (a leader
// change, a connection that could not be made). It reports the brokers' reachability
// to the health state.
func (s *Sink) writeRetrying(ctx context.Context, recs []record, errs []error) {
	var bo *clock.Backoff // made on the first retry: most publishes need none
	for try := 0; ; try++ {
		s.write(ctx, recs, errs)
		var again []record
		answered, down := false, -1
		for _, rec := range recs {
			err := errs[rec.slot]
			if err == nil {
				answered = true
				continue
			}
			var kerr kafka.Error
			switch {
			case errors.As(err, &kerr):
				answered = true
			case errors.Is(err, fault.ErrUnreachable):
				down = rec.slot
			}
			if retrySafe(err) {
				again = append(again, rec)
			}
		}
		if answered {
			s.health.report(s.log, nil)
		} else if down >= 0 {
			s.health.report(s.log, fmt.Errorf("kafka brokers unreachable: %w", errs[down]))
		}
		if len(again) == 0 || try >= safeRetries {
			return
		}
		if bo == nil {
			bo = clock.NewBackoff(s.clk, clock.BackoffPolicy{Initial: safeBackoffMin, Max: safeBackoffMax})
		}
		if bo.Wait(ctx) != nil {
			return
		}
		if s.closed.Load() {
			for _, rec := range again {
				errs[rec.slot] = classify(rec.topic, ErrClosed)
			}
			return
		}
		for _, rec := range again {
			errs[rec.slot] = nil
		}
		recs = again
	}
}

// classify marks a publish error with its internal/fault class: permanent (retrying
// cannot help), unroutable (no such topic), unknown outcome (the request may still be
// applied: no answer in time on a connection that may live on, or the broker timed out
// waiting for replicas), rejected (any other error code the broker answered with) or
// unreachable (no connection could be made, or it closed under the request).
func classify(topic string, err error) error {
	var tooLarge kafka.MessageTooLargeError
	var kerr kafka.Error
	var class error
	switch {
	case errors.As(err, &tooLarge):
		return fault.Permanent(fmt.Errorf("kafka: publish to %q: %w", topic, err))
	case errors.As(err, &kerr):
		switch kerr {
		case kafka.MessageSizeTooLarge, kafka.InvalidTopic, kafka.RecordListTooLarge, kafka.InvalidRecord:
			return fault.Permanent(fmt.Errorf("kafka: publish to %q: %w: %w", topic, fault.ErrRejected, err))
		case kafka.UnknownTopicOrPartition:
			class = fault.ErrUnroutable
		case kafka.RequestTimedOut, kafka.NotEnoughReplicasAfterAppend:
			class = fault.ErrUnknownOutcome
		default:
			class = fault.ErrRejected
		}
	case errors.Is(err, ErrClosed):
		return fmt.Errorf("kafka: publish to %q: %w", topic, err)
	case notSent(err) || fault.ReasonOf(err) == fault.ReasonUnreachable:
		// Refused, or the connection closed under the request: whatever the broker had
		// not applied it dropped with the connection, so a re-send cannot meet a late
		// first write.
		class = fault.ErrUnreachable
	case fault.ReasonOf(err) == fault.ReasonTimeout || errors.Is(err, context.Canceled):
		class = fault.ErrUnknownOutcome
	default:
		return fmt.Errorf("kafka: publish to %q: %w", topic, err)
	}
	return fmt.Errorf("kafka: publish to %q: %w: %w", topic, class, err)
}

// notSent reports whether err surely means the request never reached a broker: the
// connection could not be made. Only these are written again within one Publish.
func notSent(err error) bool {
	var operr *net.OpError
	return errors.As(err, &operr) && operr.Op == "dial" || errors.Is(err, syscall.ECONNREFUSED)
}

// retrySafe reports whether a classified error surely left the broker without the
// record (no connection; or an error code that means "not appended", such as a leader
// change), so writing it again at once cannot duplicate it.
func retrySafe(err error) bool {
	if notSent(err) {
		return true
	}
	var kerr kafka.Error
	return errors.As(err, &kerr) && kerr.Temporary() && !fault.IsUnknownOutcome(err)
}
