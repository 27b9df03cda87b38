package main

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/internal/app"
	"github.com/delaybridge/delay-bridge/internal/devmode"
)

func init() {
	register("dev", "run a self-contained try-out (embedded Kafka, local Redis, demo)", runDev)
}

const devHelp = `
Start, in this one process, an embedded Kafka wire-protocol broker (franz-go's kfake), a
Redis (redis-server from PATH on a free port, else an embedded Redis-compatible server
running the same Lua scripts), the bridge with the route demo.delay -> demo, and a demo
producer/consumer that prints each message's due time and lateness, then a summary. The
broker address is printed so you can produce with your own client (kcat). Ctrl-C stops.`

func runDev(args []string, stdout, stderr io.Writer) int {
	fs := newFlags("dev", "[--count N] [--max-delay D] [--exit]", devHelp)
	count := fs.Int("count", 200, "demo messages to send (0 = none)")
	maxDelay := fs.Duration("max-delay", 5*time.Second, "demo delays are spread over [0, max-delay]")
	exit := fs.Bool("exit", false, "exit after the demo summary instead of running until Ctrl-C")
	embedded := fs.Bool("embedded-redis", false, "use the embedded Redis even when redis-server is on PATH")
	kafkaPort := fs.Int("kafka-port", 0, "port of the embedded Kafka broker (0 = 9092 if free, else any)")
	adminAddr := fs.String("admin", "", "admin API listen address (default 127.0.0.1:8089 if free, else any)")
	verbose := fs.Bool("verbose", false, "show the bridge's own log")
	if code, ok := parseFlags(fs, args, stdout, stderr); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(fs, stderr, "unexpected argument %q", fs.Arg(0))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)

	level := config.LogConfig{Level: "warn", Format: "text"}
	if *verbose {
		level.Level = "info"
	}
	logger := newLogger(level, stderr)
	app.RouteRedisLogs(logger)
	err := devmode.Run(ctx, devmode.Options{
		Out: stdout, Count: *count, MaxDelay: *maxDelay, Exit: *exit, KafkaPort: *kafkaPort,
		AdminListen: *adminAddr, Embedded: *embedded, Logger: logger,
		RunBridge: func(ctx context.Context, cfg config.Config) error {
			cfg.Log = level
			return serve(ctx, cfg, logger.With("component", "bridge"))
		},
	})
	if err != nil {
		slog.New(slog.NewTextHandler(stderr, nil)).Error("dev stopped with an error", "err", err)
		return exitError
	}
	return exitOK
}
