package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// pprofOverlay is compiled into cmd/bridge (through `go build -overlay`, the product's
// files untouched) when the bench runs with -profile: it serves net/http/pprof on
// $BENCH_PPROF_ADDR, a listener separate from the admin API.
const pprofOverlay = `package main

import (
	"net/http"
	_ "net/http/pprof"
	"os"
)

func init() {
	if addr := os.Getenv("BENCH_PPROF_ADDR"); addr != "" {
		go func() { _ = http.ListenAndServe(addr, nil) }()
	}
}
`

// patch is an experiment: one string replaced in one product file, compiled in through
// `go build -overlay` (the product's files are never edited). It measures a suggested
// fix before anyone makes it.
type patch struct {
	file, old, new, why string
}

// experiments are the patches -experiment can apply, by name.
var experiments = map[string][]patch{
	// ingress/kafka fetches up to 16 MiB with MaxWait 5 ms; kafka-go gives the fetch
	// response header MaxWait to arrive, which a broker assembling a big response
	// misses, so a lagging consumer re-fetches forever. kafka-go's default is 1 MiB.
	"ingress-1mib": {{
		file: "ingress/kafka/kafka.go",
		old:  "maxBytes: max(16<<20, 2*limits.MaxPayloadBytes+(64<<10)),",
		new:  "maxBytes: 1 << 20,",
		why:  "ingress/kafka fetch MaxBytes 1 MiB instead of 16 MiB",
	}},
	// Scheduler.Published acks shard by shard, one Redis round trip each, on the
	// dispatcher worker; Store.AckMany does all shards in one pipelined round trip.
	"ack-pipelined": {{
		file: "scheduler/scheduler.go",
		old: `	for sh, ids := range byShard {
		s.retryRedis(ctx, "ack", func(ctx context.Context) error {
			return s.store.Ack(ctx, sh, ids, clock.NowMs(s.clk))
		})
	}
	s.credits.release(len(envs))`,
		new: `	all := make([]string, 0, len(envs))
	for _, ids := range byShard {
		all = append(all, ids...)
	}
	s.retryRedis(ctx, "ack", func(ctx context.Context) error {
		return s.store.AckMany(ctx, all, clock.NowMs(s.clk))
	})
	s.credits.release(len(envs))`,
		why: "Scheduler.Published acks every shard in one pipelined round trip (Store.AckMany)",
	}},
}

// buildBridge runs `go build -o DIR/bridge REPO/cmd/bridge` (no -race). With profile it
// adds a pprof listener, and it applies the named experiments, both through
// `go build -overlay`.
func buildBridge(repo, dir string, profile bool, exps []string) (string, error) {
	return buildBridgeEnv(repo, dir, profile, exps, nil)
}

// buildBridgeEnv is buildBridge with extra environment for go build.
func buildBridgeEnv(repo, dir string, profile bool, exps []string, env []string) (string, error) {
	bin := filepath.Join(dir, "bridge")
	pkg, err := filepath.Abs(filepath.Join(repo, "cmd", "bridge"))
	if err != nil {
		return "", err
	}
	args := []string{"build", "-o", bin}
	replace := map[string]string{}
	if profile {
		src := filepath.Join(dir, "zz_bench_pprof.go")
		if err := os.WriteFile(src, []byte(pprofOverlay), 0o644); err != nil {
			return "", err
		}
		replace[filepath.Join(pkg, "zz_bench_pprof.go")] = src
	}
	patched := map[string]string{} // absolute path -> patched content
	for _, name := range exps {
		ps, ok := experiments[name]
		if !ok {
			return "", fmt.Errorf("unknown -experiment %q", name)
		}
		for _, p := range ps {
			orig, err := filepath.Abs(filepath.Join(repo, p.file))
			if err != nil {
				return "", err
			}
			text, ok := patched[orig]
			if !ok {
				b, err := os.ReadFile(orig)
				if err != nil {
					return "", err
				}
				text = string(b)
			}
			if !strings.Contains(text, p.old) {
				return "", fmt.Errorf("-experiment %s: %s no longer contains the code it patches", name, p.file)
			}
			patched[orig] = strings.Replace(text, p.old, p.new, 1)
		}
	}
	for orig, text := range patched {
		src := filepath.Join(dir, "patched-"+strings.ReplaceAll(strings.TrimPrefix(orig, "/"), "/", "_"))
		if err := os.WriteFile(src, []byte(text), 0o644); err != nil {
			return "", err
		}
		replace[orig] = src
	}
	if len(replace) > 0 {
		ov, _ := json.Marshal(map[string]map[string]string{"Replace": replace})
		ovPath := filepath.Join(dir, "overlay.json")
		if err := os.WriteFile(ovPath, ov, 0o644); err != nil {
			return "", err
		}
		args = append(args, "-overlay", ovPath)
	}
	args = append(args, ".")
	cmd := exec.Command("go", args...)
	cmd.Dir = pkg
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build ./cmd/bridge: %w\n%s", err, out)
	}
	return bin, nil
}

// route is one bridge route for a benchmark config.
type route struct {
	name, from, to string
	maxRate        float64
	ordered        bool // order: key
}

// bridgeProc is the bridge binary running `bridge run -c cfg.yaml` as a child.
type bridgeProc struct {
	*child
	admin string
	pprof string
}

// startBridge writes a config (product defaults except the addresses, the routes and
// the cluster name) and runs the bridge until /readyz answers 200.
func startBridge(env *env, cluster string, routes []route, extra string) (*bridgeProc, error) {
	admin := fmt.Sprintf("127.0.0.1:%d", freePort())
	extra = strings.TrimSpace(extra + "\n" + env.bridgeYAML)
	var rs strings.Builder
	for _, r := range routes {
		fmt.Fprintf(&rs, "  - name: %s\n    from: { kafka: { topic: %s } }\n    to: { kafka: { topic: %s } }\n", r.name, r.from, r.to)
		if r.maxRate > 0 {
			fmt.Fprintf(&rs, "    max_rate: %g\n", r.maxRate)
		}
		if r.ordered {
			rs.WriteString("    order: key\n")
		}
	}
	cfg := fmt.Sprintf(`cluster: %s
instance: bench-%s
redis: { addrs: ["%s"] }
kafka: { brokers: ["%s"], group_id: bench-%s }
admin: { listen: "%s" }
log: { level: info, format: text }
%s
routes:
%s`, cluster, cluster, env.redis.addr, env.kafka.addr, cluster, admin, extra, rs.String())
	path := filepath.Join(env.dir, "bridge-"+cluster+".yaml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	envv := append([]string(nil), env.bridgeEnv...)
	pp := ""
	if env.profile {
		pp = fmt.Sprintf("127.0.0.1:%d", freePort())
		envv = append(envv, "BENCH_PPROF_ADDR="+pp)
	}
	c, err := startChild("bridge-"+cluster, env.dir, envv, env.bridgeBin, "run", "-c", path)
	if err != nil {
		return nil, err
	}
	b := &bridgeProc{child: c, admin: admin, pprof: pp}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if c.exited() {
			return nil, fmt.Errorf("bridge exited before it was ready:\n%s", c.tail(3000))
		}
		resp, err := http.Get("http://" + admin + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return b, nil
			}
		}
		if time.Now().After(deadline) {
			c.kill()
			return nil, fmt.Errorf("bridge not ready after 30s:\n%s", c.tail(3000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// counts are the bridge's totals from GET /v1/stats.
type counts struct {
	Pending  int64 `json:"pending"`
	Inflight int64 `json:"inflight"`
	Dead     int64 `json:"dead"`
}

func (b *bridgeProc) stats() (counts, error) {
	var st struct {
		Totals counts `json:"totals"`
	}
	resp, err := http.Get("http://" + b.admin + "/v1/stats")
	if err != nil {
		return st.Totals, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		return st.Totals, fmt.Errorf("GET /v1/stats: %s: %s", resp.Status, body)
	}
	return st.Totals, json.NewDecoder(resp.Body).Decode(&st)
}

// waitPending waits until the bridge reports at least n messages pending or in flight.
func (b *bridgeProc) waitPending(ctx context.Context, n int64, limit time.Duration) (time.Duration, error) {
	start := time.Now()
	for {
		st, err := b.stats()
		if err == nil && st.Pending+st.Inflight >= n {
			return time.Since(start), nil
		}
		if time.Since(start) > limit || ctx.Err() != nil {
			return time.Since(start), fmt.Errorf("only %d of %d parked after %s (err %v)", st.Pending+st.Inflight, n, limit, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// cpuProfile fetches a CPU profile of secs seconds into path (needs -profile).
func (b *bridgeProc) cpuProfile(path string, secs int) error {
	if b.pprof == "" {
		return nil
	}
	return fetchProfile(b.pprof, path, secs)
}

// fetchProfile saves a CPU profile of secs seconds from a pprof listener.
func fetchProfile(addr, path string, secs int) error {
	return fetchURL(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), path)
}

// fetchURL saves the body of a GET.
func fetchURL(url, path string) error {
	cl := &http.Client{Timeout: 2 * time.Minute}
	resp, err := cl.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

func (b *bridgeProc) close() {
	if b != nil {
		b.stop(30 * time.Second)
	}
}
