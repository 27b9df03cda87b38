//go:build !nodev

package main

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/delaybridge/delay-bridge/app"
	"github.com/delaybridge/delay-bridge/cmd/bridge/internal/dev"
	"github.com/delaybridge/delay-bridge/config"
)

// This file, and with it the embedded Kafka (kfake) and Redis (miniredis) of
// cmd/bridge/internal/dev, is left out of a binary built with -tags nodev (see
// dev_nodev.go). Nothing on `bridge run`'s path calls into it.

func init() { addCommand(newDevCmd) }

const devHelp = `Start, in this one process, an embedded Kafka wire-protocol broker (franz-go's kfake), a
Redis (redis-server from PATH on a free port, else an embedded Redis-compatible server
running the same Lua scripts), the bridge with the route demo.delay -> demo, and a demo
producer/consumer that prints each message's due time and lateness, then a summary. The
broker address is printed so you can produce with your own client (kcat). Ctrl-C stops.`

func newDevCmd(env *cliEnv) *cobra.Command {
	cmd := unsorted(&cobra.Command{
		Use:   "dev [--count N] [--max-delay D] [--exit]",
		Short: "run a self-contained try-out (embedded Kafka, local Redis, demo)",
		Long:  devHelp,
		Args:  noArgs,
	})
	fs := cmd.Flags()
	var o dev.Options
	fs.IntVar(&o.Count, "count", 200, "demo messages to send (0 = none)")
	fs.DurationVar(&o.MaxDelay, "max-delay", 5*time.Second, "demo delays are spread over [0, max-delay]")
	fs.BoolVar(&o.Exit, "exit", false, "exit after the demo summary instead of running until Ctrl-C")
	fs.BoolVar(&o.Embedded, "embedded-redis", false, "use the embedded Redis even when redis-server is on PATH")
	fs.IntVar(&o.KafkaPort, "kafka-port", 0, "port of the embedded Kafka broker (0 = 9092 if free, else any)")
	fs.StringVar(&o.AdminListen, "admin", "", "admin API listen address (default 127.0.0.1:8089 if free, else any)")
	verbose := fs.Bool("verbose", false, "show the bridge's own log")
	cmd.RunE = func(*cobra.Command, []string) error {
		return runDev(env, o, *verbose)
	}
	return cmd
}

func runDev(env *cliEnv, o dev.Options, verbose bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)

	level := config.LogConfig{Level: "warn", Format: "text"}
	if verbose {
		level.Level = "info"
	}
	logger := newLogger(level, env.stderr)
	app.RouteRedisLogs(logger)
	o.Out, o.Logger = env.stdout, logger
	o.RunBridge = func(ctx context.Context, cfg config.Config) error {
		cfg.Log = level
		return serve(ctx, cfg, logger.With("component", "bridge"))
	}
	if err := dev.Run(ctx, o); err != nil {
		slog.New(slog.NewTextHandler(env.stderr, nil)).Error("dev stopped with an error", "err", err)
		return &exitCodeError{exitError}
	}
	return nil
}
