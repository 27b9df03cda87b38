package app

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/testkit"
)

// waitFor polls cond every 50 ms until it holds or limit passes (then fails the test
// with what last described the state).
func waitFor(t *testing.T, what string, limit time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s; last: %s", what, limit, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// healthConfig starts a redis-server and kfake and configures one Kafka route "h" on
// them (lease TTL 1 s).
func healthConfig(t *testing.T) (*testkit.Redis, config.Config) {
	t.Helper()
	rs := testkit.StartRedis(t)
	kafkaAddr, _ := testkit.StartKafka(t, 2, "h.delay", "h.out")
	cfg := config.Default()
	cfg.Instance = "health-1"
	cfg.Shards = 4
	cfg.Prefix = testkit.Uniq(t, "health")
	cfg.Redis.Addrs = []string{rs.Addr()}
	cfg.Kafka.Brokers = []string{kafkaAddr}
	cfg.Kafka.GroupID = testkit.Uniq(t, "g")
	cfg.Scheduler.LeaseTTL = time.Second
	cfg.Routes = []config.Route{{
		Name: "h",
		From: config.Endpoint{Kafka: &config.KafkaEndpoint{Topic: "h.delay"}},
		To:   config.Endpoint{Kafka: &config.KafkaEndpoint{Topic: "h.out"}},
	}}
	return rs, cfg
}

// runBridge runs b until the test ends.
func runBridge(t *testing.T, b *Bridge) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
}

// failingChecks names the failing checks of a NotReadyError (with its text), or says
// what Ready returned instead.
func failingChecks(err error) (names, text string) {
	var nr *admin.NotReadyError
	if !errors.As(err, &nr) {
		return "", "Ready = " + errText(err)
	}
	failing := []string{}
	for _, c := range nr.Checks {
		if !c.OK {
			failing = append(failing, c.Name)
		}
	}
	return strings.Join(failing, ","), nr.Error()
}

// TestReadyzSaysTheClockIsOff: a bridge whose clock runs 5 s ahead of Redis's (the
// injected clock, skewed) is not ready with only the "clock" check failing, and its
// detail names the offset and scheduler.max_clock_offset; with the clock right again it
// turns ready. (That it then claims nothing early: scheduler/redistest
// TestClockSkewNeverFiresEarly.)
func TestReadyzSaysTheClockIsOff(t *testing.T) {
	_, cfg := healthConfig(t)
	clk := testkit.NewSkewedClock(5 * time.Second)
	b, err := New(cfg, Options{Clock: clk, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	runBridge(t, b)
	waitFor(t, "not ready, the clock check failing", 60*time.Second, func() (bool, string) {
		names, text := failingChecks(b.Backend().Ready(context.Background()))
		return names == "clock" && strings.Contains(text, "clock offset 5s") && strings.Contains(text, "scheduler.max_clock_offset 500ms"), text
	})
	clk.Set(0)
	waitFor(t, "ready with the clock right", 30*time.Second, func() (bool, string) {
		err := b.Backend().Ready(context.Background())
		return err == nil, errText(err)
	})
}

// TestReadyNamesTheFailingCheck runs a real bridge (redis-server, kfake) and reads its
// readiness: ready once running, then not ready with the "redis" check failing (and only
// that one named) while Redis is down, ready again after it is back; GET /v1/routes
// describes the route from the sources' and sinks' last known state.
func TestReadyNamesTheFailingCheck(t *testing.T) {
	rs, cfg := healthConfig(t)
	b, err := New(cfg, Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()

	ready := func() (bool, string) {
		err := b.Backend().Ready(context.Background())
		if err == nil {
			return true, "ready"
		}
		return false, err.Error()
	}
	waitFor(t, "ready", 60*time.Second, ready)

	routes, err := b.Backend().Routes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if routes.Instance != "health-1" || len(routes.Routes) != 1 {
		t.Fatalf("routes = %+v", routes)
	}
	r := routes.Routes[0]
	if r.Name != "h" || r.Ingress.Source != "kafka:h.delay" || r.Egress.Broker != "kafka" || r.Egress.Target != "h.out" || !r.Ready {
		t.Errorf("route = %+v", r)
	}

	rs.Kill()
	waitFor(t, "not ready while redis is down", 30*time.Second, func() (bool, string) {
		err := b.Backend().Ready(context.Background())
		names, text := failingChecks(err)
		return names == "redis" && errors.Is(err, admin.ErrUnavailable), text
	})
	rs.Restart()
	waitFor(t, "ready after redis is back", 60*time.Second, ready)
}

func errText(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
