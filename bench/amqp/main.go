// Command amqp benchmarks delay-bridge's AMQP → AMQP path against RabbitMQ's own
// per-message TTL + dead-letter-exchange pattern, on the same RabbitMQ server, in one run.
//
// Both systems get the same workloads, one after the other (each alone on the machine):
//
//   - uniform: every message delayed by -uniform (1 s) at -rate msgs/s, the case TTL
//     handles well (expiry order = publish order);
//   - mixed: delays alternating -long (10 s) and -short (100 ms) at -rate msgs/s. TTL
//     only expires messages at the head of the queue, so a short delay published behind a
//     long one waits for the long one (head-of-line blocking);
//   - burst: -burst-n messages published as fast as possible, every one due at the same
//     instant (-burst-at after the first publish): egress throughput, "a million orders
//     due at midnight".
//
// Lateness is arrival at the consumer − (publish time + delay), measured by this program
// on one clock; throughput is delivered messages per second (for burst: burst-n ÷ the
// time from the common due instant to the last arrival). Messages are persistent and
// published with confirms in both systems; the bridge's Redis runs with AOF (everysec).
//
// The bridge path: publish to a topic exchange with x-delay → the bridge's durable source
// queue → Redis → target exchange (mandatory, confirms) → a queue this program consumes.
// The TTL path: publish with `expiration` to a durable queue without consumers whose
// x-dead-letter-exchange is a fanout exchange → a queue this program consumes.
//
// Needs: RabbitMQ on -amqp, redis-server and go in PATH. Run from this directory:
//
//	go run . [-json results.json]
//
// It prints a markdown table with ratios and, with -json, writes every figure as JSON.
package main

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

type options struct {
	repo      string
	amqpURL   string
	bridgeBin string
	rate      int
	n         int
	uniform   time.Duration
	long      time.Duration
	short     time.Duration
	burstN    int
	burstAt   time.Duration
	only      string
	jsonOut   string
	keep      bool
}

func main() {
	var o options
	flag.StringVar(&o.repo, "repo", "../..", "delay-bridge repository root (the bridge is built from ./cmd/bridge there)")
	flag.StringVar(&o.amqpURL, "amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL")
	flag.StringVar(&o.bridgeBin, "bridge", "", "prebuilt bridge binary (default: go build)")
	flag.IntVar(&o.rate, "rate", 2000, "publish rate (msgs/s) of the uniform and mixed workloads")
	flag.IntVar(&o.n, "n", 10000, "messages per uniform and mixed workload")
	flag.DurationVar(&o.uniform, "uniform", time.Second, "delay of the uniform workload")
	flag.DurationVar(&o.long, "long", 10*time.Second, "long delay of the mixed workload")
	flag.DurationVar(&o.short, "short", 100*time.Millisecond, "short delay of the mixed workload")
	flag.IntVar(&o.burstN, "burst-n", 30000, "messages of the burst workload")
	flag.DurationVar(&o.burstAt, "burst-at", 8*time.Second, "common due time of the burst, after its first publish")
	flag.StringVar(&o.only, "only", "", "comma-separated workloads to run (uniform,mixed,burst); default all")
	flag.StringVar(&o.jsonOut, "json", "", "write the results as JSON to this file")
	flag.BoolVar(&o.keep, "keep", false, "keep the temporary directory (bridge and redis logs)")
	flag.Parse()
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "bench/amqp:", err)
		os.Exit(1)
	}
}

// ---- results ----

// Dist is a lateness distribution in milliseconds.
type Dist struct {
	N     int     `json:"n"`
	Early int     `json:"early"` // arrived more than 1 ms before publish time + delay
	P50   float64 `json:"p50_ms"`
	P99   float64 `json:"p99_ms"`
	Max   float64 `json:"max_ms"`
}

func summarize(ms []float64) Dist {
	d := Dist{N: len(ms)}
	if len(ms) == 0 {
		return d
	}
	slices.Sort(ms)
	for _, v := range ms {
		if v < -1 {
			d.Early++
		}
	}
	pct := func(p float64) float64 {
		r := int(math.Ceil(p * float64(len(ms))))
		return ms[max(1, min(r, len(ms)))-1]
	}
	d.P50, d.P99, d.Max = pct(0.5), pct(0.99), ms[len(ms)-1]
	return d
}

// Result is one workload on one system.
type Result struct {
	Workload   string  `json:"workload"`
	System     string  `json:"system"` // "bridge" or "ttl+dlx"
	Sent       int     `json:"sent"`
	Delivered  int     `json:"delivered"` // distinct messages that arrived
	Duplicates int     `json:"duplicates"`
	PublishMs  float64 `json:"publish_ms"` // time to publish (and confirm) them all
	Throughput float64 `json:"throughput"` // burst: delivered msgs/s (see package doc); 0 for paced workloads
	Lateness   Dist    `json:"lateness"`   // all messages
	// Bridge only, from its x-delay-due-at header: the lateness split into the time the
	// bridge took to receive the message (its due time − publish time − delay) and the
	// time from that due time to the arrival (fire, publish, consume).
	IngestLag *Dist           `json:"ingest_lag,omitempty"`
	AfterDue  *Dist           `json:"after_due,omitempty"`
	ByDelay   map[string]Dist `json:"by_delay_ms"` // per requested delay class
}

// ---- setup ----

type env struct {
	o      options
	dir    string
	conn   *amqp.Connection
	names  names
	redis  *exec.Cmd
	bridge *exec.Cmd
}

type names struct {
	srcX, srcQ, dstX, dstQ string // bridge path
	parkQ, dlx, outQ       string // TTL + DLX path
}

func run(o options) error {
	dir, err := os.MkdirTemp("", "amqpbench-")
	if err != nil {
		return err
	}
	e := &env{o: o, dir: dir}
	defer func() {
		e.close()
		if o.keep {
			fmt.Fprintln(os.Stderr, "logs kept in", dir)
		} else {
			os.RemoveAll(dir)
		}
	}()
	if err := e.setup(); err != nil {
		return err
	}
	workloads := []string{"uniform", "mixed", "burst"}
	if o.only != "" {
		workloads = strings.Split(o.only, ",")
	}
	// Warm-up (not reported): connections, channels, shard leases, Redis scripts loaded.
	for _, sys := range []string{"bridge", "ttl+dlx"} {
		if _, err := e.workload("warmup", sys); err != nil {
			return fmt.Errorf("warm-up on %s: %w", sys, err)
		}
	}
	var results []Result
	for _, w := range workloads {
		for _, sys := range []string{"bridge", "ttl+dlx"} {
			fmt.Fprintf(os.Stderr, "running %s on %s...\n", w, sys)
			r, err := e.workload(w, sys)
			if err != nil {
				return fmt.Errorf("%s on %s: %w", w, sys, err)
			}
			results = append(results, r)
		}
	}
	printTable(os.Stdout, o, results)
	if o.jsonOut != "" {
		b, _ := json.MarshalIndent(map[string]any{"options": map[string]any{
			"rate": o.rate, "n": o.n, "uniform_ms": o.uniform.Milliseconds(), "long_ms": o.long.Milliseconds(),
			"short_ms": o.short.Milliseconds(), "burst_n": o.burstN, "burst_at_ms": o.burstAt.Milliseconds(),
		}, "cpus": runtime.NumCPU(), "load_before": loadBefore, "load_after": loadavg(), "results": results}, "", "  ")
		if err := os.WriteFile(o.jsonOut, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func (e *env) start(name string, bin string, args ...string) (*exec.Cmd, error) {
	f, err := os.Create(filepath.Join(e.dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	go func() { _ = cmd.Wait(); f.Close() }()
	return cmd, nil
}

func (e *env) setup() error {
	o := e.o
	bin := o.bridgeBin
	if bin == "" {
		bin = filepath.Join(e.dir, "bridge")
		build := exec.Command("go", "build", "-o", bin, "./cmd/bridge")
		build.Dir = o.repo
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build the bridge in %s: %w", o.repo, err)
		}
	}
	redisBin, err := exec.LookPath("redis-server")
	if err != nil {
		return fmt.Errorf("redis-server not in PATH: %w", err)
	}
	rport := freePort()
	if e.redis, err = e.start("redis", redisBin, "--port", strconv.Itoa(rport), "--bind", "127.0.0.1", "--dir", e.dir,
		"--save", "", "--appendonly", "yes", "--appendfsync", "everysec"); err != nil {
		return err
	}
	if e.conn, err = amqp.Dial(o.amqpURL); err != nil {
		return fmt.Errorf("RabbitMQ at %s: %w", o.amqpURL, err)
	}
	tag := fmt.Sprintf("amqpbench-%d", os.Getpid())
	n := names{srcX: tag + ".delayed", srcQ: tag + ".delay", dstX: tag + ".target", dstQ: tag + ".consumer",
		parkQ: tag + ".ttl-park", dlx: tag + ".ttl-dlx", outQ: tag + ".ttl-consumer"}
	e.names = n
	ch, err := e.conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	steps := []error{
		ch.ExchangeDeclare(n.dstX, "topic", true, false, false, false, nil),
		declareQ(ch, n.dstQ, nil),
		ch.QueueBind(n.dstQ, "#", n.dstX, false, nil),
		ch.ExchangeDeclare(n.dlx, "fanout", true, false, false, false, nil),
		declareQ(ch, n.outQ, nil),
		ch.QueueBind(n.outQ, "", n.dlx, false, nil),
		declareQ(ch, n.parkQ, amqp.Table{"x-dead-letter-exchange": n.dlx}),
	}
	if err := errors.Join(steps...); err != nil {
		return fmt.Errorf("declare topology: %w", err)
	}

	admin := "127.0.0.1:" + strconv.Itoa(freePort())
	cfg := fmt.Sprintf(`cluster: amqpbench
redis: { addrs: ["127.0.0.1:%d"] }
amqp: { url: %q }
admin: { listen: %q }
log: { level: warn, format: text }
routes:
  - name: bench
    from: { amqp: { queue: %q, exchange: %q, exchange_type: topic, binding_key: "#" } }
    to:   { amqp: { exchange: %q } }
`, rport, o.amqpURL, admin, n.srcQ, n.srcX, n.dstX)
	cfgPath := filepath.Join(e.dir, "bridge.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return err
	}
	if e.bridge, err = e.start("bridge", bin, "run", "-c", cfgPath); err != nil {
		return err
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 && e.consumers(n.srcQ) > 0 {
				fmt.Fprintf(os.Stderr, "bridge ready: admin API http://%s, redis 127.0.0.1:%d, logs in %s\n", admin, rport, e.dir)
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bridge not ready after 60 s (log in %s)", filepath.Join(e.dir, "bridge.log"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func declareQ(ch *amqp.Channel, name string, args amqp.Table) error {
	_, err := ch.QueueDeclare(name, true, false, false, false, args)
	return err
}

// consumers returns the consumer count of queue (0 when it does not exist yet).
func (e *env) consumers(queue string) int {
	ch, err := e.conn.Channel()
	if err != nil {
		return 0
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return 0
	}
	return q.Consumers
}

func (e *env) close() {
	if e.bridge != nil && e.bridge.Process != nil {
		_ = e.bridge.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() {
			for e.bridge.ProcessState == nil {
				time.Sleep(20 * time.Millisecond)
			}
			close(done)
		}()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = e.bridge.Process.Kill()
		}
	}
	if e.conn != nil {
		if ch, err := e.conn.Channel(); err == nil {
			n := e.names
			for _, q := range []string{n.srcQ, n.dstQ, n.parkQ, n.outQ} {
				_, _ = ch.QueueDelete(q, false, false, false)
			}
			for _, x := range []string{n.srcX, n.dstX, n.dlx} {
				_ = ch.ExchangeDelete(x, false, false)
			}
			_ = ch.Close()
		}
		_ = e.conn.Close()
	}
	if e.redis != nil && e.redis.Process != nil {
		_ = e.redis.Process.Kill()
	}
}

// ---- one workload ----

// body: phase (8 bytes), sequence (8), due time in unix nanoseconds (8), delay class ms (8).
const bodyLen = 32

type arrival struct {
	seq       int
	at        time.Time
	due       int64 // publish time + delay, unix ns
	cls       int64
	bridgeDue int64 // x-delay-due-at (unix ms), 0 for TTL
}

// plan returns the delay of message i and whether the workload is paced.
func (e *env) plan(w string) (n int, delayOf func(i int, start time.Time) (delay time.Duration, class int64), paced bool, err error) {
	o := e.o
	switch w {
	case "uniform":
		return o.n, func(int, time.Time) (time.Duration, int64) { return o.uniform, o.uniform.Milliseconds() }, true, nil
	case "mixed":
		return o.n, func(i int, _ time.Time) (time.Duration, int64) {
			if i%2 == 0 {
				return o.long, o.long.Milliseconds()
			}
			return o.short, o.short.Milliseconds()
		}, true, nil
	case "warmup":
		return 2000, func(int, time.Time) (time.Duration, int64) { return 200 * time.Millisecond, 200 }, true, nil
	case "burst":
		return o.burstN, func(_ int, start time.Time) (time.Duration, int64) {
			// Every message due at start + burstAt, in whole milliseconds.
			d := time.Until(start.Add(o.burstAt)).Truncate(time.Millisecond)
			return max(d, 0), o.burstAt.Milliseconds()
		}, false, nil
	}
	return 0, nil, false, fmt.Errorf("unknown workload %q", w)
}

var phaseSeq uint64

func (e *env) workload(w, sys string) (Result, error) {
	n, delayOf, paced, err := e.plan(w)
	if err != nil {
		return Result{}, err
	}
	phaseSeq++
	phase := phaseSeq
	res := Result{Workload: w, System: sys, Sent: n, ByDelay: map[string]Dist{}}
	queue := e.names.dstQ
	if sys != "bridge" {
		queue = e.names.outQ
	}

	// Consumer on its own connection, auto-ack.
	cconn, err := amqp.Dial(e.o.amqpURL)
	if err != nil {
		return res, err
	}
	defer cconn.Close()
	cch, err := cconn.Channel()
	if err != nil {
		return res, err
	}
	in, err := cch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		return res, err
	}
	arrivals := make([]arrival, 0, n)
	seen := make([]bool, n)
	all := make(chan struct{})
	var mu sync.Mutex
	go func() {
		for d := range in {
			at := time.Now()
			if len(d.Body) != bodyLen || binary.BigEndian.Uint64(d.Body) != phase {
				continue
			}
			seq := int(binary.BigEndian.Uint64(d.Body[8:]))
			mu.Lock()
			if seq >= 0 && seq < n {
				if seen[seq] {
					res.Duplicates++
				} else {
					seen[seq] = true
					bd, _ := d.Headers["x-delay-due-at"].(int64)
					arrivals = append(arrivals, arrival{seq: seq, at: at, bridgeDue: bd,
						due: int64(binary.BigEndian.Uint64(d.Body[16:])), cls: int64(binary.BigEndian.Uint64(d.Body[24:]))})
					if len(arrivals) == n {
						close(all)
					}
				}
			}
			mu.Unlock()
		}
	}()

	// Publisher: confirms, at most 2000 unconfirmed.
	pconn, err := amqp.Dial(e.o.amqpURL)
	if err != nil {
		return res, err
	}
	defer pconn.Close()
	pch, err := pconn.Channel()
	if err != nil {
		return res, err
	}
	if err := pch.Confirm(false); err != nil {
		return res, err
	}
	const window = 2000
	confirms := pch.NotifyPublish(make(chan amqp.Confirmation, window))
	sem := make(chan struct{}, window)
	confirmed := make(chan int, 1)
	go func() {
		nacks := 0
		for c := range confirms {
			if !c.Ack {
				nacks++
			}
			<-sem
		}
		confirmed <- nacks
	}()
	exchange, key := e.names.srcX, "bench.key"
	if sys != "bridge" {
		exchange, key = "", e.names.parkQ
	}
	start := time.Now()
	var lastDue int64
	ctx := context.Background()
	for i := range n {
		if paced {
			if wait := time.Until(start.Add(time.Duration(i) * time.Second / time.Duration(e.o.rate))); wait > 0 {
				time.Sleep(wait)
			}
		}
		now := time.Now()
		d, cls := delayOf(i, start)
		due := now.Add(d).UnixNano()
		lastDue = max(lastDue, due)
		body := make([]byte, bodyLen)
		binary.BigEndian.PutUint64(body, phase)
		binary.BigEndian.PutUint64(body[8:], uint64(i))
		binary.BigEndian.PutUint64(body[16:], uint64(due))
		binary.BigEndian.PutUint64(body[24:], uint64(cls))
		p := amqp.Publishing{DeliveryMode: amqp.Persistent, Body: body}
		if sys == "bridge" {
			p.Headers = amqp.Table{"x-delay": int32(d.Milliseconds())}
		} else {
			p.Expiration = strconv.FormatInt(d.Milliseconds(), 10)
		}
		sem <- struct{}{}
		if err := pch.PublishWithContext(ctx, exchange, key, false, false, p); err != nil {
			return res, fmt.Errorf("publish: %w", err)
		}
	}
	for range window { // every confirm back
		sem <- struct{}{}
	}
	res.PublishMs = float64(time.Since(start).Microseconds()) / 1000
	if w == "burst" && time.Since(start) > e.o.burstAt {
		fmt.Fprintf(os.Stderr, "warning: publishing the burst took %s, longer than -burst-at %s\n", time.Since(start), e.o.burstAt)
	}

	limit := time.Until(time.Unix(0, lastDue)) + 60*time.Second
	select {
	case <-all:
	case <-time.After(limit):
		fmt.Fprintf(os.Stderr, "warning: %s on %s: not every message arrived within %s\n", w, sys, limit)
	}
	time.Sleep(300 * time.Millisecond) // room for duplicates
	_ = cch.Close()
	_ = pch.Close()
	if nacks := <-confirmed; nacks > 0 {
		return res, fmt.Errorf("%d publishes nacked", nacks)
	}
	mu.Lock()
	defer mu.Unlock()
	res.Delivered = len(arrivals)
	lat := make([]float64, 0, len(arrivals))
	var ingest, after []float64
	byCls := map[int64][]float64{}
	var last time.Time
	for _, a := range arrivals {
		ms := float64(a.at.UnixNano()-a.due) / 1e6
		lat = append(lat, ms)
		byCls[a.cls] = append(byCls[a.cls], ms)
		if a.bridgeDue > 0 {
			ingest = append(ingest, float64(a.bridgeDue*1e6-a.due)/1e6)
			after = append(after, float64(a.at.UnixNano()-a.bridgeDue*1e6)/1e6)
		}
		if a.at.After(last) {
			last = a.at
		}
	}
	res.Lateness = summarize(lat)
	if len(ingest) > 0 {
		i, a := summarize(ingest), summarize(after)
		res.IngestLag, res.AfterDue = &i, &a
	}
	if len(byCls) > 1 {
		for c, v := range byCls {
			res.ByDelay[strconv.FormatInt(c, 10)] = summarize(v)
		}
	}
	// Throughput only means something for the burst: paced workloads deliver at the
	// publish rate by construction.
	if span := last.Sub(time.Unix(0, lastDue)); w == "burst" && span > 0 {
		res.Throughput = float64(len(arrivals)) / span.Seconds()
	}
	return res, nil
}

// ---- report ----

var loadBefore = loadavg()

// loadavg is the 1-minute load average (the machine may be shared: it says how busy).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

func ms(v float64) string {
	switch {
	case v >= 1000:
		return fmt.Sprintf("%.2f s", v/1000)
	case v >= 10:
		return fmt.Sprintf("%.0f ms", v)
	}
	return fmt.Sprintf("%.1f ms", v)
}

func ratio(a, b float64) string {
	if b <= 0 {
		return "n/a"
	}
	if r := a / b; r < 0.95 {
		return fmt.Sprintf("%.2f×", r)
	}
	return fmt.Sprintf("%.1f×", a/b)
}

func printTable(w *os.File, o options, rs []Result) {
	fmt.Fprintf(w, "\nAMQP → AMQP: delay-bridge vs RabbitMQ per-message TTL + DLX (same server, one run)\n")
	fmt.Fprintf(w, "uniform: %d msgs at %d/s, delay %s · mixed: %d msgs at %d/s, delays alternating %s / %s · burst: %d msgs, all due %s after the first publish\n",
		o.n, o.rate, o.uniform, o.n, o.rate, o.long, o.short, o.burstN, o.burstAt)
	fmt.Fprintf(w, "%d CPUs, load average before / after: %s / %s\n\n", runtime.NumCPU(), loadBefore, loadavg())
	fmt.Fprintln(w, "| workload | system | delivered | dup | early | lateness p50 | p99 | max | throughput (msg/s) |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|")
	row := func(label, sys string, r Result, d Dist) {
		tp := fmt.Sprintf("paced at %d", o.rate)
		if r.Throughput > 0 {
			tp = fmt.Sprintf("%.0f", r.Throughput)
		}
		fmt.Fprintf(w, "| %s | %s | %d/%d | %d | %d | %s | %s | %s | %s |\n", label, sys, d.N, r.Sent, r.Duplicates, d.Early,
			ms(d.P50), ms(d.P99), ms(d.Max), tp)
	}
	for _, r := range rs {
		row(r.Workload, r.System, r, r.Lateness)
		keys := make([]string, 0, len(r.ByDelay))
		for k := range r.ByDelay {
			keys = append(keys, k)
		}
		slices.SortFunc(keys, func(a, b string) int { x, _ := strconv.Atoi(a); y, _ := strconv.Atoi(b); return x - y })
		for _, k := range keys {
			d := r.ByDelay[k]
			fmt.Fprintf(w, "| %s · %s ms delays | %s | %d | | %d | %s | %s | %s | |\n", r.Workload, k, r.System, d.N, d.Early, ms(d.P50), ms(d.P99), ms(d.Max))
		}
		if r.IngestLag != nil {
			i, a := r.IngestLag, r.AfterDue
			fmt.Fprintf(w, "| %s · of which publish → bridge received | %s | | | | %s | %s | %s | |\n", r.Workload, r.System, ms(i.P50), ms(i.P99), ms(i.Max))
			fmt.Fprintf(w, "| %s · of which bridge due → arrival | %s | | | | %s | %s | %s | |\n", r.Workload, r.System, ms(a.P50), ms(a.P99), ms(a.Max))
		}
	}
	fmt.Fprintln(w, "\nRatios (TTL+DLX ÷ bridge for lateness — above 1× the bridge is more punctual; bridge ÷ TTL+DLX for throughput):")
	fmt.Fprintln(w, "\n| workload | lateness p50 | lateness p99 | max | throughput |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|")
	for i := 0; i+1 < len(rs); i += 2 {
		b, t := rs[i], rs[i+1]
		tp := "—"
		if b.Throughput > 0 {
			tp = ratio(b.Throughput, t.Throughput)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s |\n", b.Workload, ratio(t.Lateness.P50, b.Lateness.P50), ratio(t.Lateness.P99, b.Lateness.P99),
			ratio(t.Lateness.Max, b.Lateness.Max), tp)
		if s := strconv.FormatInt(o.short.Milliseconds(), 10); b.Workload == "mixed" {
			bs, ts := b.ByDelay[s], t.ByDelay[s]
			fmt.Fprintf(w, "| mixed · %s ms delays only | %s | %s | %s | |\n", s, ratio(ts.P50, bs.P50), ratio(ts.P99, bs.P99), ratio(ts.Max, bs.Max))
		}
	}
}
