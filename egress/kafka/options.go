package kafka

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/fault"
)

// Defaults for Options.
const (
	// DefaultBatchTimeout is no linger at all. The dispatcher already batches: each of
	// its workers takes everything fired since its last publish, so a publish is a
	// batch while a call is in flight and a lone message when idle. kafka-go's timer
	// on top only held every partition batch for that long (1 ms was half the median
	// publish at 1k msgs/s: docs/BENCHMARKS.md, issue 11). A batch holds whatever one
	// WriteMessages call gives a partition: the timer cannot fire before the call has
	// added all of its records (both take the partition's lock).
	DefaultBatchTimeout = time.Nanosecond
	// DefaultBatchSize is small on purpose: kafka-go allocates every partition batch with
	// room for BatchSize messages (about 150 B each) however few it ends up holding, so at
	// 1000 a lone message fired at a low rate cost a 150 KB allocation, which made the
	// garbage collector a quarter of the bridge's CPU (docs/BENCHMARKS.md, issue 11). A
	// full batch is sent at once and the next one fills meanwhile, so a large publish
	// becomes several produce requests per partition.
	DefaultBatchSize  = 128
	DefaultBatchBytes = 16 << 20

	DefaultAnswerTimeout = 30 * time.Second
	DefaultProbeInterval = 5 * time.Second
)

// Options tunes a Sink. Zero values take the defaults; negative ones are refused.
type Options struct {
	Logger *slog.Logger // default slog.Default()
	// BatchTimeout is how long a partition's batch waits for more messages; default
	// 1ns (no linger, see DefaultBatchTimeout).
	BatchTimeout time.Duration
	// BatchSize is the most messages per partition batch; default 128.
	BatchSize int
	// BatchBytes is the most bytes per partition batch; a single record larger than this
	// fails permanently. Default 16 MiB (the broker's own message.max.bytes applies too).
	BatchBytes int64
	// AnswerTimeout is how long one produce request waits for the broker's answer before
	// its outcome is unknown; default 30s. Keep it at least the dispatcher's publish
	// timeout, so a stalled broker is waited for rather than written to again.
	AnswerTimeout time.Duration
	// ProbeInterval is the period of the health probe; default 5s. Each probe gives up
	// after ProbeInterval (at most 10s).
	ProbeInterval time.Duration
	// Clock times the probe and the waits between safe retries; default clock.Real.
	Clock clock.Clock
}

func (o Options) withDefaults() Options {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.BatchTimeout == 0 {
		o.BatchTimeout = DefaultBatchTimeout
	}
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.BatchBytes == 0 {
		o.BatchBytes = DefaultBatchBytes
	}
	if o.AnswerTimeout == 0 {
		o.AnswerTimeout = DefaultAnswerTimeout
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = DefaultProbeInterval
	}
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	return o
}

// Validate checks o as New uses it (defaults filled in): every size and duration
// positive. Its errors are permanent.
func (o Options) Validate() error {
	if o.BatchSize <= 0 || o.BatchBytes <= 0 {
		return fault.Permanent(fmt.Errorf("egress/kafka: batch size %d, batch bytes %d: want positive", o.BatchSize, o.BatchBytes))
	}
	if o.BatchTimeout <= 0 || o.AnswerTimeout <= 0 || o.ProbeInterval <= 0 {
		return fault.Permanent(fmt.Errorf("egress/kafka: batch timeout %v, answer timeout %v, probe interval %v: want positive durations",
			o.BatchTimeout, o.AnswerTimeout, o.ProbeInterval))
	}
	return nil
}
