package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/app"
	"github.com/delaybridge/delay-bridge/app/metrics"
	chartseries "github.com/delaybridge/delay-bridge/app/series"
	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/ingress"
	"github.com/delaybridge/delay-bridge/internal/envelope"
)

func init() { addCommand(newRunCmd) }

const runHelp = `Run the bridge: consume the routes' delay sources, park messages in Redis, fire them at
their due time and publish them to the targets; serve the admin API, /metrics, /healthz
and /readyz on admin.listen (set it to "" to disable). Configuration: defaults < YAML
file < DELAYBRIDGE_* environment (levels separated by "__", e.g.
DELAYBRIDGE_REDIS__ADDRS=a:6379,b:6379) < --set flags. SIGINT or SIGTERM shuts down
gracefully; a second signal exits at once.`

func newRunCmd(env *cliEnv) *cobra.Command {
	cmd := unsorted(&cobra.Command{
		Use:   "run [-c FILE] [--set key=value]...",
		Short: "run the bridge service",
		Long:  runHelp,
	})
	cf := addConfigFlags(cmd.Flags())
	configFileCompletion(cmd)
	cmd.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usageErrorf(cmd, "unexpected argument %q (the configuration file goes after -c)", args[0])
		}
		return nil
	}
	cmd.RunE = func(*cobra.Command, []string) error {
		return runService(cf, env.stderr)
	}
	return cmd
}

// runService is `bridge run` after its flags are parsed.
func runService(cf configFlags, stderr io.Writer) error {
	cfg, err := cf.load()
	if err != nil {
		printConfigErrors(stderr, "run", err)
		return &exitCodeError{exitError}
	}
	logger := newLogger(cfg.Log, stderr)
	app.RouteRedisLogs(logger)
	setMemoryLimit(logger)
	if err := cfg.CheckMemoryLimit(debug.SetMemoryLimit(-1)); err != nil {
		printConfigErrors(stderr, "run", err)
		return &exitCodeError{exitError}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// After the first signal, restore the default handling so a second one kills.
	context.AfterFunc(ctx, stop)

	if err := serve(ctx, cfg, logger); err != nil {
		logger.Error("bridge stopped with an error", "err", err)
		return &exitCodeError{exitError}
	}
	return nil
}

// newLogger builds the process logger from log.level and log.format (validated).
func newLogger(lc config.LogConfig, w io.Writer) *slog.Logger {
	var level slog.Level
	if err := level.UnmarshalText([]byte(strings.ToLower(lc.Level))); err != nil {
		level = slog.LevelInfo
	}
	opts := &slog.HandlerOptions{Level: level, ReplaceAttr: durationsAsText}
	var h slog.Handler
	if lc.Format == "text" {
		h = slog.NewTextHandler(w, opts)
	} else {
		h = slog.NewJSONHandler(w, opts)
	}
	return slog.New(h)
}

// durationsAsText writes durations as Go duration text ("1.5s"), not the JSON
// handler's integer nanoseconds, so a log line reads the way the config is written.
func durationsAsText(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// serve runs the bridge and its admin server until ctx ends or either fails. The admin
// server keeps answering (/healthz, /metrics; /readyz says not ready) while the bridge
// shuts down, and stops after it.
func serve(ctx context.Context, cfg config.Config, logger *slog.Logger) error {
	reg := metrics.NewRegistry()
	metrics, err := metrics.NewMetrics(reg, buildVersion(), logger)
	if err != nil {
		return err
	}
	metrics.Declare(routeSeries(cfg.Routes), ingress.InvalidReasons)
	// The console's charts: a ring of recent intervals fed by the same events.
	history := chartseries.New(chartseries.Options{Logger: logger})
	for _, r := range cfg.Routes {
		history.Declare(r.Name)
	}
	b, err := app.New(cfg, app.Options{Logger: logger, Clock: processClock(), Observer: chartseries.Observe(metrics, history), Series: history,
		Version: buildVersion()})
	if err != nil {
		return fmt.Errorf("building the bridge: %w", err)
	}
	metrics.SetCounts(func(ctx context.Context) (map[string]admin.Counts, error) {
		st, err := b.Backend().Stats(ctx)
		return st.Routes, err
	})
	metrics.SetChecks(b.Backend().Checks)
	metrics.SetMemory(func() (memStats, bool) {
		st, ok := b.MemoryStats()
		return memStats{HeldBytes: st.HeldBytes, BudgetBytes: st.BudgetBytes, Throttled: st.Throttled,
			ThrottledSeconds: st.ThrottledTime.Seconds(), ClaimedAtPark: st.ClaimedAtPark, ClaimedByPump: st.ClaimedByPump}, ok
	})
	logger.Info("delay-bridge starting", "version", buildVersion(), "cluster", cfg.Cluster,
		"shards", cfg.Shards, "routes", len(cfg.Routes), "admin", cfg.Admin.Listen)

	bridgeCtx, stopBridge := context.WithCancel(ctx)
	defer stopBridge()
	adminCtx, stopAdmin := context.WithCancel(context.WithoutCancel(ctx))
	defer stopAdmin()

	var wg sync.WaitGroup
	var adminErr error
	if cfg.Admin.Listen != "" {
		srv := admin.NewServer(admin.Options{
			Addr:    cfg.Admin.Listen,
			Token:   cfg.Admin.Token,
			Backend: b.Backend(),
			// Room for a base64 payload of limits.max_payload_bytes plus the envelope.
			MaxBodyBytes: int64(cfg.Limits.MaxPayloadBytes)*4/3 + 1<<20,
			Gatherer:     reg,
			Logger:       logger.With("component", "admin"),
		})
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Run(adminCtx); err != nil {
				adminErr = err
				stopBridge() // an admin server that cannot listen is fatal
			}
		}()
	}

	runErr := b.Run(bridgeCtx)
	stopAdmin()
	wg.Wait()
	if errors.Is(runErr, context.Canceled) && ctx.Err() != nil {
		runErr = nil
	}
	if adminErr != nil {
		return errors.Join(fmt.Errorf("admin API: %w", adminErr), runErr)
	}
	if runErr != nil {
		return runErr
	}
	logger.Info("delay-bridge stopped")
	return nil
}

// routeSeries lists the configured routes with their target broker, for
// Metrics.Declare.
func routeSeries(routes []config.Route) []metrics.RouteSeries {
	out := make([]metrics.RouteSeries, 0, len(routes))
	for _, r := range routes {
		broker := envelope.BrokerKafka
		if r.To.AMQP != nil {
			broker = envelope.BrokerAMQP
		}
		out = append(out, metrics.RouteSeries{Name: r.Name, Broker: broker})
	}
	return out
}

// memStats is the memory the metrics show (the metrics package's type; the local name
// metrics is the instance in serve).
type memStats = metrics.Memory
