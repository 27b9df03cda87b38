// Command bench is delay-bridge's end-to-end benchmark harness (docs/BENCHMARKS.md).
//
//	cd bench && go run . -scenario all          # every scenario, ~20 minutes
//	cd bench && go run . -scenario all -quick   # a smoke version, < 2 minutes
//	cd bench && go run . -scenario steady,burst # some of them
//
// It starts what it needs: redis-server on a free port (no persistence), kfake (the
// Kafka wire-protocol broker, as a child process by default), and the bridge built from
// ../cmd/bridge as a separate process with a config in a temp dir. It prints a markdown
// table per scenario, writes results/<timestamp>.json and .md, and draws
// ../docs/bench-*.png.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

var scenarios = []string{"redis", "baseline", "steady", "burst", "scale", "asynq", "order"}

// env is what every scenario gets: the servers, the bridge binary and the settings.
type env struct {
	ctx        context.Context
	dir        string // temp dir: configs, logs, the bridge binary
	redis      *redisServer
	kafka      *kafkaBroker
	bridgeBin  string
	prevBin    string // -baseline-rev: the bridge built at that revision (prev.go)
	prevFirst  bool   // -previous-first: the revision's run of a scenario before this tree's
	keep       bool   // -keep: teardown leaves dir (the children's logs)
	profile    bool
	quick      bool
	delays     [2]time.Duration // -delays: the steady scenario's delay range (zero: its default)
	partitions int
	burstN     int
	rates      []float64
	bridgeYAML string
	bridgeEnv  []string // extra environment of every bridge process (-bridge-env)
	// experiments are patches compiled into the bridge (-experiment).
	experiments []string
	scaleN      int
	outDir      string // results/
	stamp       string
	res         *Results
}

// Results is the JSON written to results/<timestamp>.json.
type Results struct {
	Started    time.Time   `json:"started"`
	Command    string      `json:"command"`
	Machine    machineInfo `json:"machine"`
	Quick      bool        `json:"quick"`
	KafkaMode  string      `json:"kafka_mode"`
	Partitions int         `json:"partitions"`
	// Experiments lists patches compiled into the bridge (-experiment): when set, the
	// run measured a suggested fix, not the product as shipped.
	Experiments []string           `json:"experiments,omitempty"`
	BridgeYAML  string             `json:"bridge_yaml,omitempty"`
	BridgeEnv   string             `json:"bridge_env,omitempty"`
	Seconds     map[string]float64 `json:"scenario_seconds"`
	// Load is the 1-minute load average at the start and the end of each scenario:
	// the machine is shared, and other work on it shows up here.
	Load   map[string][2]float64 `json:"loadavg_1m"`
	Errors map[string]string     `json:"errors,omitempty"`

	RedisBench *RedisBenchResult `json:"redis_benchmark,omitempty"`
	Baseline   *BaselineResult   `json:"baseline,omitempty"`
	Steady     *SteadyResult     `json:"steady,omitempty"`
	Burst      *BurstResult      `json:"burst,omitempty"`
	Scale      *ScaleResult      `json:"scale,omitempty"`
	Asynq      *AsynqResult      `json:"asynq,omitempty"`

	// BaselineRev is -baseline-rev (the full commit hash), and Previous what the
	// scenarios measured with the bridge built at it, in the same run (prev.go).
	BaselineRev string   `json:"baseline_rev,omitempty"`
	Previous    *Results `json:"previous,omitempty"`
	// PreviousFirst is -previous-first: the revision's run of each scenario came first.
	PreviousFirst bool         `json:"previous_first,omitempty"`
	Order         *OrderResult `json:"order,omitempty"`
}

func main() {
	var (
		which      = flag.String("scenario", "all", "comma-separated: all, "+strings.Join(scenarios, ", "))
		quick      = flag.Bool("quick", false, "short smoke version of every scenario (< 2 minutes in all)")
		kafkaMode  = flag.String("kafka", "child", "run kfake as a child process (child) or inside the bench process (inproc)")
		partitions = flag.Int("partitions", 6, "partitions of every topic")
		repo       = flag.String("repo", "..", "the delay-bridge repository (cmd/bridge is built from it)")
		outDir     = flag.String("out", "results", "directory for <timestamp>.json and .md")
		docs       = flag.String("docs", "../docs", "directory for the PNG plots (empty: no plots)")
		profile    = flag.Bool("profile", false, "build the bridge with a pprof listener (go build -overlay) and save CPU profiles of the busiest steps")
		burstN     = flag.Int("burst-n", 0, "messages in the burst (default 1000000, quick 50000)")
		expFlag    = flag.String("experiment", "", "comma-separated patches compiled into the bridge with go build -overlay to measure a suggested fix: "+experimentNames())
		bridgeEnv  = flag.String("bridge-env", "", "extra environment for every bridge process, comma-separated KEY=VALUE pairs, e.g. 'GOGC=200' (results record it)")
		bridgeYAML = flag.String("bridge-yaml", "", "extra top-level YAML for every bridge config, e.g. 'scheduler: { lookahead: 500ms }' (default: the product defaults)")
		delaysFlag = flag.String("delays", "", "steady: the delays' range MIN,MAX (uniform), e.g. 5s,5s for one fixed delay (default 1s,10s; -quick 1s,3s)")
		ratesFlag  = flag.String("rates", "", "steady and baseline: comma-separated offered rates instead of the default ladder (no search for the maximum)")
		scaleN     = flag.Int("scale-n", 0, "messages parked for an hour in the scale scenario (default 10000000, quick 200000)")
		baseRev    = flag.String("baseline-rev", "", "also build the bridge at this git revision (e.g. the previous release) and run baseline, steady, burst and scale against it too, reporting both and the ratio")
		keepDir    = flag.Bool("keep", false, "keep the working directory (every child's log: bridges, kfake, redis-server) and print where it is")
		prevFirst  = flag.Bool("previous-first", false, "with -baseline-rev: run each scenario with the revision's bridge first, then this tree's (the order moves results on a shared machine: run both orders)")
		replot     = flag.String("replot", "", "redraw the plots and reprint the tables from a results/<timestamp>.json instead of running")
		childMode  = flag.String("child", "", "internal: run as a helper process (kfake, passthrough)")
		port       = flag.Int("port", 0, "internal: kfake child port")
		from       = flag.String("from", "", "internal: passthrough source topic")
		to         = flag.String("to", "", "internal: passthrough target topic")
		brokers    = flag.String("brokers", "", "internal: passthrough broker")
		group      = flag.String("group", "", "internal: passthrough consumer group")
	)
	flag.Parse()
	switch *childMode {
	case "":
	case "kfake":
		exit(runKfakeChild(*port))
		return
	case "passthrough":
		exit(runPassthrough(*brokers, *from, *to, *group))
		return
	default:
		exit(fmt.Errorf("unknown -child %q", *childMode))
	}

	if *replot != "" {
		exit(replotFrom(*replot, *docs))
		return
	}

	want := map[string]bool{}
	for _, s := range strings.Split(*which, ",") {
		s = strings.TrimSpace(s)
		if s == "all" {
			for _, x := range scenarios {
				want[x] = true
			}
			continue
		}
		if !slices.Contains(scenarios, s) {
			exit(fmt.Errorf("unknown scenario %q (have: all, %s)", s, strings.Join(scenarios, ", ")))
		}
		want[s] = true
	}
	var rates []float64
	for _, f := range strings.Split(*ratesFlag, ",") {
		if f = strings.TrimSpace(f); f != "" {
			v, err := strconv.ParseFloat(f, 64)
			if err != nil || v <= 0 {
				exit(fmt.Errorf("-rates: bad rate %q", f))
			}
			rates = append(rates, v)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e := &env{ctx: ctx, quick: *quick, profile: *profile, prevFirst: *prevFirst, keep: *keepDir, partitions: *partitions, outDir: *outDir, burstN: *burstN, scaleN: *scaleN, rates: rates}
	e.stamp = time.Now().UTC().Format("20060102T150405Z")
	if *delaysFlag != "" {
		lo, hi, _ := strings.Cut(*delaysFlag, ",")
		a, err1 := time.ParseDuration(lo)
		b, err2 := time.ParseDuration(hi)
		if err1 != nil || err2 != nil || a <= 0 || b < a {
			exit(fmt.Errorf("-delays %q: want MIN,MAX durations with 0 < MIN <= MAX", *delaysFlag))
		}
		e.delays = [2]time.Duration{a, b}
	}
	if err := os.MkdirAll(e.outDir, 0o755); err != nil { // profiles are saved there mid-run
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	e.res = &Results{
		Started: time.Now().UTC(), Command: "cd bench && go run . " + strings.Join(os.Args[1:], " "),
		Machine: readMachine(), Quick: *quick, KafkaMode: *kafkaMode, Partitions: *partitions,
		Seconds: map[string]float64{}, Errors: map[string]string{}, Load: map[string][2]float64{},
	}
	e.bridgeYAML = *bridgeYAML
	if *bridgeEnv != "" {
		e.bridgeEnv = strings.Split(*bridgeEnv, ",")
		e.res.BridgeEnv = *bridgeEnv
	}
	e.res.BridgeYAML = *bridgeYAML
	for _, x := range strings.Split(*expFlag, ",") {
		if x = strings.TrimSpace(x); x != "" {
			if _, ok := experiments[x]; !ok {
				exit(fmt.Errorf("unknown -experiment %q (have: %s)", x, experimentNames()))
			}
			e.experiments = append(e.experiments, x)
			for _, p := range experiments[x] {
				e.res.Experiments = append(e.res.Experiments, x+": "+p.why)
			}
		}
	}
	if err := e.setup(*repo, *kafkaMode, *baseRev); err != nil {
		e.teardown()
		exit(err)
	}
	defer e.teardown()

	type scen struct {
		name string
		run  func(*env) error
	}
	all := []scen{
		{"redis", runRedisBench}, {"baseline", runBaseline}, {"steady", runSteady},
		{"burst", runBurst}, {"scale", runScale}, {"asynq", runAsynq}, {"order", runOrder},
	}
	for _, s := range all {
		if !want[s.name] || ctx.Err() != nil {
			continue
		}
		paired := e.prevBin != "" && prevScenarios[s.name]
		if paired && e.prevFirst {
			e.previous(s.name, s.run)
			if err := e.restartKafka(); err != nil { // as fresh a broker as the revision had
				e.res.Errors[s.name] = err.Error()
				continue
			}
		}
		load0 := loadavg1()
		logf("== scenario %s (load average %.2f)", s.name, load0)
		start := time.Now()
		if err := e.fresh(); err != nil {
			e.res.Errors[s.name] = err.Error()
			logf("scenario %s: %v", s.name, err)
			continue
		}
		if err := s.run(e); err != nil {
			e.res.Errors[s.name] = err.Error()
			logf("scenario %s failed: %v", s.name, err)
		}
		e.res.Seconds[s.name] = time.Since(start).Seconds()
		e.res.Load[s.name] = [2]float64{load0, loadavg1()}
		logf("== scenario %s done in %s", s.name, time.Since(start).Round(time.Second))
		if paired && !e.prevFirst {
			e.previous(s.name, s.run)
		}
	}
	md := renderMarkdown(e.res)
	fmt.Println(md)
	if err := e.save(md); err != nil {
		logf("saving results: %v", err)
	}
	if *docs != "" {
		if err := drawPlots(e.res, *docs); err != nil {
			logf("plots: %v", err)
		}
	}
}

// previous runs scenario name with the revision's bridge and records its time and load.
func (e *env) previous(name string, run func(*env) error) {
	if e.ctx.Err() != nil {
		return
	}
	start, load0 := time.Now(), loadavg1()
	e.runPrevious(name, run)
	e.res.Previous.Seconds[name] = time.Since(start).Seconds()
	e.res.Previous.Load[name] = [2]float64{load0, loadavg1()}
}

func (e *env) setup(repo, kafkaMode, baseRev string) error {
	dir, err := os.MkdirTemp("", "delay-bridge-bench-")
	if err != nil {
		return err
	}
	e.dir = dir
	logf("building the bridge from %s/cmd/bridge (temp dir %s)", repo, dir)
	if e.bridgeBin, err = buildBridge(repo, dir, e.profile, e.experiments); err != nil {
		return err
	}
	if baseRev != "" {
		logf("building the bridge at %s (git archive) for the same-run comparison", baseRev)
		var commit string
		if e.prevBin, commit, err = buildBridgeAt(repo, baseRev, dir, e.profile); err != nil {
			return err
		}
		e.res.BaselineRev, e.res.PreviousFirst = commit, e.prevFirst
		e.res.Previous = &Results{Started: e.res.Started, Command: e.res.Command, Machine: e.res.Machine, Quick: e.quick,
			KafkaMode: kafkaMode, Partitions: e.partitions, Seconds: map[string]float64{}, Errors: map[string]string{},
			Load: map[string][2]float64{}}
	}
	if e.redis, err = startRedis(dir); err != nil {
		return err
	}
	if e.profile {
		pprofKafka = fmt.Sprintf("127.0.0.1:%d", freePort())
		logf("kfake child pprof on http://%s/debug/pprof/", pprofKafka)
	}
	if e.kafka, err = startKafka(dir, kafkaMode); err != nil {
		return err
	}
	logf("redis-server %s (appendonly no, save \"\"), kfake %s (%s), %d partitions per topic",
		e.redis.addr, e.kafka.addr, kafkaMode, e.partitions)
	return nil
}

func (e *env) teardown() {
	e.kafka.close()
	e.redis.close()
	switch {
	case e.dir != "" && e.keep:
		logf("kept %s (the children's logs)", e.dir)
	case e.dir != "":
		os.RemoveAll(e.dir)
	}
}

// fresh empties Redis between scenarios (topics are unique per scenario): FLUSHALL
// ASYNC (a synchronous flush of 10M entries outlasts the client's read timeout), then
// wait until the lazy free is done so memory figures start from an empty server.
func (e *env) fresh() error {
	if err := e.redis.rdb.FlushAllAsync(e.ctx).Err(); err != nil {
		return err
	}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if v := e.redis.info(e.ctx, "memory")["lazyfree_pending_objects"]; v == "0" || v == "" {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("redis still freeing the previous scenario's keys after 2 minutes")
}

// pids are the processes whose CPU the scenarios report.
func (e *env) pids(extra map[string]int) map[string]int {
	m := map[string]int{"redis": e.redis.pid(), "bench": os.Getpid()}
	if e.kafka.proc != nil {
		m["kafka"] = e.kafka.pid()
	}
	for k, v := range extra {
		m[k] = v
	}
	return m
}

// pick returns quick or full depending on the mode.
func pick[T any](e *env, full, quick T) T {
	if e.quick {
		return quick
	}
	return full
}

func (e *env) save(md string) error {
	if err := os.MkdirAll(e.outDir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(e.res, "", "  ")
	if err != nil {
		return err
	}
	base := filepath.Join(e.outDir, e.stamp)
	if err := os.WriteFile(base+".json", b, 0o644); err != nil {
		return err
	}
	logf("wrote %s.json and %s.md", base, base)
	return os.WriteFile(base+".md", []byte(md), 0o644)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func exit(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func experimentNames() string {
	names := make([]string, 0, len(experiments))
	for k := range experiments {
		names = append(names, k)
	}
	slices.Sort(names)
	return strings.Join(names, ", ")
}

// replotFrom redraws the plots and reprints the markdown of a saved run.
func replotFrom(path, docs string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var r Results
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	fmt.Println(renderMarkdown(&r))
	if docs == "" {
		return nil
	}
	return drawPlots(&r, docs)
}
