package charttest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"go.yaml.in/yaml/v3"
)

// ---- the Dockerfile and the bridge binary --------------------------------------------

type dockerfile struct {
	goVersion  string   // ARG GO_VERSION
	buildCmd   string   // the RUN that runs go build, without RUN and --mount flags
	entrypoint []string // of the final stage
	cmd        []string
	user       string
	copies     []string // COPY lines of the final stage
}

func parseDockerfile(t *testing.T) dockerfile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	// Join continuation lines, drop comments.
	var lines []string
	var cur strings.Builder
	for _, l := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(l)
		if cur.Len() == 0 && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if s, ok := strings.CutSuffix(trimmed, "\\"); ok {
			cur.WriteString(s + " ")
			continue
		}
		cur.WriteString(trimmed)
		lines = append(lines, cur.String())
		cur.Reset()
	}
	var d dockerfile
	stages := 0
	for _, l := range lines {
		instr, rest, _ := strings.Cut(l, " ")
		rest = strings.TrimSpace(rest)
		switch strings.ToUpper(instr) {
		case "FROM":
			stages++
			d.copies = nil
		case "ARG":
			if v, ok := strings.CutPrefix(rest, "GO_VERSION="); ok {
				d.goVersion = v
			}
		case "RUN":
			if !strings.Contains(rest, "go build") {
				continue
			}
			fields := strings.Fields(rest)
			for len(fields) > 0 && strings.HasPrefix(fields[0], "--") {
				fields = fields[1:]
			}
			d.buildCmd = strings.Join(fields, " ")
		case "ENTRYPOINT":
			d.entrypoint = execForm(t, rest)
		case "CMD":
			d.cmd = execForm(t, rest)
		case "USER":
			d.user = rest
		case "COPY":
			d.copies = append(d.copies, rest)
		}
	}
	if stages < 2 {
		t.Errorf("Dockerfile: want a multi-stage build, found %d stage(s)", stages)
	}
	return d
}

func execForm(t *testing.T, s string) []string {
	t.Helper()
	var out []string
	if err := yaml.Unmarshal([]byte(s), &out); err != nil {
		t.Fatalf("Dockerfile: %q is not in exec form: %v", s, err)
	}
	return out
}

// dockerignore reads .dockerignore's patterns (Docker's syntax: paths relative to the
// context root, ** for any number of directories; negation is not used here).
func dockerignore(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, ".dockerignore"))
	if err != nil {
		t.Fatal(err)
	}
	var pats []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, "!") {
			t.Fatalf(".dockerignore: negated pattern %q is not supported by this test's matcher", l)
		}
		pats = append(pats, path.Clean(strings.TrimPrefix(l, "/")))
	}
	return pats
}

func matchParts(pat, name []string) bool {
	if len(pat) == 0 {
		return len(name) == 0
	}
	if pat[0] == "**" {
		for i := 0; i <= len(name); i++ {
			if matchParts(pat[1:], name[i:]) {
				return true
			}
		}
		return false
	}
	if len(name) == 0 {
		return false
	}
	if ok, _ := path.Match(pat[0], name[0]); !ok {
		return false
	}
	return matchParts(pat[1:], name[1:])
}

func ignored(pats []string, rel string) bool {
	for _, p := range pats {
		if matchParts(strings.Split(p, "/"), strings.Split(rel, "/")) {
			return true
		}
	}
	return false
}

// copyContext copies the repository into dst as Docker would send it as build context.
func copyContext(pats []string, dst string) error {
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return err
	}
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		rel = filepath.ToSlash(rel)
		if ignored(pats, rel) {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		target := filepath.Join(dst, filepath.FromSlash(rel))
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		in, err := os.Open(p)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
}

const testVersion = "9.8.7-charttest"

type bridgeBuild struct {
	bin        string
	contextDir string
}

var bridgeOnce sync.Once
var bridgeResult bridgeBuild
var bridgeErr error

// bridge builds cmd/bridge with the Dockerfile's own go build command, run in a copy of
// the Docker build context, for linux/<this arch> and VERSION=testVersion.
func bridge(t *testing.T) string {
	t.Helper()
	d := parseDockerfile(t)
	pats := dockerignore(t)
	bridgeOnce.Do(func() {
		if d.buildCmd == "" {
			bridgeErr = errors.New("Dockerfile: no RUN instruction runs go build")
			return
		}
		if !strings.Contains(d.buildCmd, "-o /out/bridge") {
			bridgeErr = fmt.Errorf("Dockerfile: the go build command must write -o /out/bridge, got %q", d.buildCmd)
			return
		}
		ctx := filepath.Join(workDir, "docker-context")
		if err := copyContext(pats, ctx); err != nil {
			bridgeErr = err
			return
		}
		bin := filepath.Join(workDir, "bridge")
		cmd := strings.ReplaceAll(d.buildCmd, "/out/bridge", bin)
		// One compile at a time: this build runs beside the other packages' timing-
		// sensitive tests.
		env := append(os.Environ(), "VERSION="+testVersion, "TARGETOS=linux", "TARGETARCH="+runtime.GOARCH,
			"GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -p=1"))
		if _, err := run(ctx, env, "sh", "-c", cmd); err != nil {
			bridgeErr = fmt.Errorf("the Dockerfile's build command failed in a copy of the build context (.dockerignore applied): %w", err)
			return
		}
		bridgeResult = bridgeBuild{bin: bin, contextDir: ctx}
	})
	if bridgeErr != nil {
		t.Fatal(bridgeErr)
	}
	if runtime.GOOS != "linux" {
		t.Skipf("the Dockerfile builds for linux; this is %s", runtime.GOOS)
	}
	return bridgeResult.bin
}

func TestDockerfile(t *testing.T) {
	d := parseDockerfile(t)
	for _, flag := range []string{"CGO_ENABLED=0", "-tags nodev", "-trimpath", `-s -w`, "-X main.version=$VERSION", "./cmd/bridge"} {
		if !strings.Contains(d.buildCmd, flag) {
			t.Errorf("Dockerfile: the go build command %q lacks %q", d.buildCmd, flag)
		}
	}
	if want := []string{"/bridge"}; !slices.Equal(d.entrypoint, want) {
		t.Errorf("Dockerfile: ENTRYPOINT %q, want %q", d.entrypoint, want)
	}
	if want := []string{"run", "-c", "/etc/delay-bridge/bridge.yaml"}; !slices.Equal(d.cmd, want) {
		t.Errorf("Dockerfile: CMD %q, want %q (the chart mounts bridge.yaml there)", d.cmd, want)
	}
	if d.user == "" || strings.HasPrefix(d.user, "0") || strings.HasPrefix(d.user, "root") {
		t.Errorf("Dockerfile: the final stage must set a non-root USER, got %q", d.user)
	}
	// Kubernetes' runAsNonRoot can only verify a numeric user.
	if _, err := strconv.Atoi(strings.Split(d.user, ":")[0]); err != nil {
		t.Errorf("Dockerfile: USER %q must be numeric for runAsNonRoot", d.user)
	}
	if !slices.ContainsFunc(d.copies, func(c string) bool { return strings.HasSuffix(c, "/out/bridge /bridge") }) {
		t.Errorf("Dockerfile: the final stage must COPY /out/bridge to /bridge, has %q", d.copies)
	}
	// The builder image must carry at least the Go version go.mod asks for, or the build
	// would fetch another toolchain (or fail without network).
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("go.mod: no go directive")
	}
	if compareVersions(d.goVersion, string(m[1])) < 0 {
		t.Errorf("Dockerfile: ARG GO_VERSION=%s is older than go.mod's go %s", d.goVersion, m[1])
	}

	bin := bridge(t)
	out, err := run("", nil, bin, "version")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "delay-bridge "+testVersion+"\n") {
		t.Errorf("bridge version after the Dockerfile's build with VERSION=%s printed:\n%s", testVersion, out)
	}
	// -trimpath: no path of the build machine in the binary.
	raw, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(raw, []byte(bridgeResult.contextDir)) {
		t.Errorf("the binary contains the build directory %s: -trimpath is not in effect", bridgeResult.contextDir)
	}
}

func TestDockerignoreMatcher(t *testing.T) {
	pats := []string{".git", "**/*_test.go", "*.md", "bridge", "**/testdata"}
	for rel, want := range map[string]bool{
		".git":                       true,
		"README.md":                  true,
		"docs/OPERATIONS.md":         false, // *.md is anchored at the root, as in Docker
		"config/load_test.go":        true,
		"config/load.go":             false,
		"bridge":                     true,
		"cmd/bridge":                 false,
		"internal/x/testdata":        true,
		"lua/park.lua":               false,
		"a/b/c/d_test.go":            true,
		"tools/charttest/chart_test": false,
	} {
		if got := ignored(pats, rel); got != want {
			t.Errorf("ignored(%q) = %v, want %v", rel, got, want)
		}
	}
	// The real file keeps what the build needs.
	real := dockerignore(t)
	for _, keep := range []string{"go.mod", "go.sum", "cmd/bridge/main.go", "lua/park.lua", "config/config.go"} {
		if ignored(real, keep) {
			t.Errorf(".dockerignore excludes %s, which the build needs", keep)
		}
	}
}

func compareVersions(a, b string) int {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < max(len(pa), len(pb)); i++ {
		var x, y int
		if i < len(pa) {
			x, _ = strconv.Atoi(pa[i])
		}
		if i < len(pb) {
			y, _ = strconv.Atoi(pb[i])
		}
		if x != y {
			return x - y
		}
	}
	return 0
}
