package archtest

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/delaybridge/delay-bridge/config"
)

// The docs are reference, not a lab notebook: a reader cannot resolve an issue number
// (nothing in the repository does), and a word that dates a statement by when it was
// written means nothing once the page is read later. A doc or a comment states the reason itself; history belongs in
// the changelog and in git.
var (
	issueRef = regexp.MustCompile(`(?i)\bissues? ?#?[0-9]+\b|(^|[\s(\[,;])#[0-9]+\b`)
	workLog  = regexp.MustCompile(`(?i)\b(this session|previous session|earlier session|last session|today|yesterday's run|we measured|this work|the issue's)\b`)
	// A section titled by a date is a work-log entry.
	datedHeading = regexp.MustCompile(`^#+ .*\b20[0-9]{2}-[0-9]{2}-[0-9]{2}\b`)
)

const (
	maxBenchmarksLines = 300 // docs/BENCHMARKS.md: how to run, the current tables, the peers, the machine
	maxStatusLines     = 20  // README's "Status and figures"
)

// repoRoot is the module's root, seen from this package's directory.
var repoRoot = filepath.Join("..", "..")

// docFiles are the Markdown pages the check reads: docs/*.md, README.md and the charts'
// READMEs.
func docFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	for _, pat := range []string{"docs/*.md", "README.md", "charts/*/README.md"} {
		m, err := filepath.Glob(filepath.Join(repoRoot, pat))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 5 {
		t.Fatalf("found only %d Markdown files from %s", len(files), repoRoot)
	}
	return files
}

// workLogProblems returns "why" for a line of prose that cites an issue number or a
// work-log word, "" for a clean line.
func workLogProblems(line string) string {
	if m := issueRef.FindString(line); m != "" {
		return fmt.Sprintf("cites an issue number (%q): state the reason itself", strings.TrimSpace(m))
	}
	if m := workLog.FindString(line); m != "" {
		return fmt.Sprintf("work-log word %q: state what holds, with the command that measured it", m)
	}
	return ""
}

// wrappedProblem returns "why" for line joined with the next one (next's leading
// comment marks and spaces dropped) when the two together cite an issue number or a
// work-log word that neither does alone: prose wraps anywhere, "(issue" at the end
// of one line and "17:" at the start of the next.
func wrappedProblem(line, next string) string {
	next = strings.TrimLeft(next, " \t/*")
	if next == "" || workLogProblems(line) != "" || workLogProblems(next) != "" {
		return ""
	}
	return workLogProblems(strings.TrimSpace(line) + " " + next)
}

func TestDocsHaveNoIssueNumbersOrWorkLog(t *testing.T) {
	for _, f := range docFiles(t) {
		rel, _ := filepath.Rel(repoRoot, f)
		lines := readLines(t, f)
		for i, line := range lines {
			if why := workLogProblems(line); why != "" {
				t.Errorf("%s:%d: %s", rel, i+1, why)
			}
			if i+1 < len(lines) {
				if why := wrappedProblem(line, lines[i+1]); why != "" {
					t.Errorf("%s:%d: wrapped over two lines, %s", rel, i+1, why)
				}
			}
			if datedHeading.MatchString(line) {
				t.Errorf("%s:%d: a section titled by a date is a work-log entry: title it by its subject", rel, i+1)
			}
		}
	}
}

// TestGoCommentsHaveNoIssueNumbersOrWorkLog reads every comment of every Go file in the
// repository (bench/ included, tests included).
func TestGoCommentsHaveNoIssueNumbersOrWorkLog(t *testing.T) {
	fset := token.NewFileSet()
	files := 0
	err := walkGoFiles(repoRoot, func(p string) error {
		files++
		f, err := parser.ParseFile(fset, p, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		for _, cg := range f.Comments {
			var lines []string
			var at []int
			for _, c := range cg.List {
				start := fset.Position(c.Pos()).Line
				for i, line := range strings.Split(c.Text, "\n") {
					lines, at = append(lines, line), append(at, start+i)
				}
			}
			for i, line := range lines {
				if why := workLogProblems(line); why != "" {
					t.Errorf("%s:%d: %s", rel, at[i], why)
				}
				if i+1 < len(lines) {
					if why := wrappedProblem(line, lines[i+1]); why != "" {
						t.Errorf("%s:%d: wrapped over two lines, %s", rel, at[i], why)
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 200 {
		t.Fatalf("read only %d Go files from %s", files, repoRoot)
	}
}

func TestWorkLogPatterns(t *testing.T) {
	if why := wrappedProblem("// never boxed into an interface (issue", "// 17: three allocations less"); why == "" {
		t.Error("an issue number wrapped over two comment lines passed")
	}
	if why := wrappedProblem("the replace storm of the", "// 19 routes"); why != "" {
		t.Errorf("a clean wrap was refused: %s", why)
	}
	for _, bad := range []string{"measured in issue 17", "see #17.", "(#3)", "Issue 11's final run", "as this session found", "we measured 3 ms", "Today the drain", "the issue's target"} {
		if workLogProblems(bad) == "" {
			t.Errorf("%q passes the check", bad)
		}
	}
	for _, good := range []string{"instance#incarnation", "a#1|2", "scheduler.tick: 1ms", "issues a claim", "plugin's GitHub issues/36", "shard 17"} {
		if why := workLogProblems(good); why != "" {
			t.Errorf("%q refused: %s", good, why)
		}
	}
	if !datedHeading.MatchString("## The final run (2026-11-28)") || datedHeading.MatchString("## Running it") {
		t.Error("datedHeading does not tell a dated title from a plain one")
	}
}

func TestDocSizes(t *testing.T) {
	if n := len(readLines(t, filepath.Join(repoRoot, "docs", "BENCHMARKS.md"))); n > maxBenchmarksLines {
		t.Errorf("docs/BENCHMARKS.md: %d lines, limit %d: keep the current tables, leave history to git", n, maxBenchmarksLines)
	}
	status := section(readLines(t, filepath.Join(repoRoot, "README.md")), "## Status and figures")
	if status == nil {
		t.Fatal(`README.md has no "## Status and figures" section`)
	}
	if len(status) > maxStatusLines {
		t.Errorf("README.md \"Status and figures\": %d lines, limit %d: one figure per fact, the rest in docs/BENCHMARKS.md", len(status), maxStatusLines)
	}
}

// section returns the lines under heading up to the next heading of any level, without
// leading and trailing blank lines; nil when the heading is missing.
func section(lines []string, heading string) []string {
	for i, l := range lines {
		if strings.TrimSpace(l) != heading {
			continue
		}
		var out []string
		for _, l := range lines[i+1:] {
			if strings.HasPrefix(l, "#") {
				break
			}
			out = append(out, l)
		}
		for len(out) > 0 && strings.TrimSpace(out[0]) == "" {
			out = out[1:]
		}
		for len(out) > 0 && strings.TrimSpace(out[len(out)-1]) == "" {
			out = out[:len(out)-1]
		}
		if out == nil {
			out = []string{}
		}
		return out
	}
	return nil
}

func readLines(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

// TestConfigReferenceMatchesConfig holds README's "Configuration reference" (its YAML
// block) against config.Config: every key of every section must be shown in it, and
// every key it shows must exist. A section type used in several places (TLS, the
// endpoints) counts as documented where any of its uses shows the key.
func TestConfigReferenceMatchesConfig(t *testing.T) {
	doc := configReferenceYAML(t)
	var tree any
	if err := yaml.Unmarshal([]byte(doc), &tree); err != nil {
		t.Fatalf("README's configuration reference is not YAML: %v", err)
	}
	shown := map[reflect.Type]map[string]bool{}
	for _, e := range walkDocKeys(reflect.TypeFor[config.Config](), "", tree, shown) {
		t.Errorf("README configuration reference: %s", e)
	}
	for _, k := range undocumentedKeys(reflect.TypeFor[config.Config](), shown) {
		t.Errorf("config key %s is missing from README's configuration reference", k)
	}
}

func configReferenceYAML(t *testing.T) string {
	t.Helper()
	sec := section(readLines(t, filepath.Join(repoRoot, "README.md")), "## Configuration reference")
	if sec == nil {
		t.Fatal(`README.md has no "## Configuration reference" section`)
	}
	var b strings.Builder
	in := false
	for _, l := range sec {
		switch {
		case !in && strings.HasPrefix(l, "```yaml"):
			in = true
		case in && strings.HasPrefix(l, "```"):
			return b.String()
		case in:
			b.WriteString(l + "\n")
		}
	}
	t.Fatal("README's configuration reference has no ```yaml block")
	return ""
}

var durationType = reflect.TypeFor[time.Duration]()

// section types: structs other than time.Duration, behind pointers and slices.
func sectionType(t reflect.Type) (reflect.Type, bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice {
		t = t.Elem()
	}
	return t, t.Kind() == reflect.Struct && t != durationType
}

func koanfKeys(t reflect.Type) map[string]reflect.StructField {
	out := map[string]reflect.StructField{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("koanf"), ",")
		if f.IsExported() && name != "" && name != "-" {
			out[name] = f
		}
	}
	return out
}

// walkDocKeys records, per section type, the keys the YAML shows, and returns the keys
// it shows that the type does not have.
func walkDocKeys(t reflect.Type, path string, node any, shown map[reflect.Type]map[string]bool) []string {
	var errs []string
	switch n := node.(type) {
	case []any:
		for _, e := range n {
			errs = append(errs, walkDocKeys(t, path, e, shown)...)
		}
	case map[string]any:
		keys := koanfKeys(t)
		if shown[t] == nil {
			shown[t] = map[string]bool{}
		}
		for k, v := range n {
			f, ok := keys[k]
			if !ok {
				errs = append(errs, fmt.Sprintf("%s is not a config key", joinPath(path, k)))
				continue
			}
			shown[t][k] = true
			if st, isSec := sectionType(f.Type); isSec {
				errs = append(errs, walkDocKeys(st, joinPath(path, k), v, shown)...)
			}
		}
	}
	return errs
}

// undocumentedKeys lists the keys of every section type reachable from t that no use of
// that type shows, by one path where the type is used.
func undocumentedKeys(root reflect.Type, shown map[reflect.Type]map[string]bool) []string {
	var out []string
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type, path string)
	walk = func(t reflect.Type, path string) {
		if seen[t] {
			return
		}
		seen[t] = true
		for k, f := range koanfKeys(t) {
			if !shown[t][k] {
				out = append(out, joinPath(path, k))
			}
			if st, isSec := sectionType(f.Type); isSec {
				walk(st, joinPath(path, k))
			}
		}
	}
	walk(root, "")
	sort.Strings(out)
	return out
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// walkGoFiles calls fn with the path of every Go file under root, skipping hidden
// folders, testdata and node_modules.
func walkGoFiles(root string, fn func(path string) error) error {
	return filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if n := d.Name(); p != root && (strings.HasPrefix(n, ".") || n == "testdata" || n == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		return fn(p)
	})
}
