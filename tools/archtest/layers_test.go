// Package archtest checks the package layering of the module: every package has a
// layer, and imports point down only. docs/ARCHITECTURE.md lists the same table
// (between the "layers:begin" and "layers:end" markers), regenerated with
//
//	go test ./tools/archtest -run TestLayers -update
package archtest

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the layer table in docs/ARCHITECTURE.md")

const module = "github.com/delaybridge/delay-bridge"

// layers gives every package of the module (import path below the module) a layer. A
// package may import only packages of a strictly lower layer. Patterns ending in "/..."
// match a folder and everything under it; the longest match wins.
var layers = []struct {
	layer   int
	pattern string
	role    string
}{
	{0, "internal/envelope", "leaf: the message envelope and its binary codec"},
	{0, "internal/clock", "leaf: the injected clock, Sleep, the backoff policy"},
	{0, "internal/fault", "leaf: error classification (permanent / transient)"},
	{0, "internal/observe", "leaf: the Observer interface (no Prometheus)"},
	{0, "lua", "leaf: the Redis scripts, embedded"},
	{0, "config", "leaf: loading and validating the configuration"},
	{1, "internal/kafkaconn", "broker helper: Kafka dialer, TLS, SASL"},
	{1, "store/storeapi", "the shard store contract: the Store interface, its types and errors"},
	{1, "internal/amqpconn", "broker helper: the AMQP connection manager"},
	{1, "testkit/tcpproxy", "test helper: a TCP proxy that can freeze"},
	{1, "membership", "live members, rendezvous, leases with fencing tokens (shards and Kafka partitions)"},
	{1, "internal/tracing", "OpenTelemetry: the span per publish attempt (egress.Tracer), the SDK from OTEL_*"},
	{1, "app/series", "the console charts' ring: per-route samples of recent intervals, merging"},
	{2, "store/redisstore", "the Redis shard store"},
	{2, "scheduler/wheel", "the hashed timing wheel"},
	{2, "ingress", "the Source contract, header parsing, the delivery loop"},
	{2, "egress", "the Sink contract, the dispatcher"},
	{2, "admin", "the HTTP API: server, types, client, console"},
	{3, "ingress/kafka", "Kafka source (kafka-go)"},
	{3, "ingress/amqp", "RabbitMQ source (amqp091-go)"},
	{3, "egress/kafka", "Kafka sink (kafka-go)"},
	{3, "egress/amqp", "RabbitMQ sink (amqp091-go)"},
	{3, "scheduler", "ownership, pumps, completer, credits, intake"},
	{3, "jobs", "bulk jobs: the runner (cancel, reschedule, requeue, purge over a filter)"},
	{3, "schedules", "recurring schedules: the model (spec, slots, catch-up, occurrence ids) and the planner"},
	{4, "app/metrics", "the Prometheus observer and collectors"},
	{4, "app/adminapi", "the admin backend: admin.Backend over the store, the scheduler and the sources' and sinks' health"},
	{5, "app", "composition root: builds, runs and stops the pieces from a Config"},
	{6, "cmd/bridge/...", "the binary (cobra): run, dev, ctl, check-config, version, completion"},
	{5, "cmd/bridge/internal/dev", "bridge dev: embedded Kafka-protocol broker and Redis (not with -tags nodev)"},
	{7, "testkit/...", "test kits: servers, conformance suites, fakes"},
	{7, "store/memstore", "test kit: the shard store in memory, with failure injection"},
	{7, "store/storetest", "test kit: the shard store conformance suite"},
	{7, "scheduler/redistest", "tests only: the scheduler on a real redis-server"},
	{7, "admin/consoletest", "test kit: the web console in headless Chromium (chromedp)"},
	{7, "tools/chartgen", "tool: chart values schema and README from config"},
	{7, "tools/charttest", "tests of the chart, image and examples"},
	{7, "tools/imagebuild", "tool: the OCI image"},
	{7, "tools/archtest", "this test"},
	{8, "e2e", "end-to-end tests through the built binary"},
}

func layerOf(pkg string) (int, string, bool) {
	best, bestLen := -1, -1
	role := ""
	for _, l := range layers {
		p := l.pattern
		match := pkg == p
		if base, ok := strings.CutSuffix(p, "/..."); ok {
			match = pkg == base || strings.HasPrefix(pkg, base+"/")
		}
		if match && len(p) > bestLen {
			best, bestLen, role = l.layer, len(p), l.role
		}
	}
	return best, role, best >= 0
}

type pkgInfo struct {
	path    string
	imports []string
}

func listPackages(t *testing.T) []pkgInfo {
	t.Helper()
	cmd := exec.Command("go", "list", "-f", "{{.ImportPath}} {{join .Imports \" \"}}", "./...")
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkgInfo
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		p := pkgInfo{path: strings.TrimPrefix(strings.TrimPrefix(f[0], module), "/")}
		for _, imp := range f[1:] {
			if rest, ok := strings.CutPrefix(imp, module+"/"); ok {
				p.imports = append(p.imports, rest)
			}
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages: not the module root?", len(pkgs))
	}
	return pkgs
}

func TestLayers(t *testing.T) {
	pkgs := listPackages(t)
	for _, p := range pkgs {
		lp, _, ok := layerOf(p.path)
		if !ok {
			t.Errorf("package %s has no layer: add it to layers in tools/archtest", p.path)
			continue
		}
		for _, imp := range p.imports {
			li, _, ok := layerOf(imp)
			if ok && li >= lp {
				t.Errorf("%s (layer %d) imports %s (layer %d): imports must point down", p.path, lp, imp, li)
			}
		}
	}
	table := renderTable(pkgs)
	doc := filepath.Join("..", "..", "docs", "ARCHITECTURE.md")
	raw, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	const begin, end = "<!-- layers:begin -->\n", "<!-- layers:end -->"
	i, j := bytes.Index(raw, []byte(begin)), bytes.Index(raw, []byte(end))
	if i < 0 || j < i {
		t.Fatalf("%s: markers %q … %q not found", doc, strings.TrimSpace(begin), end)
	}
	current := string(raw[i+len(begin) : j])
	if current == table {
		return
	}
	if *update {
		var b bytes.Buffer
		b.Write(raw[:i+len(begin)])
		b.WriteString(table)
		b.Write(raw[j:])
		if err := os.WriteFile(doc, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the layer table in docs/ARCHITECTURE.md is stale; run: go test ./tools/archtest -run TestLayers -update\nwant:\n%s", table)
}

// renderTable lists the packages by layer with what each imports from the module.
func renderTable(pkgs []pkgInfo) string {
	sort.Slice(pkgs, func(a, b int) bool {
		la, _, _ := layerOf(pkgs[a].path)
		lb, _, _ := layerOf(pkgs[b].path)
		if la != lb {
			return la < lb
		}
		return pkgs[a].path < pkgs[b].path
	})
	var b strings.Builder
	b.WriteString("| layer | package | role | imports (from this module) |\n|---|---|---|---|\n")
	for _, p := range pkgs {
		l, role, _ := layerOf(p.path)
		imps := append([]string(nil), p.imports...)
		sort.Strings(imps)
		name := p.path
		if name == "" {
			name = "."
		}
		fmt.Fprintf(&b, "| %d | `%s` | %s | %s |\n", l, name, role, strings.Join(imps, ", "))
	}
	return b.String()
}

// TestStoreBehindItsContract: the Redis store is built in one place, the composition
// root (app); every other package works through the contract,
// store/storeapi. (Tests may build a Redis store: test imports are not listed.)
func TestStoreBehindItsContract(t *testing.T) {
	const redisStore, root = "store/redisstore", "app"
	for _, p := range listPackages(t) {
		for _, imp := range p.imports {
			if imp == redisStore && p.path != root {
				t.Errorf("%s imports %s: depend on store/storeapi (only %s builds the Redis store)", p.path, redisStore, root)
			}
		}
	}
}
