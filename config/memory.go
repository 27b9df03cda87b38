package config

import "fmt"

// The bridge's memory at most, as docs/OPERATIONS.md "Sizing" adds it up: a baseline,
// twice the scheduler's byte budget (a message being published exists once as its
// envelope and once encoded in the produce request), the ingress buffers, and every
// side queue full. CheckMemoryLimit refuses a configuration whose sum exceeds the Go
// memory limit, so a pod given the limit the docs ask for is never killed for memory
// by its own settings.
const (
	// MemoryBaseline is the bridge without messages held: runtime, clients, caches,
	// with messages flowing (docs/SCALE.md: 35 MiB idle, 45–65 MiB busy).
	MemoryBaseline = 65 << 20
	// MemoryIngress is what the ingress holds before parking: per owned Kafka partition
	// one fetch (1 MiB) and a batch waiting to be parked (~4 MiB), a few partitions.
	MemoryIngress = 16 << 20
	// DeadLetterCopiesMaxBytes bounds the dead-letter copies queued per dead-letter
	// target (dead_letter.kafka.topic, dead_letter.amqp.exchange) while it is down.
	// Copies beyond it are dropped and counted; the dead letters themselves stay in
	// Redis. Small, so that the side queues fit beside the scheduler's budget.
	DeadLetterCopiesMaxBytes = 2 << 20
	// DefaultReceiptsBacklogBytes is receipts_backlog.max_bytes's default (per receipts
	// broker): with the dead-letter copies it leaves a 256 MiB pod within its Go limit
	// at the defaults, whichever brokers receive receipts and dead letters.
	DefaultReceiptsBacklogBytes = 8 << 20
)

// MemoryNeed is the most memory c lets the bridge hold, by part (bytes).
type MemoryNeed struct {
	Baseline, Budget, Ingress, Receipts, DeadLetterCopies int64
	ReceiptBrokers, DeadLetterTargets                     int
}

// Total is the sum of the parts, the budget counted twice.
func (n MemoryNeed) Total() int64 {
	return n.Baseline + 2*n.Budget + n.Ingress + n.Receipts + n.DeadLetterCopies
}

// MemoryNeed adds up the parts for c: each receipts broker (Kafka, AMQP) gets its own
// receipts_backlog.max_bytes, each dead-letter target its own DeadLetterCopiesMaxBytes.
func (c *Config) MemoryNeed() MemoryNeed {
	var kafka, amqp bool
	for _, r := range c.Routes {
		if r.Receipts != nil {
			kafka = kafka || r.Receipts.Kafka != nil
			amqp = amqp || r.Receipts.AMQP != nil
		}
	}
	n := MemoryNeed{Baseline: MemoryBaseline, Budget: c.Scheduler.MaxInMemoryBytes, Ingress: MemoryIngress}
	for _, used := range []bool{kafka, amqp} {
		if used {
			n.ReceiptBrokers++
		}
	}
	for _, used := range []bool{c.DeadLetter.Kafka.Topic != "", c.DeadLetter.AMQP.Exchange != ""} {
		if used {
			n.DeadLetterTargets++
		}
	}
	n.Receipts = int64(n.ReceiptBrokers) * int64(c.ReceiptsBacklog.MaxBytes)
	n.DeadLetterCopies = int64(n.DeadLetterTargets) * DeadLetterCopiesMaxBytes
	return n
}

// CheckMemoryLimit refuses c when what it lets the bridge hold exceeds goLimit, the Go
// runtime's memory limit in bytes (GOMEMLIMIT, or 90 % of the container's limit);
// goLimit <= 0 or math.MaxInt64 (no limit known) accepts any c. The error names the
// keys that make up the sum.
func (c *Config) CheckMemoryLimit(goLimit int64) error {
	if goLimit <= 0 || goLimit == 1<<63-1 {
		return nil
	}
	n := c.MemoryNeed()
	if n.Total() <= goLimit {
		return nil
	}
	const mib = 1 << 20
	return &FieldError{Key: "scheduler.max_in_memory_bytes", Msg: fmt.Sprintf(
		"the bridge may hold %d MiB, more than the Go memory limit of %d MiB (GOMEMLIMIT, or 90%% of the container's limit): "+
			"%d MiB baseline + 2 × scheduler.max_in_memory_bytes (%d MiB) + %d MiB ingress + receipts_backlog.max_bytes (%d MiB) × %d receipts broker(s) + "+
			"%d MiB dead-letter copies × %d dead-letter target(s); lower scheduler.max_in_memory_bytes or receipts_backlog.max_bytes, "+
			"or raise the pod's memory limit (docs/OPERATIONS.md \"Bridge instances\")",
		n.Total()/mib, goLimit/mib, n.Baseline/mib, n.Budget/mib, n.Ingress/mib, int64(c.ReceiptsBacklog.MaxBytes)/mib, n.ReceiptBrokers,
		DeadLetterCopiesMaxBytes/mib, n.DeadLetterTargets)}
}
