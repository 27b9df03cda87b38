package charttest

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// promcheck checks Prometheus rule files and PromQL expressions with Prometheus' own
// code (github.com/prometheus/prometheus, through the Go module proxy; built once into
// the cache like kubecheck): rulefmt.ParseFile, as `promtool check rules` does, and the
// PromQL parser. For each rule or expression it reports the metric names the
// expression selects (from the parsed syntax tree) or the error.
const promcheckVersion = "v0.316.0"

const promcheckSource = `package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"io"
	"os"
	"sort"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

type result struct {
	Name    string   ` + "`" + `json:"name"` + "`" + `
	Expr    string   ` + "`" + `json:"expr"` + "`" + `
	Metrics []string ` + "`" + `json:"metrics"` + "`" + `
	Error   string   ` + "`" + `json:"error,omitempty"` + "`" + `
}

func metrics(e parser.Expr) []string {
	seen := map[string]bool{}
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok && vs.Name != "" {
			seen[vs.Name] = true
		}
		return nil
	})
	out := []string{}
	for m := range seen {
		out = append(out, m)
	}
	sort.Strings(out)
	return out
}

func main() {
	p := parser.NewParser(parser.Options{})
	var out []result
	bad := 0
	if len(os.Args) > 2 && os.Args[1] == "rules" {
		for _, f := range os.Args[2:] {
			groups, errs := rulefmt.ParseFile(f, false, model.UTF8Validation, p, slog.New(slog.NewTextHandler(io.Discard, nil)))
			for _, err := range errs {
				out = append(out, result{Name: f, Error: err.Error()})
				bad++
			}
			if groups == nil {
				continue
			}
			for _, g := range groups.Groups {
				for _, r := range g.Rules {
					e, err := p.ParseExpr(r.Expr)
					res := result{Name: r.Alert + r.Record, Expr: r.Expr}
					if err != nil {
						res.Error = err.Error()
						bad++
					} else {
						res.Metrics = metrics(e)
					}
					out = append(out, res)
				}
			}
		}
	} else {
		// expr: one JSON string per stdin line
		sc := bufio.NewScanner(os.Stdin)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			var s string
			if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(2)
			}
			res := result{Expr: s}
			e, err := p.ParseExpr(s)
			if err != nil {
				res.Error = err.Error()
				bad++
			} else {
				res.Metrics = metrics(e)
			}
			out = append(out, res)
		}
	}
	json.NewEncoder(os.Stdout).Encode(out)
	if bad > 0 {
		os.Exit(1)
	}
}
`

type promResult struct {
	Name    string   `json:"name"`
	Expr    string   `json:"expr"`
	Metrics []string `json:"metrics"`
	Error   string   `json:"error"`
}

var promcheckBin = sync.OnceValues(func() (string, error) {
	gomod := "module promcheck\n\ngo 1.26\n\nrequire github.com/prometheus/prometheus " + promcheckVersion + "\n"
	sum := sha256.Sum256([]byte(gomod + promcheckSource))
	return buildCached("promcheck-"+hex.EncodeToString(sum[:6]), "promcheck", func(out string) error {
		src := filepath.Join(out, "src")
		if err := os.MkdirAll(src, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(gomod), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(promcheckSource), 0o644); err != nil {
			return err
		}
		_, err := run(src, goEnv("GOFLAGS=-mod=mod"), goBinary(), "build", "-p", "1", "-o", filepath.Join(out, "promcheck"), ".")
		return err
	})
})

func promcheck(t *testing.T, stdin string, args ...string) []promResult {
	t.Helper()
	bin, err := promcheckBin()
	if err != nil {
		t.Fatalf("building promcheck (github.com/prometheus/prometheus %s through the Go module proxy): %v", promcheckVersion, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdin = strings.NewReader(stdin)
	out, runErr := cmd.Output()
	var res []promResult
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("promcheck %v: %v (%v)\n%s", args, err, runErr, out)
	}
	for _, r := range res {
		if r.Error != "" {
			t.Errorf("Prometheus refuses %s %q: %s", r.Name, r.Expr, r.Error)
		}
	}
	return res
}

// promRules checks a Prometheus rule file (the groups: document).
func promRules(t *testing.T, file string) []promResult {
	t.Helper()
	return promcheck(t, "", "rules", file)
}

// promExprs parses PromQL expressions.
func promExprs(t *testing.T, exprs []string) []promResult {
	t.Helper()
	var in strings.Builder
	for _, e := range exprs {
		b, _ := json.Marshal(e)
		in.Write(b)
		in.WriteByte('\n')
	}
	res := promcheck(t, in.String(), "expr")
	if len(res) != len(exprs) {
		t.Fatalf("promcheck answered %d results for %d expressions", len(res), len(exprs))
	}
	return res
}

// foreignMetrics are series the rules use that other exporters provide.
var foreignMetrics = map[string]bool{"up": true}

// checkParsedMetrics fails for a selected metric the bridge does not export.
func checkParsedMetrics(t *testing.T, names map[string]bool, res []promResult) {
	t.Helper()
	for _, r := range res {
		if r.Error == "" && len(r.Metrics) == 0 {
			t.Errorf("%s %q selects no metric", r.Name, r.Expr)
		}
		for _, m := range r.Metrics {
			base := m
			for _, suf := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(m, suf); ok && names[b] {
					base = b
				}
			}
			if !names[base] && !foreignMetrics[m] {
				t.Errorf("%s selects %s, which the bridge does not export", r.Name, m)
			}
		}
	}
}
