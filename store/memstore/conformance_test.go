package memstore_test

import (
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/internal/clock"
	"github.com/delaybridge/delay-bridge/store/memstore"
	"github.com/delaybridge/delay-bridge/store/storetest"
)

// TestConformance runs the store conformance suite on memstore, lease TTLs on a fake
// clock.
func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T, cfg storetest.Config) storetest.Subject {
		clk := clock.NewFake(time.UnixMilli(t0))
		s, err := memstore.New(memstore.Options{Shards: cfg.Shards, DoneWindow: cfg.DoneWindow, Clock: clk, Ordered: cfg.Ordered})
		if err != nil {
			t.Fatal(err)
		}
		return storetest.Subject{Store: s, Elapse: clk.Advance, ExpireLease: s.ExpireLease}
	}, storetest.Options{})
}
