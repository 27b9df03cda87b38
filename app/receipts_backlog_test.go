package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"

	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/egress"
	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/internal/envelope"
	"github.com/delaybridge/delay-bridge/internal/observe"
)

func (c *counts) SideDropped(q, target, reason string, n int) {
	c.add("side_dropped "+q+" "+target+" "+reason, n)
}

// heldTarget is a receipts broker that accepts nothing until released: what is offered
// stays in the side queue's backlog, as during an outage.
type heldTarget struct{ release chan struct{} }

func (h heldTarget) Publish(ctx context.Context, envs []*envelope.Envelope) []error {
	select {
	case <-h.release:
	case <-ctx.Done():
	}
	errs := make([]error, len(envs))
	for i := range errs {
		errs[i] = fmt.Errorf("held target: not published")
	}
	return errs
}

// TestReceiptsBacklogConfigured: receipts_backlog bounds the receipts queue that
// startReceipts builds. With the target down, max_messages receipts wait and the next
// is dropped and counted (reason full); with max_bytes below one receipt's JSON every
// receipt is dropped; the defaults keep them all.
func TestReceiptsBacklogConfigured(t *testing.T) {
	const offered = 4
	cases := []struct {
		name     string
		messages int
		bytes    int
		kept     int
	}{
		{"max_messages", offered - 1, 64 << 20, offered - 1},
		{"max_bytes", 100_000, 1, 0},
		{"defaults", 0, 0, offered},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cfg := config.Default()
			cfg.Routes = []config.Route{{Name: "r",
				From:     config.Endpoint{Kafka: &config.KafkaEndpoint{Topic: "in"}},
				To:       config.Endpoint{Kafka: &config.KafkaEndpoint{Topic: "out"}},
				Receipts: &config.Endpoint{Kafka: &config.KafkaEndpoint{Topic: "rc"}}}}
			if c.messages > 0 {
				cfg.ReceiptsBacklog = config.ReceiptsBacklogConfig{MaxMessages: c.messages, MaxBytes: c.bytes}
			}
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			obs := &counts{m: map[string]int{}}
			target := heldTarget{release: make(chan struct{})}
			b := &Bridge{cfg: cfg, clk: clock.Real{}, obs: obs, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
				receiptTargets: map[string]egress.SideTarget{"kafka": target}}
			side, err := b.startReceipts()
			if err != nil {
				t.Fatal(err)
			}
			defer side.Stop()
			defer close(target.release)

			ids := make([]string, offered)
			for i := range ids {
				ids[i] = fmt.Sprintf("m-%d", i)
			}
			b.receipts.Cancelled("r", ids)
			full := "side_dropped " + observe.SideQueueReceipts + " kafka " + observe.SideDropFull
			if got := side.Backlog("kafka"); got != c.kept {
				t.Errorf("backlog = %d, want %d", got, c.kept)
			}
			if got := obs.get(full); got != offered-c.kept {
				t.Errorf("dropped (full) = %d, want %d", got, offered-c.kept)
			}
		})
	}
}
