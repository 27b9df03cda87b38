package config

import (
	"errors"
	"math"
	"strings"
	"testing"
)

// everySideQueue is c with receipts to both brokers and dead-letter copies to both
// targets: every side queue there can be, each at its bound.
func everySideQueue(c Config) Config {
	c.Routes = []Route{
		{Name: "k", Receipts: &Endpoint{Kafka: &KafkaEndpoint{Topic: "rc"}}},
		{Name: "a", Receipts: &Endpoint{AMQP: &AMQPEndpoint{Exchange: "rc"}}},
		{Name: "none"},
	}
	c.DeadLetter.Kafka.Topic = "dlq"
	c.DeadLetter.AMQP.Exchange = "dlx"
	return c
}

// TestDefaultsFitTheDocumentedPod: at the defaults, with every side queue full, the
// bridge holds at most the Go limit of the 256 MiB pod docs/OPERATIONS.md and
// docs/SCALE.md provision (90 % of it, as the chart and the bridge set it).
func TestDefaultsFitTheDocumentedPod(t *testing.T) {
	const goLimit = 256 << 20 * 9 / 10
	c := everySideQueue(Default())
	n := c.MemoryNeed()
	if n.ReceiptBrokers != 2 || n.DeadLetterTargets != 2 {
		t.Fatalf("counted %d receipts brokers and %d dead-letter targets, want 2 and 2", n.ReceiptBrokers, n.DeadLetterTargets)
	}
	if n.Total() > goLimit {
		t.Errorf("the defaults may hold %d MiB with every side queue full, more than a 256 MiB pod's Go limit (%d MiB): %+v",
			n.Total()>>20, goLimit>>20, n)
	}
	if err := c.CheckMemoryLimit(goLimit); err != nil {
		t.Errorf("CheckMemoryLimit(256 MiB pod) at the defaults: %v", err)
	}
}

// TestCheckMemoryLimit: a configuration whose sum exceeds the Go limit is refused with
// an error naming the keys; side queues not configured count nothing; without a known
// limit anything goes.
func TestCheckMemoryLimit(t *testing.T) {
	const goLimit = 256 << 20 * 9 / 10
	bigReceipts := everySideQueue(Default())
	bigReceipts.ReceiptsBacklog.MaxBytes = 16 << 20 // 2 × 16 MiB of receipts: over by a few MiB
	bigBudget := Default()
	bigBudget.Scheduler.MaxInMemoryBytes = 4 << 30
	fewQueues := Default()
	fewQueues.ReceiptsBacklog.MaxBytes = 16 << 20 // no route has receipts: not counted
	cases := []struct {
		name  string
		c     Config
		limit int64
		want  bool // refused
	}{
		{"defaults", Default(), goLimit, false},
		{"receipts over", bigReceipts, goLimit, true},
		{"receipts unused", fewQueues, goLimit, false},
		{"budget over", bigBudget, goLimit, true},
		{"budget, no limit known", bigBudget, math.MaxInt64, false},
		{"budget, within a large limit", bigBudget, 9 << 30, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.CheckMemoryLimit(tc.limit)
			if (err != nil) != tc.want {
				t.Fatalf("CheckMemoryLimit: %v, want refused %v", err, tc.want)
			}
			if err == nil {
				return
			}
			var fe *FieldError
			if !errors.As(err, &fe) || fe.Key != "scheduler.max_in_memory_bytes" {
				t.Errorf("error %v is not a FieldError for scheduler.max_in_memory_bytes", err)
			}
			for _, key := range []string{"receipts_backlog.max_bytes", "GOMEMLIMIT"} {
				if !strings.Contains(err.Error(), key) {
					t.Errorf("error %q does not name %s", err, key)
				}
			}
		})
	}
}
