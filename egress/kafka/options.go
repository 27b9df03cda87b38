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
	// DefaultBatchSize is the most records in one produce request. A publish goes out as
	// one request per partition leader; a leader's share larger than this becomes
	// several requests sent at once, each with whole partitions (a partition's records
	// stay in one request, in order). On a real cluster separate requests are handled
	// in parallel (partitions of one request one after the other), as the Writer's
	// per-partition batches of up to 128 were; against kfake, which handles every
	// request on one goroutine, 128, 256 and no split measured the same at 1000
	// messages per publish (BenchmarkWritePath).
	DefaultBatchSize  = 256
	DefaultBatchBytes = 16 << 20
	// DefaultRequestBytes bounds one produce request by its records' bytes: the request
	// is encoded whole before it is sent, a second copy of what it carries beside the
	// envelopes the scheduler holds (scheduler.max_in_memory_bytes), so a publish of many
	// large messages goes out in requests of up to this size instead of one copy of all.
	DefaultRequestBytes = 4 << 20

	DefaultAnswerTimeout = 30 * time.Second
	DefaultProbeInterval = 5 * time.Second
)

// Options tunes a Sink. Zero values take the defaults; negative ones are refused.
type Options struct {
	Logger *slog.Logger // default slog.Default()
	// BatchSize is the most records in one produce request; default 256 (see
	// DefaultBatchSize).
	BatchSize int
	// BatchBytes is the most bytes of one record (as kafka-go's Writer measures it): a
	// larger one fails permanently before sending. Default 16 MiB; the broker's own
	// message.max.bytes applies to each partition's set of records too (a set it
	// refuses is written again record by record, so only a culprit fails).
	BatchBytes int64
	// RequestBytes is the most bytes of records in one produce request; default 4 MiB
	// (see DefaultRequestBytes). A partition's records beyond it go in the next request
	// of that partition, sent once the one before is appended (order kept); a single
	// record larger than it goes alone.
	RequestBytes int64
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
	if o.BatchSize == 0 {
		o.BatchSize = DefaultBatchSize
	}
	if o.BatchBytes == 0 {
		o.BatchBytes = DefaultBatchBytes
	}
	if o.RequestBytes == 0 {
		o.RequestBytes = DefaultRequestBytes
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
	if o.BatchSize <= 0 || o.BatchBytes <= 0 || o.RequestBytes <= 0 {
		return fault.Permanent(fmt.Errorf("egress/kafka: batch size %d, batch bytes %d, request bytes %d: want positive",
			o.BatchSize, o.BatchBytes, o.RequestBytes))
	}
	if o.AnswerTimeout <= 0 || o.ProbeInterval <= 0 {
		return fault.Permanent(fmt.Errorf("egress/kafka: answer timeout %v, probe interval %v: want positive durations",
			o.AnswerTimeout, o.ProbeInterval))
	}
	return nil
}
