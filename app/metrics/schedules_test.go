package metrics

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/delaybridge/delay-bridge/internal/observe"
)

// A schedule's first count creates every outcome series of it at 0 (so an increase()
// alert on missed or no_route sees the first one).
func TestScheduleSlotsSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg, "1", quiet)
	if err != nil {
		t.Fatal(err)
	}
	m.ScheduleSlots("nightly", observe.SlotParked, 3)
	m.ScheduleSlots("nightly", observe.SlotPublished, 2)
	want := `
# HELP delaybridge_schedule_slots_total Slots of recurring schedules by outcome: parked, late (catch-up), missed, no_route, published.
# TYPE delaybridge_schedule_slots_total counter
delaybridge_schedule_slots_total{outcome="late",schedule="nightly"} 0
delaybridge_schedule_slots_total{outcome="missed",schedule="nightly"} 0
delaybridge_schedule_slots_total{outcome="no_route",schedule="nightly"} 0
delaybridge_schedule_slots_total{outcome="parked",schedule="nightly"} 3
delaybridge_schedule_slots_total{outcome="published",schedule="nightly"} 2
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "delaybridge_schedule_slots_total"); err != nil {
		t.Error(err)
	}
}
