// Package dev is `bridge dev`: the ten-second try-out. In one process it starts an
// embedded Kafka wire-protocol broker (franz-go's kfake), a Redis (a redis-server child
// when one is on PATH, else the embedded Redis-compatible miniredis, which runs the same
// Lua scripts), the bridge, and a demo producer/consumer that prints each message's due
// time and lateness, then a summary.
package dev

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/delaybridge/delay-bridge/config"
	"github.com/delaybridge/delay-bridge/internal/clock"
)

// Options configure a dev run.
type Options struct {
	Out         io.Writer
	Count       int           // demo messages to send (0 = none: just run the stack)
	MaxDelay    time.Duration // demo delays are spread over [0, MaxDelay]
	Exit        bool          // stop after the demo summary instead of running until ctx ends
	KafkaPort   int           // 0 = 9092 if free, else any free port
	AdminListen string        // "" = 127.0.0.1:8089 if free, else any free port
	Embedded    bool          // force the embedded Redis even when redis-server is on PATH
	Logger      *slog.Logger
	// RunBridge runs the bridge (and its admin API) with cfg until ctx is done. cmd/bridge
	// passes the same function `bridge run` uses, so dev runs the real service.
	RunBridge func(ctx context.Context, cfg config.Config) error
}

const (
	delayTopic  = "demo.delay"
	targetTopic = "demo"
)

// devConfig is the bridge configuration of `bridge dev`: one Kafka-to-Kafka route on
// the embedded broker and the Redis it found or started.
func devConfig(o Options, kaddr, raddr string) (config.Config, error) {
	admin := o.AdminListen
	if admin == "" {
		admin = "127.0.0.1:" + strconv.Itoa(portOr(8089))
	}
	cfg := config.Default()
	cfg.Cluster = "dev"
	cfg.Shards = 16
	cfg.Redis.Addrs = []string{raddr}
	cfg.Kafka.Brokers = []string{kaddr}
	cfg.Kafka.GroupID = "delay-bridge-dev"
	cfg.Admin.Listen = admin
	cfg.Log.Format = "text"
	cfg.Routes = []config.Route{{
		Name: "demo",
		From: config.Endpoint{Kafka: &config.KafkaEndpoint{Topic: delayTopic}},
		To:   config.Endpoint{Kafka: &config.KafkaEndpoint{Topic: targetTopic}},
	}}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("dev config: %w", err)
	}
	return cfg, nil
}

// printBanner says what runs where and how to try it by hand.
func printBanner(out io.Writer, kaddr, raddr, how, admin string) {
	fmt.Fprintf(out, "delay-bridge dev\n")
	fmt.Fprintf(out, "  kafka (embedded kfake)  %s   delay topic %q -> target topic %q\n", kaddr, delayTopic, targetTopic)
	fmt.Fprintf(out, "  redis (%s)  %s\n", how, raddr)
	fmt.Fprintf(out, "  admin API               http://%s  (try: curl http://%s/v1/stats)\n", admin, admin)
	fmt.Fprintf(out, "  console                 http://%s/ui/  (open in a browser)\n", admin)
	fmt.Fprintf(out, "  produce your own:       kcat -P -b %s -t %s -H x-delay=5000 <<< 'hello'\n", kaddr, delayTopic)
	fmt.Fprintf(out, "  consume the target:     kcat -C -b %s -t %s -f '%%h %%s\\n'\n\n", kaddr, targetTopic)
}

// Run starts the stack and the demo and blocks until ctx is cancelled (or, with Exit,
// until the demo summary is printed).
func Run(ctx context.Context, o Options) error {
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.MaxDelay <= 0 {
		o.MaxDelay = 5 * time.Second
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	kport := o.KafkaPort
	if kport == 0 {
		kport = portOr(9092)
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(kport), kfake.AllowAutoTopicCreation(),
		kfake.SeedTopics(3, delayTopic, targetTopic))
	if err != nil {
		return fmt.Errorf("start embedded kafka (kfake) on port %d: %w", kport, err)
	}
	defer kc.Close()
	kaddr := kc.ListenAddrs()[0]

	raddr, stopRedis, how, err := startRedis(ctx, o.Embedded)
	if err != nil {
		return err
	}
	defer stopRedis()

	cfg, err := devConfig(o, kaddr, raddr)
	if err != nil {
		return err
	}
	printBanner(o.Out, kaddr, raddr, how, cfg.Admin.Listen)

	var wg sync.WaitGroup
	bridgeErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		bridgeErr <- o.RunBridge(ctx, cfg)
	}()
	defer wg.Wait()
	defer cancel()

	summary := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		consume(ctx, o, kaddr, summary)
	}()
	if o.Count > 0 {
		if err := produce(ctx, o, kaddr); err != nil {
			return err
		}
	}
	select {
	case <-ctx.Done():
	case err := <-bridgeErr:
		if err != nil {
			return fmt.Errorf("bridge: %w", err)
		}
		return nil
	case <-summary:
		if !o.Exit {
			fmt.Fprintf(o.Out, "\nstill running: produce more with kcat (above); Ctrl-C stops\n")
			select {
			case <-ctx.Done():
			case err := <-bridgeErr:
				return err
			}
		}
	}
	cancel()
	return nil
}

// portOr returns want when it is non-zero and free on 127.0.0.1, else any free port.
func portOr(want int) int {
	if want != 0 {
		if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(want)); err == nil {
			l.Close()
			return want
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return want
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startRedis runs redis-server from PATH on a free port in a temp dir, or the embedded
// miniredis when there is none (or embedded is forced).
func startRedis(ctx context.Context, embedded bool) (addr string, stop func(), how string, err error) {
	if bin, lerr := exec.LookPath("redis-server"); lerr == nil && !embedded {
		dir, err := os.MkdirTemp("", "delay-bridge-dev-")
		if err != nil {
			return "", nil, "", err
		}
		port := portOr(0)
		cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--dir", dir,
			"--save", "", "--appendonly", "no", "--logfile", filepath.Join(dir, "redis.log"))
		if err := cmd.Start(); err != nil {
			return "", nil, "", fmt.Errorf("start redis-server: %w", err)
		}
		addr = "127.0.0.1:" + strconv.Itoa(port)
		stop = func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			os.RemoveAll(dir)
		}
		if err := awaitListening(ctx, addr, 5*time.Second); err != nil {
			stop()
			return "", nil, "", fmt.Errorf("redis-server on %s did not start: %w", addr, err)
		}
		return addr, stop, "redis-server " + bin, nil
	}
	m := miniredis.NewMiniRedis()
	if err := m.StartAddr("127.0.0.1:0"); err != nil {
		return "", nil, "", fmt.Errorf("start embedded redis: %w", err)
	}
	return m.Addr(), m.Close, "embedded miniredis, no redis-server on PATH", nil
}

// awaitListening waits until addr accepts a connection, for at most limit.
func awaitListening(ctx context.Context, addr string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c.Close()
		}
		if serr := clock.Sleep(ctx, clock.Real{}, 20*time.Millisecond); serr != nil {
			return err
		}
	}
}

// demoDelays are the assorted delays the demo producer cycles through.
func demoDelays(max time.Duration) []time.Duration {
	fr := []float64{0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1}
	out := make([]time.Duration, len(fr))
	for i, f := range fr {
		out[i] = time.Duration(f * float64(max)).Round(time.Millisecond)
	}
	return out
}

func produce(ctx context.Context, o Options, kaddr string) error {
	w := &kafka.Writer{Addr: kafka.TCP(kaddr), Topic: delayTopic, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, Balancer: &kafka.Murmur2Balancer{}}
	defer w.Close()
	delays := demoDelays(o.MaxDelay)
	msgs := make([]kafka.Message, o.Count)
	for i := range msgs {
		d := delays[i%len(delays)]
		msgs[i] = kafka.Message{
			Key:     []byte("demo-" + strconv.Itoa(i)),
			Value:   []byte(fmt.Sprintf("demo message %d (delay %s)", i, d)),
			Headers: []kafka.Header{{Key: "x-delay", Value: []byte(strconv.FormatInt(d.Milliseconds(), 10))}},
		}
	}
	fmt.Fprintf(o.Out, "demo: producing %d messages to %q with x-delay between 0 and %s\n", o.Count, delayTopic, o.MaxDelay)
	for len(msgs) > 0 {
		n := min(len(msgs), 500)
		if err := w.WriteMessages(ctx, msgs[:n]...); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("demo producer: %w", err)
		}
		msgs = msgs[n:]
	}
	return nil
}

func consume(ctx context.Context, o Options, kaddr string, summary chan<- struct{}) {
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: []string{kaddr}, Topic: targetTopic, GroupID: "delay-bridge-dev-demo-consumer",
		MaxWait: 5 * time.Millisecond, ReadBackoffMin: time.Millisecond, ReadBackoffMax: 5 * time.Millisecond,
		StartOffset: kafka.FirstOffset, CommitInterval: time.Second,
	})
	defer r.Close()
	var lateness []time.Duration
	early := 0
	printed := 0
	seen := map[string]bool{}
	dups := 0
	for {
		m, err := r.FetchMessage(ctx)
		if err != nil {
			if errors.Is(err, context.Canceled) || ctx.Err() != nil {
				return
			}
			fmt.Fprintf(o.Out, "demo consumer: %v\n", err)
			return
		}
		arrived := time.Now()
		var id, dueS, delayS string
		for _, h := range m.Headers {
			switch h.Key {
			case "x-message-id":
				id = string(h.Value)
			case "x-delay-due-at":
				dueS = string(h.Value)
			case "x-delay":
				delayS = string(h.Value)
			}
		}
		dueMs, _ := strconv.ParseInt(dueS, 10, 64)
		due := time.UnixMilli(dueMs)
		late := arrived.Sub(due)
		if seen[id] {
			dups++
		}
		seen[id] = true
		lateness = append(lateness, late)
		if late < 0 {
			early++
		}
		// Print the first arrivals and then every 100th so a big demo stays readable.
		if printed < 40 || len(lateness)%100 == 0 || len(lateness) > o.Count {
			fmt.Fprintf(o.Out, "arrived %-26s x-delay=%-6s due %s  lateness %7.2fms  key=%s\n",
				id, delayS, due.Format("15:04:05.000"), float64(late.Microseconds())/1000, m.Key)
			printed++
		}
		if o.Count > 0 && len(lateness) == o.Count {
			printSummary(o.Out, lateness, early, dups)
			close(summary)
		}
	}
}

func printSummary(w io.Writer, lat []time.Duration, early, dups int) {
	s := append([]time.Duration(nil), lat...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	q := func(p float64) float64 {
		return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000
	}
	fmt.Fprintf(w, "\nsummary: %d messages arrived, %d early, %d duplicates; lateness p50 %.2fms  p99 %.2fms  max %.2fms\n",
		len(s), early, dups, q(0.50), q(0.99), float64(s[len(s)-1].Microseconds())/1000)
}
