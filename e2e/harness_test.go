// Package e2e runs the built `bridge` binary as a separate process against a kfake
// Kafka broker (in this test process), a redis-server child and the RabbitMQ server on
// 127.0.0.1:5672, and checks what arrives on the targets with a ledger: every message
// arrives, none early, duplicates counted.
//
// The tests run one at a time, except those that call t.Parallel: they run after the
// others, at most GOMAXPROCS of them at once (go test's -parallel default). A test is
// marked only when it shares nothing with the others (its own Redis, kfake, proxies and
// temp files, unique RabbitMQ names, no port it gives up and takes again) and no
// verdict of it depends on how promptly the machine runs the bridges (no lease lapse it
// must avoid, no lateness bound, no lead time it must beat, no readiness it must keep):
// such a test waits out a fault or runs the binary's CLI, and the others fill the wait.
// Subtests that call t.Parallel run side by side once their parent's other subtests are
// done, and no other test runs meanwhile. TestMemoryBoundedBurst's large bursts are the
// one such pair with a lead time to beat: theirs is more than three times what parking
// both at once takes (their brokers run in processes of their own, outside -race), and
// the verdicts are each bridge's own resident memory.
package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"go.uber.org/goleak"

	"github.com/delaybridge/delay-bridge/testkit"
)

var bridgeBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "delay-bridge-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bridgeBin = filepath.Join(dir, "bridge")
	build := exec.Command("go", "build", "-race", "-o", bridgeBin, "../cmd/bridge")
	if os.Getenv("DELAYBRIDGE_TEST_E2E_NORACE") != "" {
		build = exec.Command("go", "build", "-o", bridgeBin, "../cmd/bridge")
	}
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e: building the bridge binary failed:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	if code == 0 {
		// The test's own kafka-go writers share kafka.DefaultTransport, whose pooled
		// connections outlive Writer.Close by design.
		kafka.DefaultTransport.(*kafka.Transport).CloseIdleConnections()
		if err := goleak.Find(goleak.IgnoreTopFunction("github.com/segmentio/kafka-go.(*reader).run"),
			goleak.IgnoreAnyFunction("github.com/twmb/franz-go/pkg/kfake.(*Cluster).run")); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// bridgeProc is one running bridge process.
type bridgeProc struct {
	t     *testing.T
	cfg   string
	admin string
	cmd   *exec.Cmd
	log   *bytes.Buffer
	mu    sync.Mutex
	done  chan struct{}
	// argv replaces `bridge run -c cfg` (the harness's own test runs other programs).
	argv []string
	// env is added to the test's environment for the process (KEY=value).
	env []string
	// killing is set (under mu) while the test kills the process itself; exits records
	// every exit the test did not cause (under mu), checked by problems.
	killing bool
	exits   []string
}

type logBuf struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (l logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// writeConfig writes a bridge.yaml for the given routes YAML and returns its path and
// the admin address.
func writeConfig(t *testing.T, redisAddr, kafkaAddr, routes string, extra string) (string, string) {
	t.Helper()
	return writeConfigRedis(t, redisSection([]string{redisAddr}, ""), kafkaAddr, routes, extra)
}

// redisSection is the redis section as a YAML flow map: addrs, then more (", key: value"
// fields, or "").
func redisSection(addrs []string, more string) string {
	quoted := make([]string, len(addrs))
	for i, a := range addrs {
		quoted[i] = strconv.Quote(a)
	}
	return fmt.Sprintf("{ addrs: [%s]%s }", strings.Join(quoted, ", "), more)
}

// writeConfigRedis is writeConfig with the whole redis section given as a YAML flow map.
func writeConfigRedis(t *testing.T, redisYAML, kafkaAddr, routes string, extra string) (string, string) {
	t.Helper()
	admin := "127.0.0.1:" + strconv.Itoa(testkit.FreePort(t))
	cfg := fmt.Sprintf(`cluster: e2e
shards: 16
instance: %s
redis: %s
kafka: { brokers: ["%s"], group_id: %s }
amqp: { url: "%s", prefetch: 200 }
scheduler: { lookahead: 1s, lease_ttl: 1s, safety_scan: 200ms }
retry: { max_attempts: 3, backoff: { initial: 100ms, max: 500ms } }
admin: { listen: "%s" }
log: { level: info, format: text }
routes:
%s
%s
`, testkit.Uniq(t, "inst"), redisYAML, kafkaAddr, testkit.Uniq(t, "group"), testkit.AMQPURL(), admin, routes, extra)
	path := filepath.Join(t.TempDir(), "bridge.yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, admin
}

func startBridge(t *testing.T, cfgPath, admin string) *bridgeProc {
	t.Helper()
	return startBridgeArgv(t, cfgPath, admin, nil)
}

// startBridgeArgv is startBridge running argv instead of `bridge run -c cfgPath`.
func startBridgeArgv(t *testing.T, cfgPath, admin string, argv []string) *bridgeProc {
	t.Helper()
	p := newBridge(t, argv, cfgPath, admin)
	p.start()
	return p
}

// startBridgeEnv is startBridge with env (KEY=value) added to the process's environment.
func startBridgeEnv(t *testing.T, cfgPath, admin string, env []string) *bridgeProc {
	t.Helper()
	p := newBridge(t, nil, cfgPath, admin)
	p.env = env
	p.start()
	return p
}

// newBridge returns a bridge process not launched yet, running argv (nil: this tree's
// binary with cfgPath), stopped and checked for problems at cleanup.
func newBridge(t *testing.T, argv []string, cfgPath, admin string) *bridgeProc {
	t.Helper()
	p := &bridgeProc{t: t, cfg: cfgPath, admin: admin, log: &bytes.Buffer{}, argv: argv}
	t.Cleanup(func() {
		p.stop()
		for _, problem := range p.problems() {
			t.Errorf("bridge %s: %s", admin, problem)
		}
		if t.Failed() {
			bin := bridgeBin
			if argv != nil {
				bin = argv[0]
			}
			t.Logf("bridge %s (%s) log:\n%s", admin, bin, p.logs())
		}
	})
	return p
}

func (p *bridgeProc) start() {
	p.t.Helper()
	p.launch()
	p.waitReady(30 * time.Second)
}

// launch starts the process and a goroutine that waits for its exit and records it.
func (p *bridgeProc) launch() {
	p.t.Helper()
	argv := p.argv
	if argv == nil {
		argv = []string{bridgeBin, "run", "-c", p.cfg}
	}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	if p.env != nil {
		p.cmd.Env = append(os.Environ(), p.env...)
	}
	w := logBuf{&p.mu, p.log}
	p.cmd.Stdout, p.cmd.Stderr = w, w
	if err := p.cmd.Start(); err != nil {
		p.t.Fatalf("start %s: %v", argv[0], err)
	}
	p.mu.Lock()
	p.killing = false
	p.mu.Unlock()
	p.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		err := cmd.Wait()
		p.mu.Lock()
		if problem := unexpectedExit(err, p.killing); problem != "" {
			p.exits = append(p.exits, fmt.Sprintf("pid %d: %s", cmd.Process.Pid, problem))
		}
		p.mu.Unlock()
		close(done)
	}(p.cmd, p.done)
}

// unexpectedExit describes an exit the test did not cause: any failure status, or a
// signal other than the SIGKILL the test sent itself (killedByTest). "" if expected.
// A clean exit (status 0) is expected: the test sent SIGTERM, or the command ended.
func unexpectedExit(err error, killedByTest bool) string {
	if err == nil {
		return ""
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return "wait: " + err.Error()
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL && killedByTest {
		return ""
	}
	return "unexpected exit: " + ee.String()
}

// raceMarker is what the race detector prints for each data race it finds.
const raceMarker = "WARNING: DATA RACE"

// problems returns the data races the process (any of its incarnations) reported and
// every exit the test did not cause. The child's exit status alone would miss a race in
// a process the test killed with SIGKILL, and its output alone a crash.
func (p *bridgeProc) problems() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := append([]string(nil), p.exits...)
	if n := strings.Count(p.log.String(), raceMarker); n > 0 {
		out = append(out, fmt.Sprintf("%d data race(s) reported (%q in its output)", n, raceMarker))
	}
	return out
}

func (p *bridgeProc) logs() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.log.String()
}

func (p *bridgeProc) waitReady(limit time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		select {
		case <-p.done:
			p.t.Fatalf("bridge exited before it was ready:\n%s", p.logs())
		default:
		}
		resp, err := http.Get("http://" + p.admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.t.Fatalf("bridge not ready after %s:\n%s", limit, p.logs())
}

// kill sends SIGKILL: no shutdown, whatever was in memory is lost to the process.
func (p *bridgeProc) kill() {
	if p.cmd != nil && p.cmd.Process != nil {
		p.mu.Lock()
		p.killing = true
		p.mu.Unlock()
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd = nil
}

// stop sends SIGTERM and waits for a graceful exit.
func (p *bridgeProc) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Errorf("bridge did not stop within 30s of SIGTERM")
		p.mu.Lock()
		p.killing = true
		p.mu.Unlock()
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd = nil
}

// api calls the admin API and decodes the JSON answer into out (if non-nil).
func (p *bridgeProc) api(method, path string, body any, out any) int {
	p.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, "http://"+p.admin+path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		p.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			p.t.Fatalf("%s %s: decode %q: %v", method, path, data, err)
		}
	}
	return resp.StatusCode
}

// ---- Kafka helpers ----

type sent struct {
	id    string
	key   string
	value string
	delay time.Duration
	at    time.Time // record timestamp (the x-delay base)
}

type arrival struct {
	key     string
	value   string
	headers map[string]string
	at      time.Time
}

// newWriter returns a producer for topic. It has a Transport of its own: kafka-go's
// DefaultTransport keeps metadata per broker address for the whole test process, so
// after an earlier test's kfake on a port that the OS hands out again it answered
// "Unknown Topic Or Partition" for this test's topics at once, without a retry.
// Its pooled connections are closed when the test ends.
func newWriter(t testing.TB, addr, topic string) *kafka.Writer {
	tr := &kafka.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &kafka.Writer{Addr: kafka.TCP(addr), Topic: topic, RequiredAcks: kafka.RequireAll,
		BatchTimeout: time.Millisecond, Balancer: &kafka.Murmur2Balancer{}, Transport: tr}
}

// collector consumes a topic in the background and records every arrival.
type collector struct {
	mu      sync.Mutex
	got     []arrival
	cancel  context.CancelFunc
	done    chan struct{}
	readErr error
}

func collect(t *testing.T, addr, topic string) *collector {
	t.Helper()
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: []string{addr}, Topic: topic, GroupID: testkit.Uniq(t, "collector"),
		MaxWait: 5 * time.Millisecond, ReadBackoffMin: time.Millisecond, ReadBackoffMax: 5 * time.Millisecond,
		StartOffset: kafka.FirstOffset, CommitInterval: time.Second,
	})
	ctx, cancel := context.WithCancel(context.Background())
	c := &collector{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		defer r.Close()
		for {
			m, err := r.FetchMessage(ctx)
			if err != nil {
				if ctx.Err() == nil {
					c.mu.Lock()
					c.readErr = err
					c.mu.Unlock()
				}
				return
			}
			a := arrival{key: string(m.Key), value: string(m.Value), headers: map[string]string{}, at: time.Now()}
			for _, h := range m.Headers {
				a.headers[h.Key] = string(h.Value)
			}
			c.mu.Lock()
			c.got = append(c.got, a)
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-c.done })
	return c
}

func (c *collector) snapshot() []arrival {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]arrival(nil), c.got...)
}

// ids returns the distinct x-message-ids that arrived.
func (c *collector) ids() map[string]bool {
	seen := map[string]bool{}
	for _, a := range c.snapshot() {
		seen[a.headers["x-message-id"]] = true
	}
	return seen
}

// uniqueCount returns how many distinct x-message-ids arrived.
func (c *collector) uniqueCount() int { return len(c.ids()) }

// waitAllArrived waits until every message of all reached c. On a timeout it fails
// naming how many are missing and, for the first few, their due time, shard and what
// each bridge's lookup says of them, so a lost message can be told from a stuck one.
func waitAllArrived(t *testing.T, c *collector, all map[string]sent, limit time.Duration, procs ...*bridgeProc) {
	t.Helper()
	if !poll(limit, func() bool { return c.uniqueCount() >= len(all) }) {
		t.Fatalf("timed out after %s waiting for every message on the target: %s", limit, missingReport(c, all, procs))
	}
}

func missingReport(c *collector, all map[string]sent, procs []*bridgeProc) string {
	seen := c.ids()
	var missing []string
	for id := range all {
		if !seen[id] {
			missing = append(missing, id)
		}
	}
	slices.Sort(missing)
	var b strings.Builder
	fmt.Fprintf(&b, "%d of %d missing", len(missing), len(all))
	for _, id := range missing[:min(len(missing), 8)] {
		m := all[id]
		fmt.Fprintf(&b, "\n  %s: shard %d, due %s ago", id, shardOf(id), time.Since(m.at.Add(m.delay)).Round(time.Millisecond))
		for _, p := range procs {
			fmt.Fprintf(&b, "; %s says %s", p.admin, lookupText(p, id))
		}
	}
	return b.String()
}

// lookupText is GET /v1/messages/{id}'s status and body, or the error, for a report.
func lookupText(p *bridgeProc, id string) string {
	resp, err := http.Get("http://" + p.admin + "/v1/messages/" + id)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
	return fmt.Sprintf("%d %s", resp.StatusCode, bytes.TrimSpace(body))
}

func waitUntil(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	if !poll(limit, cond) {
		t.Fatalf("timed out after %s waiting for %s", limit, what)
	}
}

// poll checks cond every 20 ms until it holds (true) or limit has passed (false).
func poll(limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// ledger checks arrivals against what was sent: every message arrived, none early,
// payload/key intact. It returns the number of duplicate arrivals.
func ledger(t *testing.T, sentMsgs map[string]sent, got []arrival, source string) (dups int) {
	t.Helper()
	seen := map[string]int{}
	for _, a := range got {
		id := a.headers["x-message-id"]
		s, ok := sentMsgs[id]
		if !ok {
			t.Errorf("unexpected message id %q arrived", id)
			continue
		}
		seen[id]++
		if seen[id] > 1 {
			dups++
		}
		if a.key != s.key || a.value != s.value {
			t.Errorf("%s: key/payload changed: %q/%q, want %q/%q", id, a.key, a.value, s.key, s.value)
		}
		due, err := strconv.ParseInt(a.headers["x-delay-due-at"], 10, 64)
		if err != nil {
			t.Errorf("%s: bad x-delay-due-at %q", id, a.headers["x-delay-due-at"])
			continue
		}
		if want := s.at.Add(s.delay).UnixMilli(); s.delay > 0 && due != want {
			t.Errorf("%s: x-delay-due-at %d, want record time + x-delay = %d", id, due, want)
		}
		if a.at.UnixMilli() < due {
			t.Errorf("%s: arrived %d ms early", id, due-a.at.UnixMilli())
		}
		if a.headers["x-delay-source"] != source {
			t.Errorf("%s: x-delay-source %q, want %q", id, a.headers["x-delay-source"], source)
		}
	}
	for id := range sentMsgs {
		if seen[id] == 0 {
			t.Errorf("%s never arrived", id)
		}
	}
	return dups
}
