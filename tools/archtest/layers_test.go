// Package archtest checks the layering of the module at two scales: every top folder is
// one layer and imports only lower folders, and inside that every package has a layer
// and imports point down only. docs/ARCHITECTURE.md lists both tables (between the
// "layers:begin" and "layers:end" markers), regenerated with
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

var update = flag.Bool("update", false, "rewrite the layer tables in docs/ARCHITECTURE.md")

const module = "github.com/delaybridge/delay-bridge"

// folders gives every top folder of the module one layer. A package may import packages
// of its own top folder (the package layers below order those) and of top folders of a
// strictly lower layer only, so a folder's name says where it stands: what is drawn
// above a folder may use it, never the other way round.
var folders = []struct {
	layer  int
	folder string
	role   string
}{
	{1, "config", "the configuration: loading, defaults, validation"},
	{1, "internal", "the shared words and helpers: envelope, clock, fault, observe, broker connections, tracing"},
	{1, "lua", "the Redis scripts, embedded"},
	{2, "admin", "the HTTP API: server, types, client, console"},
	{2, "egress", "the Sink contract, the dispatcher, the Kafka and RabbitMQ sinks"},
	{2, "membership", "live members, rendezvous, leases with fencing tokens"},
	{3, "ingress", "the Source contract, header parsing, the Kafka and RabbitMQ sources"},
	{3, "store", "the shard store: its contract, conformance suite, in-memory and Redis implementations"},
	{4, "jobs", "bulk jobs over the store"},
	{4, "schedules", "recurring schedules over the store"},
	{4, "scheduler", "the scheduler core: ownership, pumps, completer, the timing wheel"},
	{5, "app", "the composition root, the admin backend, the Prometheus observer, the console charts' ring"},
	{6, "cmd", "the binary"},
	{7, "testkit", "test kits: servers, proxies, the source and sink conformance suite"},
	{7, "tools", "build tools and repository checks: chart and image generators, chart and layer tests"},
	{8, "e2e", "end-to-end tests through the built binary"},
}

// topFolder is the first element of a package path below the module ("" for the root).
func topFolder(pkg string) string {
	top, _, _ := strings.Cut(pkg, "/")
	return top
}

func folderLayer(folder string) (int, bool) {
	for _, f := range folders {
		if f.folder == folder {
			return f.layer, true
		}
	}
	return -1, false
}

// folderViolations lists every import that leaves its top folder for one that is not
// strictly lower, and every package whose top folder has no layer.
func folderViolations(pkgs []pkgInfo) []string {
	var out []string
	for _, p := range pkgs {
		from := topFolder(p.path)
		lf, ok := folderLayer(from)
		if !ok {
			out = append(out, fmt.Sprintf("package %s: top folder %q has no layer: add it to folders in tools/archtest", p.path, from))
			continue
		}
		for _, imp := range p.imports {
			to := topFolder(imp)
			if to == from {
				continue
			}
			if lt, ok := folderLayer(to); ok && lt >= lf {
				out = append(out, fmt.Sprintf("%s/ (folder layer %d) imports %s/ (folder layer %d) through %s -> %s: a top folder may import only lower folders",
					from, lf, to, lt, p.path, imp))
			}
		}
	}
	return out
}

// layers gives every package of the module (import path below the module) a layer,
// the finer order inside the folder layers above. A package may import only packages
// of a strictly lower layer. Patterns ending in "/..."
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
	{1, "testkit/cmd/kfake", "test helper: kfake in a process of its own, outside -race"},
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
	{7, "testkit", "test kit: real servers (redis-server, RabbitMQ, kfake), clusters, proxies"},
	{7, "testkit/conformance", "test kit: the suite every ingress.Source and egress.Sink passes"},
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
	for _, v := range folderViolations(pkgs) {
		t.Error(v)
	}
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
	t.Errorf("the layer tables in docs/ARCHITECTURE.md are stale; run: go test ./tools/archtest -run TestLayers -update\nwant:\n%s", table)
}

// renderTable lists the top folders by layer with the folders each imports, then the
// packages by layer with what each imports from the module.
func renderTable(pkgs []pkgInfo) string {
	var b strings.Builder
	b.WriteString(renderFolders(pkgs))
	b.WriteString("\n")
	b.WriteString(renderPackages(pkgs))
	return b.String()
}

func renderFolders(pkgs []pkgInfo) string {
	uses := map[string]map[string]bool{}
	for _, p := range pkgs {
		from := topFolder(p.path)
		for _, imp := range p.imports {
			if to := topFolder(imp); to != from {
				if uses[from] == nil {
					uses[from] = map[string]bool{}
				}
				uses[from][to] = true
			}
		}
	}
	fs := append(folders[:0:0], folders...)
	sort.SliceStable(fs, func(a, b int) bool {
		if fs[a].layer != fs[b].layer {
			return fs[a].layer < fs[b].layer
		}
		return fs[a].folder < fs[b].folder
	})
	var b strings.Builder
	b.WriteString("| folder layer | folder | role | imports folders |\n|---|---|---|---|\n")
	for _, f := range fs {
		var imps []string
		for to := range uses[f.folder] {
			imps = append(imps, "`"+to+"/`")
		}
		sort.Strings(imps)
		fmt.Fprintf(&b, "| %d | `%s/` | %s | %s |\n", f.layer, f.folder, f.role, strings.Join(imps, ", "))
	}
	return b.String()
}

func renderPackages(pkgs []pkgInfo) string {
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

// TestFolderViolations: the folder rule on a made-up module, so that it is seen to
// reject an import that runs back up even while the real tree has none.
func TestFolderViolations(t *testing.T) {
	pkgs := []pkgInfo{
		{path: "store/redisstore", imports: []string{"store/storeapi", "membership", "internal/clock"}},
		{path: "membership", imports: []string{"jobs"}},
		{path: "scheduler", imports: []string{"schedules"}},
		{path: "nowhere/pkg"},
	}
	got := folderViolations(pkgs)
	want := []string{
		"membership/ (folder layer 2) imports jobs/ (folder layer 4) through membership -> jobs: a top folder may import only lower folders",
		"scheduler/ (folder layer 4) imports schedules/ (folder layer 4) through scheduler -> schedules: a top folder may import only lower folders",
		`package nowhere/pkg: top folder "nowhere" has no layer: add it to folders in tools/archtest`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("folderViolations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
