// Package conformance is the one test suite every ingress.Source and every egress.Sink
// must pass (docs/CONTRACT.md §7), whatever the broker. It is modelled on watermill's pubsub test
// suite: a broker package plugs its implementation in through a small harness and calls
// RunSourceSuite or RunSinkSuite from a test:
//
//	func TestConformance(t *testing.T) {
//		conformance.RunSourceSuite(t, conformance.SourceHarness{
//			Broker: envelope.BrokerKafka,
//			Keys:   true,
//			Fresh:  func(t *testing.T) conformance.SourceFixture { ... },
//		})
//	}
//
// The harness talks to a real broker (kfake in process for Kafka, the RabbitMQ server for
// AMQP) with unique names per fixture, and uses a client other than the implementation
// under test to produce to a source and to read what a sink published. It is
// broker-neutral: records are produced with text headers, and what arrived at a sink's
// target is returned with text headers (render typed AMQP values with egress.HeaderBytes).
//
// Nothing here asserts timings beyond generous "arrived within" bounds.
package conformance

import (
	"fmt"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/ingress"
)

// Generous bounds: a case fails only when something is clearly stuck, never because a
// busy CI machine is slow.
const (
	// ArriveWithin bounds how long a case waits for records to be handed over or to
	// arrive at a target (includes consumer-group joins and first-connect latency).
	ArriveWithin = 60 * time.Second
	// StopWithin bounds how long Run may take to return after its context is cancelled.
	StopWithin = 15 * time.Second
)

// SourceHarness plugs one broker's Source into RunSourceSuite.
type SourceHarness struct {
	// Broker is the value every item's Env.SourceBroker must carry (envelope.BrokerKafka,
	// envelope.BrokerAMQP).
	Broker string
	// Keys reports whether a record key travels to Env.Key (Kafka). When false the suite
	// still produces keys (an AMQP harness may use them as routing keys or ignore them)
	// but does not check Env.Key.
	Keys bool
	// Fresh creates a new, empty delay source with unique names (a one-partition topic and
	// a consumer group, or a queue) and returns a fixture for it. Cleanup is the
	// harness's business (t.Cleanup).
	Fresh func(t *testing.T) SourceFixture
}

// SourceFixture is one fresh delay source.
type SourceFixture struct {
	// Source is the topic or queue name; every item's Env.Source must equal it.
	Source string
	// NewSource returns a new Source consuming the fixture. Every call consumes the same
	// source on behalf of the same consumer (same Kafka group, same AMQP queue), so a second
	// Source created after the first one's Run returned models a restart of the bridge.
	// The suite runs at most one Source of a fixture at a time. The Source must use
	// the default limits (config.Default().Limits) and a route without allow_targets:
	// InvalidAndCancelRecordsAreHandedOver relies on both. It must hand a failed batch
	// again in process (ingress.Loop) at least three times before giving it back to the
	// broker: FailedBatchIsHandedAgainUnchanged checks those calls get the same items.
	NewSource func(t *testing.T) ingress.Source
	// Produce publishes one record to the source and returns once the broker has it.
	// Records produced one after another must be consumed in that order.
	Produce func(t *testing.T, key, payload []byte, headers map[string]string)
}

// SinkHarness plugs one broker's Sink into RunSinkSuite.
type SinkHarness struct {
	// Broker names the broker in failure messages.
	Broker string
	// Keys reports whether Env.Key is published as the message key (Kafka) and must come
	// back in Received.Key.
	Keys bool
	// Fresh creates a new target with a unique name, a way to read it, and a new Sink that
	// knows the fixture's Route with Target as its default. Cleanup (including closing
	// the Sink) is the harness's business; the suite may itself close the Sink first, so
	// Close must tolerate a second call.
	Fresh func(t *testing.T) SinkFixture
}

// SinkFixture is one fresh target and a sink publishing to it.
type SinkFixture struct {
	Sink egress.Sink
	// Route is a route name the sink knows, whose default target is Target.
	Route string
	// Target is the fixture's target (topic, exchange). The suite publishes to it both
	// through Route's default and through Env.Target.
	Target string
	// MissingTarget names a target that does not exist on the broker. Publishing to it
	// must fail (an error in that message's slot), not hang and not succeed.
	MissingTarget string
	// Consume returns the next n messages that arrived at Target, waiting up to timeout,
	// and fails the test (t.Fatalf) when fewer arrived. Successive calls continue where
	// the previous one stopped. Header values are text: Kafka header bytes as they are,
	// AMQP table values rendered with egress.HeaderBytes.
	Consume func(t *testing.T, n int, timeout time.Duration) []Received
}

// Received is one message read back from a sink's target.
type Received struct {
	Key     []byte
	Payload []byte
	Headers map[string]string
}

// RunSourceSuite runs every source case against h, each as a subtest on a fresh fixture.
func RunSourceSuite(t *testing.T, h SourceHarness) {
	t.Helper()
	if h.Fresh == nil || h.Broker == "" {
		t.Fatal("conformance: SourceHarness needs Broker and Fresh")
	}
	for _, c := range sourceCases {
		t.Run(c.name, func(t *testing.T) { c.run(t, h) })
	}
}

// RunSinkSuite runs every sink case against h, each as a subtest on a fresh fixture.
func RunSinkSuite(t *testing.T, h SinkHarness) {
	t.Helper()
	if h.Fresh == nil {
		t.Fatal("conformance: SinkHarness needs Fresh")
	}
	for _, c := range sinkCases {
		t.Run(c.name, func(t *testing.T) { c.run(t, h) })
	}
}

// uniq returns a prefix unique to one case run, for message ids.
func uniq(t *testing.T) string {
	return fmt.Sprintf("%s-%d", t.Name(), time.Now().UnixNano())
}
