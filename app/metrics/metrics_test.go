package metrics

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/internal/observe"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
)

func TestMetricsNamesAndLabels(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg, "1.2.3", quiet)
	if err != nil {
		t.Fatal(err)
	}
	m.Received("orders", 3)
	m.Parked("orders", 2)
	m.Invalid("orders", "bad_delay")
	m.RequestedDelay("orders", 90*time.Second)
	m.Fired("orders", 700*time.Microsecond)
	m.Fired("orders", 3*time.Second)
	m.Published("orders", "kafka", 2, 4*time.Millisecond)
	m.DeadLettered("billing", 1)
	m.ScriptDuration("claim", 300*time.Microsecond)
	m.ShardsOwned(32)
	m.ClockOffset(-1500 * time.Millisecond)
	m.SideBacklog(observe.SideQueueDeadLetters, "kafka", 3)
	m.SideDropped(observe.SideQueueDeadLetters, "kafka", observe.SideDropFull, 2)

	expected := `
# HELP delaybridge_messages_received_total Records consumed from delay sources, before parsing.
# TYPE delaybridge_messages_received_total counter
delaybridge_messages_received_total{route="orders"} 3
# HELP delaybridge_messages_parked_total Messages newly stored in Redis (duplicates excluded).
# TYPE delaybridge_messages_parked_total counter
delaybridge_messages_parked_total{route="orders"} 2
# HELP delaybridge_messages_fired_total Messages handed to egress at their due time.
# TYPE delaybridge_messages_fired_total counter
delaybridge_messages_fired_total{route="orders"} 2
# HELP delaybridge_messages_published_total Messages the target broker confirmed.
# TYPE delaybridge_messages_published_total counter
delaybridge_messages_published_total{broker="kafka",route="orders"} 2
# HELP delaybridge_messages_dead_lettered_total Messages moved to the dead letters.
# TYPE delaybridge_messages_dead_lettered_total counter
delaybridge_messages_dead_lettered_total{route="billing"} 1
# HELP delaybridge_messages_invalid_total Invalid records, by reason.
# TYPE delaybridge_messages_invalid_total counter
delaybridge_messages_invalid_total{reason="bad_delay",route="orders"} 1
# HELP delaybridge_shards_owned Shards this instance currently owns.
# TYPE delaybridge_shards_owned gauge
delaybridge_shards_owned 32
# HELP delaybridge_clock_offset_seconds This instance's clock minus Redis's (TIME), measured at every ownership round; beyond scheduler.max_clock_offset the instance stops claiming.
# TYPE delaybridge_clock_offset_seconds gauge
delaybridge_clock_offset_seconds -1.5
# HELP delaybridge_dead_letter_copies_backlog Copies waiting to be published to the target (bounded; see *_dropped_total).
# TYPE delaybridge_dead_letter_copies_backlog gauge
delaybridge_dead_letter_copies_backlog{target="kafka"} 3
# HELP delaybridge_dead_letter_copies_dropped_total Copies given up (the originals are kept): full = the backlog was full, permanent = refused by the target, shutdown = still queued at stop.
# TYPE delaybridge_dead_letter_copies_dropped_total counter
delaybridge_dead_letter_copies_dropped_total{reason="full",target="kafka"} 2
# HELP delaybridge_build_info Always 1; labels carry the bridge version and the Go version it was built with.
# TYPE delaybridge_build_info gauge
delaybridge_build_info{goversion="` + runtime.Version() + `",version="1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(expected),
		"delaybridge_messages_received_total", "delaybridge_messages_parked_total",
		"delaybridge_messages_fired_total", "delaybridge_messages_published_total",
		"delaybridge_messages_dead_lettered_total", "delaybridge_messages_invalid_total",
		"delaybridge_shards_owned", "delaybridge_clock_offset_seconds", "delaybridge_build_info",
		"delaybridge_dead_letter_copies_backlog", "delaybridge_dead_letter_copies_dropped_total"); err != nil {
		t.Error(err)
	}

	// Histograms: names, labels, and buckets fine-grained at the low end.
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	hist := map[string]*dto.MetricFamily{}
	for _, mf := range mfs {
		if mf.GetType() == dto.MetricType_HISTOGRAM {
			hist[mf.GetName()] = mf
		}
	}
	wantLabels := map[string]string{
		"delaybridge_fire_lateness_seconds":         "route=orders",
		"delaybridge_requested_delay_seconds":       "route=orders",
		"delaybridge_publish_duration_seconds":      "broker=kafka,route=orders",
		"delaybridge_redis_script_duration_seconds": "script=claim",
	}
	for name, labels := range wantLabels {
		mf, ok := hist[name]
		if !ok {
			t.Errorf("histogram %s missing", name)
			continue
		}
		var got []string
		for _, lp := range mf.GetMetric()[0].GetLabel() {
			got = append(got, lp.GetName()+"="+lp.GetValue())
		}
		if strings.Join(got, ",") != labels {
			t.Errorf("%s labels = %v, want %s", name, got, labels)
		}
	}
	lat := hist["delaybridge_fire_lateness_seconds"].GetMetric()[0].GetHistogram()
	if lat.GetSampleCount() != 2 {
		t.Errorf("lateness samples = %d", lat.GetSampleCount())
	}
	b := lat.GetBucket()
	if b[0].GetUpperBound() != 0.0005 || b[len(b)-1].GetUpperBound() != 10 {
		t.Errorf("lateness buckets %v .. %v, want 0.0005 .. 10", b[0].GetUpperBound(), b[len(b)-1].GetUpperBound())
	}
	if b[1].GetUpperBound() != 0.001 || b[1].GetCumulativeCount() != 1 {
		t.Errorf("0.7ms must land in the 1ms bucket: %v", b[1])
	}

	// Registering twice is an error, not a panic.
	if _, err := NewMetrics(reg, "x", quiet); err == nil {
		t.Error("second NewMetrics on the same registry succeeded")
	}
}

func TestMetricsCountsAreCachedAndSurviveErrors(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg, "t", quiet)
	if err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(m.counts); n != 0 {
		t.Errorf("without SetCounts the gauges must be absent, got %d", n)
	}

	var now atomic.Int64
	now.Store(time.Unix(100, 0).UnixNano())
	m.counts.now = func() time.Time { return time.Unix(0, now.Load()) }
	var calls atomic.Int32
	var fail atomic.Bool
	m.SetCounts(func(ctx context.Context) (map[string]admin.Counts, error) {
		if _, ok := ctx.Deadline(); !ok {
			t.Error("counts func called without a deadline")
		}
		n := calls.Add(1)
		if fail.Load() {
			return nil, errors.New("redis down")
		}
		return map[string]admin.Counts{"a": {Pending: int64(10 * n), Inflight: 2, Dead: 1}, "b": {}}, nil
	})

	expect := func(pending string) {
		t.Helper()
		want := `
# HELP delaybridge_messages_pending Messages parked in Redis waiting for their due time, per route (all shards).
# TYPE delaybridge_messages_pending gauge
delaybridge_messages_pending{route="a"} ` + pending + `
delaybridge_messages_pending{route="b"} 0
# HELP delaybridge_messages_inflight Messages claimed and not yet acknowledged, per route (all shards).
# TYPE delaybridge_messages_inflight gauge
delaybridge_messages_inflight{route="a"} 2
delaybridge_messages_inflight{route="b"} 0
# HELP delaybridge_messages_dead Messages in the dead letters, per route (all shards).
# TYPE delaybridge_messages_dead gauge
delaybridge_messages_dead{route="a"} 1
delaybridge_messages_dead{route="b"} 0
`
		if err := testutil.GatherAndCompare(reg, strings.NewReader(want),
			"delaybridge_messages_pending", "delaybridge_messages_inflight", "delaybridge_messages_dead"); err != nil {
			t.Error(err)
		}
	}
	expect("10")
	// Many concurrent scrapes within the TTL share one call.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = reg.Gather()
		}()
	}
	wg.Wait()
	expect("10")
	if calls.Load() != 1 {
		t.Errorf("calls = %d, want 1 within the TTL", calls.Load())
	}
	now.Add(int64(StatsCacheTTL))
	expect("20")
	// A failing refresh keeps the last good value, and is retried only after the TTL.
	fail.Store(true)
	now.Add(int64(StatsCacheTTL))
	expect("20")
	expect("20")
	if calls.Load() != 3 {
		t.Errorf("calls = %d, want 3", calls.Load())
	}
	fail.Store(false)
	now.Add(int64(StatsCacheTTL))
	expect("40")
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// The memory series read the scheduler's byte budget at scrape time, and are absent
// until there is a scheduler to read.
func TestMemorySeries(t *testing.T) {
	reg := NewRegistry()
	m, err := NewMetrics(reg, "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	names := func() map[string]float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			for _, s := range mf.GetMetric() {
				name := mf.GetName()
				for _, l := range s.GetLabel() {
					name += "{" + l.GetName() + "=" + l.GetValue() + "}"
				}
				if s.Gauge != nil {
					out[name] = s.Gauge.GetValue()
				} else if s.Counter != nil {
					out[name] = s.Counter.GetValue()
				}
			}
		}
		return out
	}
	if _, ok := names()["delaybridge_memory_held_bytes"]; ok {
		t.Fatal("memory_held_bytes present before SetMemory")
	}
	ready := false
	m.SetMemory(func() (Memory, bool) {
		return Memory{HeldBytes: 5 << 20, BudgetBytes: 64 << 20, Throttled: 3, ThrottledSeconds: 1.5, ClaimedAtPark: 7, ClaimedByPump: 11}, ready
	})
	if _, ok := names()["delaybridge_memory_held_bytes"]; ok {
		t.Fatal("memory_held_bytes present while the source reports nothing")
	}
	ready = true
	got := names()
	for name, want := range map[string]float64{"delaybridge_memory_held_bytes": 5 << 20, "delaybridge_memory_budget_bytes": 64 << 20,
		"delaybridge_claims_throttled_total": 3, "delaybridge_claims_throttled_seconds_total": 1.5,
		"delaybridge_messages_claimed_total{via=park}": 7, "delaybridge_messages_claimed_total{via=claim}": 11} {
		if got[name] != want {
			t.Errorf("%s = %v, want %v", name, got[name], want)
		}
	}
}
