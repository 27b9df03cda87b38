// Package charttest checks the deployment artifacts that no other package's tests touch:
// the Helm chart in charts/delay-bridge, the manifests in examples/k8s, the Dockerfile and
// .dockerignore, and the metric and command names docs/OPERATIONS.md tells operators to
// use.
//
// Tools, built once per machine into the user cache directory (DELAYBRIDGE_TEST_HELM
// names a helm binary to use instead, as does a helm on PATH):
//   - helm (helm.sh/helm/v3/cmd/helm, through the Go module proxy): `helm lint --strict`
//     and `helm template` of several value sets;
//   - kubecheck, a small program written by this test that decodes manifests strictly into
//     the Kubernetes API's Go types (k8s.io/api), so a misspelled or misplaced field fails
//     here rather than at `kubectl apply`;
//   - the bridge binary, built with the Dockerfile's own `go build` command inside a copy
//     of the Docker build context (.dockerignore applied): its rendered and example
//     bridge.yaml files go through `bridge check-config` with the environment the pod
//     would give it.
package charttest

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/delaybridge/delay-bridge/admin"
	"github.com/delaybridge/delay-bridge/config"
)

const (
	helmModule  = "helm.sh/helm/v3/cmd/helm"
	helmVersion = "v3.21.4"
	// helmK8sMinor is the Kubernetes minor version of helm's k8s.io modules (v0.36).
	helmK8sMinor = "36"
	// kubeVersion is passed to helm lint and template, so that what they render does not
	// depend on the helm binary's own default.
	kubeVersion = "1.30.0"
	// k8sAPIVersion is the k8s.io/api (and apimachinery) version kubecheck decodes with.
	k8sAPIVersion = "v0.36.2"
	sigsYAML      = "v1.6.0"

	release   = "rel"
	namespace = "ns"
	// podName stands in for the downward API's metadata.name.
	podName = "rel-delay-bridge-7d9f8-x2x4q"
)

var (
	root     = mustAbs("../..")
	chartDir = filepath.Join(root, "charts", "delay-bridge")
	workDir  string // removed after the tests
)

func mustAbs(p string) string {
	a, err := filepath.Abs(p)
	if err != nil {
		panic(err)
	}
	return a
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "charttest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	workDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// ---- tools ---------------------------------------------------------------------------

func goBinary() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// cacheDir is where tools built by these tests are kept between runs.
func cacheDir() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		base = os.TempDir()
	}
	dir := filepath.Join(base, "delay-bridge-test")
	return dir, os.MkdirAll(dir, 0o755)
}

// run executes a command and returns its stdout; on failure the error carries stderr.
func run(dir string, env []string, name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if env != nil {
		cmd.Env = env
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if err != nil {
		return stdout.String(), fmt.Errorf("%s %s: %w\n%s%s", name, strings.Join(args, " "), err, stderr.String(), stdout.String())
	}
	return stdout.String(), nil
}

// goEnv is the environment for go commands that build tools: GOFLAGS of the caller (a
// -mod=vendor, say) must not apply to another module.
func goEnv(extra ...string) []string {
	env := slices.DeleteFunc(os.Environ(), func(kv string) bool {
		return strings.HasPrefix(kv, "GOFLAGS=") || strings.HasPrefix(kv, "GOBIN=")
	})
	return append(env, extra...)
}

// buildCached builds a tool once into cacheDir()/key/name, via a temporary directory
// renamed into place so a build cut short leaves nothing behind.
func buildCached(key, name string, build func(outDir string) error) (string, error) {
	cache, err := cacheDir()
	if err != nil {
		return "", err
	}
	final := filepath.Join(cache, key)
	bin := filepath.Join(final, name)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	tmp, err := os.MkdirTemp(cache, key+".tmp-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(tmp)
	if err := build(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, final); err != nil {
		if _, serr := os.Stat(bin); serr == nil {
			return bin, nil // built concurrently by another run
		}
		return "", err
	}
	return bin, nil
}

var helmBin = sync.OnceValues(func() (string, error) {
	if p := os.Getenv("DELAYBRIDGE_TEST_HELM"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p, nil
	}
	// The ldflags of helm's release builds: its version, and the Kubernetes version of
	// its k8s.io modules as the default capabilities (otherwise v1.20, which `helm install
	// --dry-run=client` cannot override and the chart's kubeVersion refuses).
	ldflags := "-s -w -X helm.sh/helm/v3/internal/version.version=" + helmVersion +
		" -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=" + helmK8sMinor +
		" -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=" + helmK8sMinor
	return buildCached("helm-"+helmVersion+"-k8s1."+helmK8sMinor, "helm", func(out string) error {
		// -p 1: this build runs beside the other packages' timing-sensitive tests.
		_, err := run(out, goEnv("GOBIN="+out), goBinary(), "install", "-p", "1", "-ldflags", ldflags, helmModule+"@"+helmVersion)
		return err
	})
})

func helm(t *testing.T) string {
	t.Helper()
	p, err := helmBin()
	if err != nil {
		t.Fatalf("no helm: set DELAYBRIDGE_TEST_HELM, put helm on PATH, or let the test build it "+
			"through the Go module proxy (go install %s@%s), which failed: %v", helmModule, helmVersion, err)
	}
	return p
}

// kubecheckSource decodes every manifest document strictly into the Kubernetes API's Go
// type for its kind; kinds it does not know (ServiceMonitor, PrometheusRule) are
// reported as "skip". It prints one line per document and exits 1 on any error.
const kubecheckSource = `package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

func main() {
	bad := 0
	for _, path := range os.Args[1:] {
		f, err := os.Open(path)
		if err != nil {
			fmt.Println("error", err)
			bad++
			continue
		}
		r := utilyaml.NewYAMLReader(bufio.NewReader(f))
		for i := 0; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				fmt.Printf("error %s document %d: %v\n", path, i, err)
				bad++
				break
			}
			if len(bytes.TrimSpace(doc)) == 0 {
				continue
			}
			var meta struct {
				APIVersion string ` + "`json:\"apiVersion\"`" + `
				Kind       string ` + "`json:\"kind\"`" + `
				Metadata   struct {
					Name string ` + "`json:\"name\"`" + `
				} ` + "`json:\"metadata\"`" + `
			}
			if err := yaml.Unmarshal(doc, &meta); err != nil {
				fmt.Printf("error %s document %d: %v\n", path, i, err)
				bad++
				continue
			}
			if meta.Kind == "" && meta.APIVersion == "" {
				continue // comments only
			}
			var obj any
			switch meta.APIVersion + " " + meta.Kind {
			case "v1 ConfigMap":
				obj = &corev1.ConfigMap{}
			case "v1 Secret":
				obj = &corev1.Secret{}
			case "v1 Service":
				obj = &corev1.Service{}
			case "v1 ServiceAccount":
				obj = &corev1.ServiceAccount{}
			case "v1 Pod":
				obj = &corev1.Pod{}
			case "apps/v1 Deployment":
				obj = &appsv1.Deployment{}
			case "policy/v1 PodDisruptionBudget":
				obj = &policyv1.PodDisruptionBudget{}
			case "networking.k8s.io/v1 NetworkPolicy":
				obj = &networkingv1.NetworkPolicy{}
			default:
				fmt.Printf("skip %s %s %s\n", meta.APIVersion, meta.Kind, meta.Metadata.Name)
				continue
			}
			if err := yaml.UnmarshalStrict(doc, obj); err != nil {
				fmt.Printf("error %s %s %s: %v\n", path, meta.Kind, meta.Metadata.Name, err)
				bad++
				continue
			}
			fmt.Printf("ok %s %s %s\n", meta.APIVersion, meta.Kind, meta.Metadata.Name)
		}
		f.Close()
	}
	if bad > 0 {
		os.Exit(1)
	}
}
`

var kubecheckBin = sync.OnceValues(func() (string, error) {
	gomod := "module kubecheck\n\ngo 1.24\n\nrequire (\n" +
		"\tk8s.io/api " + k8sAPIVersion + "\n" +
		"\tk8s.io/apimachinery " + k8sAPIVersion + "\n" +
		"\tsigs.k8s.io/yaml " + sigsYAML + "\n)\n"
	sum := sha256.Sum256([]byte(gomod + kubecheckSource))
	return buildCached("kubecheck-"+hex.EncodeToString(sum[:6]), "kubecheck", func(out string) error {
		src := filepath.Join(out, "src")
		if err := os.MkdirAll(src, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(src, "go.mod"), []byte(gomod), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(src, "main.go"), []byte(kubecheckSource), 0o644); err != nil {
			return err
		}
		if _, err := run(src, goEnv("GOFLAGS=-mod=mod"), goBinary(), "mod", "tidy"); err != nil {
			return err
		}
		_, err := run(src, goEnv(), goBinary(), "build", "-p", "1", "-o", filepath.Join(out, "kubecheck"), ".")
		return err
	})
})

// kubecheck validates the manifests in files against the Kubernetes API types and
// returns the kinds it checked ("apps/v1 Deployment name").
func kubecheck(t *testing.T, files ...string) []string {
	t.Helper()
	bin, err := kubecheckBin()
	if err != nil {
		t.Fatalf("building kubecheck (k8s.io/api %s through the Go module proxy): %v", k8sAPIVersion, err)
	}
	out, err := run("", nil, bin, files...)
	if err != nil {
		t.Fatalf("manifests do not decode strictly into the Kubernetes API types:\n%v", err)
	}
	var ok []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if rest, found := strings.CutPrefix(line, "ok "); found {
			ok = append(ok, rest)
		}
	}
	return ok
}

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
	for _, flag := range []string{"CGO_ENABLED=0", "-trimpath", `-s -w`, "-X main.version=$VERSION", "./cmd/bridge"} {
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
		".git":                          true,
		"README.md":                     true,
		"docs/OPERATIONS.md":            false, // *.md is anchored at the root, as in Docker
		"config/load_test.go":           true,
		"config/load.go":                false,
		"bridge":                        true,
		"cmd/bridge":                    false,
		"internal/x/testdata":           true,
		"lua/park.lua":                  false,
		"a/b/c/d_test.go":               true,
		"internal/charttest/chart_test": false,
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

// ---- manifests -----------------------------------------------------------------------

type objectMeta struct {
	Name        string            `yaml:"name"`
	Namespace   string            `yaml:"namespace"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

type labelSelector struct {
	MatchLabels map[string]string `yaml:"matchLabels"`
}

type envVar struct {
	Name      string `yaml:"name"`
	Value     string `yaml:"value"`
	ValueFrom *struct {
		FieldRef *struct {
			FieldPath string `yaml:"fieldPath"`
		} `yaml:"fieldRef"`
		SecretKeyRef *struct {
			Name     string `yaml:"name"`
			Key      string `yaml:"key"`
			Optional *bool  `yaml:"optional"`
		} `yaml:"secretKeyRef"`
		ResourceFieldRef *struct {
			ContainerName string `yaml:"containerName"`
			Resource      string `yaml:"resource"`
		} `yaml:"resourceFieldRef"`
	} `yaml:"valueFrom"`
}

type probe struct {
	HTTPGet *struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

type container struct {
	Name          string   `yaml:"name"`
	Image         string   `yaml:"image"`
	Args          []string `yaml:"args"`
	RestartPolicy string   `yaml:"restartPolicy"`
	Ports         []struct {
		Name          string `yaml:"name"`
		ContainerPort int    `yaml:"containerPort"`
	} `yaml:"ports"`
	Env             []envVar `yaml:"env"`
	LivenessProbe   *probe   `yaml:"livenessProbe"`
	ReadinessProbe  *probe   `yaml:"readinessProbe"`
	StartupProbe    *probe   `yaml:"startupProbe"`
	SecurityContext struct {
		ReadOnlyRootFilesystem   *bool `yaml:"readOnlyRootFilesystem"`
		AllowPrivilegeEscalation *bool `yaml:"allowPrivilegeEscalation"`
	} `yaml:"securityContext"`
	Resources struct {
		Limits map[string]string `yaml:"limits"`
	} `yaml:"resources"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

type podSpec struct {
	TerminationGracePeriodSeconds *int  `yaml:"terminationGracePeriodSeconds"`
	EnableServiceLinks            *bool `yaml:"enableServiceLinks"`
	SecurityContext               struct {
		RunAsNonRoot *bool `yaml:"runAsNonRoot"`
		RunAsUser    *int  `yaml:"runAsUser"`
	} `yaml:"securityContext"`
	InitContainers []container `yaml:"initContainers"`
	Containers     []container `yaml:"containers"`
	Volumes        []struct {
		Name      string `yaml:"name"`
		ConfigMap *struct {
			Name string `yaml:"name"`
		} `yaml:"configMap"`
	} `yaml:"volumes"`
	TopologySpreadConstraints []struct {
		LabelSelector *labelSelector `yaml:"labelSelector"`
	} `yaml:"topologySpreadConstraints"`
}

type object struct {
	APIVersion string            `yaml:"apiVersion"`
	Kind       string            `yaml:"kind"`
	Metadata   objectMeta        `yaml:"metadata"`
	Data       map[string]string `yaml:"data"`
	StringData map[string]string `yaml:"stringData"`
	node       yaml.Node
}

type deployment struct {
	Metadata objectMeta `yaml:"metadata"`
	Spec     struct {
		Replicas *int          `yaml:"replicas"`
		Selector labelSelector `yaml:"selector"`
		Template struct {
			Metadata objectMeta `yaml:"metadata"`
			Spec     podSpec    `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type service struct {
	Spec struct {
		Selector map[string]string `yaml:"selector"`
		Ports    []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort any    `yaml:"targetPort"`
		} `yaml:"ports"`
	} `yaml:"spec"`
}

type manifests []object

func parseManifests(t *testing.T, data []byte) manifests {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var out manifests
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("manifests are not valid YAML: %v\n%s", err, data)
		}
		var o object
		if err := n.Decode(&o); err != nil {
			t.Fatalf("decoding a manifest: %v", err)
		}
		if o.Kind == "" {
			continue
		}
		if o.APIVersion == "" || o.Metadata.Name == "" {
			t.Errorf("a %s without apiVersion or metadata.name", o.Kind)
		}
		o.node = n
		out = append(out, o)
	}
	return out
}

func (ms manifests) find(kind, name string) *object {
	for i := range ms {
		if ms[i].Kind == kind && (name == "" || ms[i].Metadata.Name == name) {
			return &ms[i]
		}
	}
	return nil
}

func (ms manifests) all(kind string) []*object {
	var out []*object
	for i := range ms {
		if ms[i].Kind == kind {
			out = append(out, &ms[i])
		}
	}
	return out
}

func decodeAs[T any](t *testing.T, o *object) T {
	t.Helper()
	var v T
	if err := o.node.Decode(&v); err != nil {
		t.Fatalf("%s %s: %v", o.Kind, o.Metadata.Name, err)
	}
	return v
}

func subset(small, big map[string]string) bool {
	for k, v := range small {
		if big[k] != v {
			return false
		}
	}
	return len(small) > 0
}

// secretValues gives fake contents for Secrets the manifests reference but do not
// contain (an existing Secret), by key.
var secretValues = map[string]string{
	"redis-password":      "redis-pw",
	"kafka-sasl-password": "kafka-pw",
	"admin-token":         "admin-tok",
	"amqp-url":            "amqp://bridge:amqp-pw@rabbitmq.rabbitmq:5672/",
}

// absentSecretKeys are keys the fake existing Secret lacks: their references are
// optional, so Kubernetes leaves the variable unset (a sentinel password would be refused
// without redis.master_name).
var absentSecretKeys = map[string]bool{"redis-sentinel-password": true}

// bridgeEnv is the DELAYBRIDGE_* environment the container would get.
func bridgeEnv(t *testing.T, ms manifests, c container) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			if e.ValueFrom.FieldRef.FieldPath != "metadata.name" {
				t.Errorf("env %s: unexpected fieldRef %s", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
			env[e.Name] = podName
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			if s := ms.find("Secret", ref.Name); s != nil {
				v, ok := s.StringData[ref.Key]
				if b64, has := s.Data[ref.Key]; has {
					raw, err := base64.StdEncoding.DecodeString(b64)
					if err != nil {
						t.Errorf("Secret %s key %s: not base64: %v", ref.Name, ref.Key, err)
					}
					v, ok = string(raw), true
				}
				if !ok {
					t.Errorf("env %s refers to key %q, which Secret %s lacks", e.Name, ref.Key, ref.Name)
				}
				env[e.Name] = v
			} else if v, ok := secretValues[ref.Key]; ok {
				env[e.Name] = v
			} else if absentSecretKeys[ref.Key] && ref.Optional != nil && *ref.Optional {
				continue
			} else {
				t.Errorf("env %s refers to Secret %s key %s, unknown to this test", e.Name, ref.Name, ref.Key)
			}
		case e.ValueFrom.ResourceFieldRef != nil:
			if e.ValueFrom.ResourceFieldRef.ContainerName != "" && e.ValueFrom.ResourceFieldRef.ContainerName != c.Name {
				t.Errorf("env %s: resourceFieldRef names container %q, not %q", e.Name, e.ValueFrom.ResourceFieldRef.ContainerName, c.Name)
			}
			if e.ValueFrom.ResourceFieldRef.Resource == "limits.memory" && c.Resources.Limits["memory"] == "" {
				t.Errorf("env %s: limits.memory of a container without a memory limit", e.Name)
			}
		}
	}
	return env
}

// checkConfig runs `bridge check-config` on a bridge.yaml with env (plus nothing of the
// test's own DELAYBRIDGE_* variables) and returns the effective configuration.
func checkConfig(t *testing.T, bridgeYAML string, env map[string]string) map[string]any {
	t.Helper()
	file := filepath.Join(t.TempDir(), "bridge.yaml")
	if err := os.WriteFile(file, []byte(bridgeYAML), 0o644); err != nil {
		t.Fatal(err)
	}
	procEnv := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, config.EnvPrefix) })
	for k, v := range env {
		procEnv = append(procEnv, k+"="+v)
	}
	out, err := run("", procEnv, bridge(t), "check-config", "-c", file)
	if err != nil {
		t.Fatalf("bridge check-config rejects the bridge.yaml the pod would run with:\n%v\n--- bridge.yaml\n%s", err, bridgeYAML)
	}
	var eff map[string]any
	if err := yaml.Unmarshal([]byte(out), &eff); err != nil {
		t.Fatalf("check-config output: %v", err)
	}
	return eff
}

func lookup(m map[string]any, dotted string) any {
	var cur any = m
	for _, k := range strings.Split(dotted, ".") {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

// checkBridgeDeployment checks a Deployment's bridge container against the contract and
// runs its configuration through check-config. It returns the effective configuration.
func checkBridgeDeployment(t *testing.T, ms manifests, d deployment, containerName string, wantReadiness bool) map[string]any {
	t.Helper()
	ps := d.Spec.Template.Spec
	i := slices.IndexFunc(ps.Containers, func(c container) bool { return c.Name == containerName })
	if i < 0 {
		t.Fatalf("Deployment %s: no container %q", d.Metadata.Name, containerName)
	}
	c := ps.Containers[i]
	name := "Deployment " + d.Metadata.Name + " container " + c.Name

	if !subset(d.Spec.Selector.MatchLabels, d.Spec.Template.Metadata.Labels) {
		t.Errorf("%s: selector %v does not match the pod labels %v", name, d.Spec.Selector.MatchLabels, d.Spec.Template.Metadata.Labels)
	}
	if g := ps.TerminationGracePeriodSeconds; g == nil || *g < 45 {
		t.Errorf("%s: terminationGracePeriodSeconds %v, want >= 45 (the bridge's graceful shutdown)", name, g)
	}
	if ps.EnableServiceLinks == nil || *ps.EnableServiceLinks {
		t.Errorf("%s: want enableServiceLinks: false", name)
	}
	if ps.SecurityContext.RunAsNonRoot == nil || !*ps.SecurityContext.RunAsNonRoot {
		t.Errorf("%s: want runAsNonRoot", name)
	}
	if p := c.SecurityContext.ReadOnlyRootFilesystem; p == nil || !*p {
		t.Errorf("%s: want readOnlyRootFilesystem", name)
	}
	if p := c.SecurityContext.AllowPrivilegeEscalation; p == nil || *p {
		t.Errorf("%s: want allowPrivilegeEscalation: false", name)
	}

	// args: run -c <file in the mounted ConfigMap>.
	if len(c.Args) != 3 || c.Args[0] != "run" || c.Args[1] != "-c" {
		t.Fatalf("%s: args %q, want [run -c FILE]", name, c.Args)
	}
	file := c.Args[2]
	var cm *object
	for _, vm := range c.VolumeMounts {
		if path.Dir(file) != path.Clean(vm.MountPath) {
			continue
		}
		for _, v := range ps.Volumes {
			if v.Name == vm.Name && v.ConfigMap != nil {
				cm = ms.find("ConfigMap", v.ConfigMap.Name)
				if cm == nil {
					t.Fatalf("%s: mounts ConfigMap %s, which is not among the manifests", name, v.ConfigMap.Name)
				}
			}
		}
	}
	if cm == nil {
		t.Fatalf("%s: %s is not in a mounted ConfigMap", name, file)
	}
	bridgeYAML, ok := cm.Data[path.Base(file)]
	if !ok {
		t.Fatalf("ConfigMap %s has no key %s", cm.Metadata.Name, path.Base(file))
	}

	env := bridgeEnv(t, ms, c)
	if env["DELAYBRIDGE_INSTANCE"] != podName {
		t.Errorf("%s: DELAYBRIDGE_INSTANCE must come from metadata.name", name)
	}
	eff := checkConfig(t, bridgeYAML, env)
	if got := lookup(eff, "instance"); got != podName {
		t.Errorf("%s: effective instance %v, want the pod name", name, got)
	}
	listen, _ := lookup(eff, "admin.listen").(string)
	host, port, err := splitHostPort(listen)
	if err != nil || host != "0.0.0.0" {
		t.Errorf("%s: effective admin.listen %q, want 0.0.0.0:PORT (probes and the Service use the pod IP)", name, listen)
	}
	if ctl := env["DELAYBRIDGE_ADMIN__LISTEN"]; ctl != listen {
		t.Errorf("%s: DELAYBRIDGE_ADMIN__LISTEN=%q (read by `bridge ctl` in the container), effective admin.listen %q", name, ctl, listen)
	}
	// Secrets in the environment end up in the configuration (masked by check-config).
	for envName, key := range map[string]string{
		"DELAYBRIDGE_REDIS__PASSWORD":          "redis.password",
		"DELAYBRIDGE_REDIS__SENTINEL_PASSWORD": "redis.sentinel_password",
		"DELAYBRIDGE_KAFKA__SASL__PASSWORD":    "kafka.sasl.password",
		"DELAYBRIDGE_ADMIN__TOKEN":             "admin.token",
	} {
		if v, ok := env[envName]; ok && v != "" && lookup(eff, key) != config.Mask {
			t.Errorf("%s: %s is set but the effective %s is %v", name, envName, key, lookup(eff, key))
		}
	}
	if u, ok := env["DELAYBRIDGE_AMQP__URL"]; ok {
		got, _ := lookup(eff, "amqp.url").(string)
		want := u
		if pu, err := url.Parse(u); err == nil && pu.User != nil {
			if pw, has := pu.User.Password(); has {
				want = strings.Replace(u, ":"+pw+"@", ":"+config.Mask+"@", 1)
			}
		}
		if got != want {
			t.Errorf("%s: DELAYBRIDGE_AMQP__URL=%q, effective amqp.url %q, want %q", name, u, got, want)
		}
	}

	// The admin port: declared, probed.
	portNames := map[string]int{}
	for _, p := range c.Ports {
		portNames[p.Name] = p.ContainerPort
	}
	adminPort := -1
	for _, p := range portNames {
		if strconv.Itoa(p) == port {
			adminPort = p
		}
	}
	if adminPort < 0 {
		t.Errorf("%s: no containerPort for admin.listen %q (ports %v)", name, listen, portNames)
	}
	checkProbe := func(kind string, p *probe, wantPath string) {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: want an httpGet %s probe on %s", name, kind, wantPath)
			return
		}
		if p.HTTPGet.Path != wantPath {
			t.Errorf("%s: %s probe path %q, want %q", name, kind, p.HTTPGet.Path, wantPath)
		}
		var got int
		switch v := p.HTTPGet.Port.(type) {
		case int:
			got = v
		case string:
			got = portNames[v]
		}
		if got != adminPort {
			t.Errorf("%s: %s probe port %v is not the admin port %d", name, kind, p.HTTPGet.Port, adminPort)
		}
	}
	checkProbe("liveness", c.LivenessProbe, "/healthz")
	if wantReadiness {
		checkProbe("readiness", c.ReadinessProbe, "/readyz")
	} else if c.ReadinessProbe != nil && c.ReadinessProbe.HTTPGet != nil && c.ReadinessProbe.HTTPGet.Path == "/readyz" {
		t.Errorf("%s: a sidecar must not gate its pod's readiness on /readyz (Redis down would take the application out of its Service)", name)
	}
	return eff
}

func splitHostPort(s string) (string, string, error) {
	i := strings.LastIndex(s, ":")
	if i < 0 {
		return "", "", fmt.Errorf("no port in %q", s)
	}
	return s[:i], s[i+1:], nil
}

// ---- values.yaml against the configuration --------------------------------------------

// flatten turns nested maps into dotted keys; lists and scalars are leaves.
func flatten(prefix string, v any, out map[string]any) {
	if m, ok := v.(map[string]any); ok && len(m) > 0 {
		for k, x := range m {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			flatten(key, x, out)
		}
		return
	}
	out[prefix] = v
}

// chartSetKeys are configuration keys the chart sets itself (values.yaml must not list
// them under config).
var chartSetKeys = map[string]string{
	"instance":                "the pod name (DELAYBRIDGE_INSTANCE)",
	"admin.listen":            "0.0.0.0:<admin.port>",
	"admin.token":             "secrets.adminToken",
	"redis.password":          "secrets.redisPassword",
	"redis.sentinel_password": "secrets.redisSentinelPassword",
	"kafka.sasl.password":     "secrets.kafkaSaslPassword",
}

func TestValuesListEveryConfigKeyWithItsDefault(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var values struct {
		Config map[string]any `yaml:"config"`
	}
	if err := yaml.Unmarshal(raw, &values); err != nil {
		t.Fatalf("values.yaml: %v", err)
	}
	def, err := config.MarshalYAML(config.Default())
	if err != nil {
		t.Fatal(err)
	}
	var defaults map[string]any
	if err := yaml.Unmarshal(def, &defaults); err != nil {
		t.Fatal(err)
	}
	want, got := map[string]any{}, map[string]any{}
	flatten("", defaults, want)
	flatten("", values.Config, got)
	for k := range chartSetKeys {
		delete(want, k)
		if _, ok := got[k]; ok {
			t.Errorf("values.yaml: config.%s is set by the chart (%s); remove it", k, chartSetKeys[k])
		}
	}
	for k, v := range want {
		g, ok := got[k]
		switch {
		case !ok:
			t.Errorf("values.yaml: config.%s is missing (bridge default %v): list every configuration key", k, v)
		case fmt.Sprint(g) != fmt.Sprint(v):
			t.Errorf("values.yaml: config.%s = %v, the bridge's default is %v", k, g, v)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("values.yaml: config.%s is not a configuration key of the bridge", k)
		}
	}
}

func TestValuesSchemaKnowsEveryConfigSection(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Properties map[string]struct {
			Properties map[string]any `json:"properties"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatalf("values.schema.json: %v", err)
	}
	def, err := config.MarshalYAML(config.Default())
	if err != nil {
		t.Fatal(err)
	}
	var defaults map[string]any
	if err := yaml.Unmarshal(def, &defaults); err != nil {
		t.Fatal(err)
	}
	got := slices.Sorted(mapKeys(schema.Properties["config"].Properties))
	want := slices.Sorted(mapKeys(defaults))
	if !slices.Equal(got, want) {
		t.Errorf("values.schema.json: config allows %v, the bridge's top-level keys are %v", got, want)
	}
	var values map[string]any
	rawValues, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(rawValues, &values); err != nil {
		t.Fatal(err)
	}
	for k := range values {
		if _, ok := schema.Properties[k]; !ok {
			t.Errorf("values.yaml: %s is not in values.schema.json (helm would refuse the chart's own defaults)", k)
		}
	}
}

// ---- the chart -----------------------------------------------------------------------

func helmTemplate(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	full := append([]string{"template", release, chartDir, "--namespace", namespace, "--kube-version", kubeVersion}, args...)
	out, err := run("", nil, helm(t), full...)
	return []byte(out), err
}

func render(t *testing.T, args ...string) manifests {
	t.Helper()
	out, err := helmTemplate(t, args...)
	if err != nil {
		t.Fatalf("helm template: %v", err)
	}
	file := filepath.Join(t.TempDir(), "rendered.yaml")
	if err := os.WriteFile(file, out, 0o644); err != nil {
		t.Fatal(err)
	}
	checked := kubecheck(t, file)
	if len(checked) == 0 {
		t.Fatalf("kubecheck checked nothing in:\n%s", out)
	}
	return parseManifests(t, out)
}

const oneRoute = `config.routes=[{"name":"orders","from":{"kafka":{"topic":"orders.delay"}},"to":{"kafka":{"topic":"orders"}}}]`

var fullname = release + "-delay-bridge"

func TestChartLint(t *testing.T) {
	for _, args := range [][]string{
		{"-f", filepath.Join(chartDir, "ci", "kafka-values.yaml")},
		{"-f", filepath.Join(chartDir, "ci", "amqp-values.yaml")},
		{"--set-json", oneRoute},
	} {
		full := append([]string{"lint", "--strict", chartDir, "--kube-version", kubeVersion}, args...)
		if out, err := run("", nil, helm(t), full...); err != nil {
			t.Errorf("helm lint %v:\n%v", args, err)
		} else if !strings.Contains(out, "0 chart(s) failed") {
			t.Errorf("helm lint %v:\n%s", args, out)
		}
	}
}

func TestChartKafkaCreatedSecretAndMonitoring(t *testing.T) {
	ms := render(t, "-f", filepath.Join(chartDir, "ci", "kafka-values.yaml"))
	for _, kind := range []string{"ConfigMap", "Secret", "Deployment", "Service", "ServiceAccount", "PodDisruptionBudget", "ServiceMonitor", "PrometheusRule"} {
		if ms.find(kind, fullname) == nil {
			t.Errorf("no %s %s rendered", kind, fullname)
		}
	}
	for _, o := range ms {
		if o.Metadata.Namespace != namespace {
			t.Errorf("%s %s: namespace %q, want the release namespace", o.Kind, o.Metadata.Name, o.Metadata.Namespace)
		}
		for _, l := range []string{"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart"} {
			if o.Metadata.Labels[l] == "" {
				t.Errorf("%s %s: no label %s", o.Kind, o.Metadata.Name, l)
			}
		}
	}
	d := decodeAs[deployment](t, ms.find("Deployment", fullname))
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2 by default", d.Spec.Replicas)
	}
	eff := checkBridgeDeployment(t, ms, d, "bridge", true)
	if got := lookup(eff, "redis.master_name"); got != "mymaster" {
		t.Errorf("effective redis.master_name %v", got)
	}
	if got := lookup(eff, "admin.listen"); got != "0.0.0.0:8089" {
		t.Errorf("effective admin.listen %v, want 0.0.0.0:8089", got)
	}
	for _, k := range []string{"redis.password", "kafka.sasl.password", "admin.token"} {
		if got := lookup(eff, k); got != config.Mask {
			t.Errorf("effective %s = %v, want it set from the chart's Secret", k, got)
		}
	}
	// No secret in the ConfigMap.
	cm := ms.find("ConfigMap", fullname)
	for _, secret := range []string{"redis-secret", "kafka-secret", "admin-secret"} {
		if strings.Contains(cm.Data["bridge.yaml"], secret) {
			t.Errorf("the ConfigMap contains the secret %q", secret)
		}
	}
	c := d.Spec.Template.Spec.Containers[0]
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Name != fullname {
			t.Errorf("env %s refers to Secret %s, want the chart's %s", e.Name, e.ValueFrom.SecretKeyRef.Name, fullname)
		}
	}
	if d.Spec.Template.Metadata.Annotations["checksum/secret"] == "" {
		t.Error("no checksum/secret annotation with a chart-created Secret")
	}

	// Service, PDB, ServiceMonitor, test pod: who selects whom.
	svc := decodeAs[service](t, ms.find("Service", fullname))
	podLabels := d.Spec.Template.Metadata.Labels
	if !subset(svc.Spec.Selector, podLabels) {
		t.Errorf("Service selector %v does not select the pods %v", svc.Spec.Selector, podLabels)
	}
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort != "admin" || svc.Spec.Ports[0].Name != "admin" {
		t.Errorf("Service ports %+v, want one port named admin targeting admin", svc.Spec.Ports)
	}
	pdb := decodeAs[struct {
		Spec struct {
			MaxUnavailable any           `yaml:"maxUnavailable"`
			Selector       labelSelector `yaml:"selector"`
		} `yaml:"spec"`
	}](t, ms.find("PodDisruptionBudget", fullname))
	if fmt.Sprint(pdb.Spec.MaxUnavailable) != "1" || !subset(pdb.Spec.Selector.MatchLabels, podLabels) {
		t.Errorf("PodDisruptionBudget %+v, want maxUnavailable 1 selecting the pods", pdb.Spec)
	}
	for _, tsc := range d.Spec.Template.Spec.TopologySpreadConstraints {
		if tsc.LabelSelector == nil || !subset(tsc.LabelSelector.MatchLabels, podLabels) {
			t.Errorf("topology spread constraint without a selector of the pods: %+v", tsc.LabelSelector)
		}
	}
	sm := decodeAs[struct {
		Metadata objectMeta `yaml:"metadata"`
		Spec     struct {
			Selector  labelSelector `yaml:"selector"`
			Endpoints []struct {
				Port string `yaml:"port"`
				Path string `yaml:"path"`
			} `yaml:"endpoints"`
		} `yaml:"spec"`
	}](t, ms.find("ServiceMonitor", fullname))
	if !subset(sm.Spec.Selector.MatchLabels, ms.find("Service", fullname).Metadata.Labels) {
		t.Errorf("ServiceMonitor selector %v does not select the Service", sm.Spec.Selector.MatchLabels)
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != "admin" || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %+v, want port admin path /metrics", sm.Spec.Endpoints)
	}
	if sm.Metadata.Labels["release"] != "prometheus" {
		t.Errorf("ServiceMonitor: serviceMonitor.labels not applied: %v", sm.Metadata.Labels)
	}
	testPods := slices.DeleteFunc(ms.all("Pod"), func(o *object) bool { return o.Metadata.Annotations["helm.sh/hook"] != "test" })
	if len(testPods) != 1 {
		t.Fatalf("want one helm test pod, got %d", len(testPods))
	}
	if subset(svc.Spec.Selector, testPods[0].Metadata.Labels) || subset(pdb.Spec.Selector.MatchLabels, testPods[0].Metadata.Labels) {
		t.Errorf("the helm test pod's labels %v are selected by the Service or the PodDisruptionBudget", testPods[0].Metadata.Labels)
	}
	tp := decodeAs[struct {
		Spec podSpec `yaml:"spec"`
	}](t, testPods[0])
	if args := tp.Spec.Containers[0].Args; len(args) == 0 || args[0] != "ctl" || args[len(args)-1] != "ready" {
		t.Errorf("helm test pod args %q, want ctl ... ready", args)
	}

	checkPrometheusRule(t, ms.find("PrometheusRule", fullname), 64, fullname)
}

// metricNames are the metric names the bridge registers (from admin.NewMetrics).
func metricNames(t *testing.T) map[string]bool {
	t.Helper()
	rec := &recordingRegisterer{Registerer: prometheus.NewRegistry()}
	if _, err := admin.NewMetrics(rec, "test", nil); err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	re := regexp.MustCompile(`fqName: "([^"]+)"`)
	for _, c := range rec.collectors {
		ch := make(chan *prometheus.Desc, 64)
		go func() { c.Describe(ch); close(ch) }()
		for d := range ch {
			if m := re.FindStringSubmatch(d.String()); m != nil {
				names[m[1]] = true
			}
		}
	}
	if !names["delaybridge_fire_lateness_seconds"] || !names["delaybridge_shards_owned"] {
		t.Fatalf("reading metric names failed: %v", names)
	}
	return names
}

type recordingRegisterer struct {
	prometheus.Registerer
	collectors []prometheus.Collector
}

func (r *recordingRegisterer) Register(c prometheus.Collector) error {
	r.collectors = append(r.collectors, c)
	return r.Registerer.Register(c)
}

func (r *recordingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

var metricRef = regexp.MustCompile(`\bdelaybridge_[a-z_]+[a-z]`)

// unknownMetrics returns the delaybridge_* names in text that the bridge does not
// export (histogram series suffixes allowed).
func unknownMetrics(names map[string]bool, text string) []string {
	var bad []string
	for _, m := range metricRef.FindAllString(text, -1) {
		base := m
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(m, suf); ok && names[b] {
				base = b
			}
		}
		if !names[base] && !slices.Contains(bad, m) {
			bad = append(bad, m)
		}
	}
	return bad
}

func checkPrometheusRule(t *testing.T, o *object, shards int, job string) {
	t.Helper()
	pr := decodeAs[struct {
		Spec struct {
			Groups []struct {
				Rules []struct {
					Alert       string            `yaml:"alert"`
					Expr        string            `yaml:"expr"`
					Labels      map[string]string `yaml:"labels"`
					Annotations map[string]string `yaml:"annotations"`
				} `yaml:"rules"`
			} `yaml:"groups"`
		} `yaml:"spec"`
	}](t, o)
	names := metricNames(t)
	// Prometheus' own rule-file parser and PromQL parser on the groups, and the metric
	// names from the parsed expressions.
	var groups struct {
		Spec struct {
			Groups any `yaml:"groups"`
		} `yaml:"spec"`
	}
	if err := o.node.Decode(&groups); err != nil {
		t.Fatal(err)
	}
	rulesYAML, err := yaml.Marshal(map[string]any{"groups": groups.Spec.Groups})
	if err != nil {
		t.Fatal(err)
	}
	rulesFile := filepath.Join(t.TempDir(), "rules.yml")
	if err := os.WriteFile(rulesFile, rulesYAML, 0o644); err != nil {
		t.Fatal(err)
	}
	checkParsedMetrics(t, names, promRules(t, rulesFile))
	alerts := map[string]string{}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = r.Expr
			if bad := unknownMetrics(names, r.Expr); len(bad) > 0 {
				t.Errorf("alert %s uses metrics the bridge does not export: %v", r.Alert, bad)
			}
			if r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("alert %s: want a severity label and a summary", r.Alert)
			}
			if !strings.Contains(r.Expr, `job="`+job+`"`) && !strings.Contains(r.Expr, `pod=~"`+job+`-.*"`) {
				t.Errorf("alert %s does not select this release's job: %s", r.Alert, r.Expr)
			}
			if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") {
				t.Errorf("alert %s: unbalanced parentheses: %s", r.Alert, r.Expr)
			}
		}
	}
	for alert, wants := range map[string][]string{
		"DelayBridgeFireLatenessHigh": {"histogram_quantile(0.99", "delaybridge_fire_lateness_seconds_bucket"},
		"DelayBridgeDeadLetters":      {"delaybridge_messages_dead_lettered_total"},
		"DelayBridgeInvalidMessages":  {"delaybridge_messages_invalid_total"},
		"DelayBridgeShardsUnowned":    {"sum(delaybridge_shards_owned", "< " + strconv.Itoa(shards)},
		"DelayBridgePendingCapacity":  {"delaybridge_messages_pending"},
		// Issue 8's alerts.
		"DelayBridgeDeliveryLate":        {"histogram_quantile(0.99", "delaybridge_delivery_lateness_seconds_bucket"},
		"DelayBridgeIngressNotConsuming": {"delaybridge_ingress_consuming", "== 0"},
		"DelayBridgeIngressLagGrowing":   {"delaybridge_ingress_lag_messages", "deriv("},
		"DelayBridgePublishFailures":     {"delaybridge_publish_failures_total"},
		"DelayBridgeMessagesDropped":     {"delaybridge_messages_dropped_total", "> 0"},
		"DelayBridgeNotReady":            {"kube_pod_container_status_ready", `container="bridge"`},
	} {
		expr, ok := alerts[alert]
		if !ok {
			t.Errorf("no alert %s", alert)
			continue
		}
		for _, w := range wants {
			if !strings.Contains(expr, w) {
				t.Errorf("alert %s: expression lacks %q: %s", alert, w, expr)
			}
		}
	}
}

func TestChartAMQPExistingSecret(t *testing.T) {
	ms := render(t, "-f", filepath.Join(chartDir, "ci", "amqp-values.yaml"))
	if s := ms.find("Secret", ""); s != nil {
		t.Errorf("a Secret %s was rendered although secrets.existingSecret is set", s.Metadata.Name)
	}
	for _, kind := range []string{"ServiceMonitor", "PrometheusRule"} {
		if ms.find(kind, "") != nil {
			t.Errorf("%s rendered although disabled", kind)
		}
	}
	d := decodeAs[deployment](t, ms.find("Deployment", fullname))
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", d.Spec.Replicas)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if !strings.HasSuffix(c.Image, "@sha256:0000000000000000000000000000000000000000000000000000000000000000") {
		t.Errorf("image %q: image.digest not applied", c.Image)
	}
	refs := map[string]bool{}
	for _, e := range c.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			ref := e.ValueFrom.SecretKeyRef
			if ref.Name != "delay-bridge-credentials" || ref.Optional == nil || !*ref.Optional {
				t.Errorf("env %s: secretKeyRef %+v, want optional key of delay-bridge-credentials", e.Name, ref)
			}
			refs[e.Name] = true
		}
	}
	for _, want := range []string{"DELAYBRIDGE_REDIS__PASSWORD", "DELAYBRIDGE_REDIS__SENTINEL_PASSWORD", "DELAYBRIDGE_KAFKA__SASL__PASSWORD", "DELAYBRIDGE_ADMIN__TOKEN", "DELAYBRIDGE_AMQP__URL"} {
		if !refs[want] {
			t.Errorf("no env %s from the existing Secret", want)
		}
	}
	eff := checkBridgeDeployment(t, ms, d, "bridge", true)
	for k, want := range map[string]any{
		"cluster":       "payments",
		"shards":        128,
		"log.format":    "text",
		"amqp.url":      "amqp://bridge:" + config.Mask + "@rabbitmq.rabbitmq:5672/",
		"amqp.prefetch": 1000,
	} {
		if got := lookup(eff, k); fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("effective %s = %v, want %v", k, got, want)
		}
	}
	routes, _ := lookup(eff, "routes").([]any)
	if len(routes) != 2 {
		t.Errorf("effective routes %v, want billing and reminders", routes)
	}
	if len(d.Spec.Template.Spec.TopologySpreadConstraints) != 0 {
		t.Errorf("topologySpreadConstraints: [] still renders constraints")
	}
}

func TestChartDefaultsWithOneRoute(t *testing.T) {
	ms := render(t, "--set-json", oneRoute)
	if ms.find("Secret", "") != nil {
		t.Error("a Secret was rendered without any secret value")
	}
	d := decodeAs[deployment](t, ms.find("Deployment", fullname))
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			t.Errorf("env %s refers to a Secret although none is configured", e.Name)
		}
	}
	if d.Spec.Template.Metadata.Annotations["checksum/config"] == "" {
		t.Error("no checksum/config annotation")
	}
	eff := checkBridgeDeployment(t, ms, d, "bridge", true)
	// Everything but the chart-set keys and the route is the bridge's default.
	def, err := config.MarshalYAML(config.Redacted(config.Default()))
	if err != nil {
		t.Fatal(err)
	}
	var defaults map[string]any
	if err := yaml.Unmarshal(def, &defaults); err != nil {
		t.Fatal(err)
	}
	want, got := map[string]any{}, map[string]any{}
	flatten("", defaults, want)
	flatten("", eff, got)
	for k, v := range want {
		if _, chartSet := chartSetKeys[k]; chartSet || k == "routes" {
			continue
		}
		if fmt.Sprint(got[k]) != fmt.Sprint(v) {
			t.Errorf("effective %s = %v with default values, the bridge's default is %v", k, got[k], v)
		}
	}
}

func TestChartChecksumRollsPodsOnConfigChangeOnly(t *testing.T) {
	checksum := func(args ...string) string {
		out, err := helmTemplate(t, append([]string{"--set-json", oneRoute, "--show-only", "templates/deployment.yaml"}, args...)...)
		if err != nil {
			t.Fatal(err)
		}
		ms := parseManifests(t, out)
		d := decodeAs[deployment](t, ms.find("Deployment", fullname))
		return d.Spec.Template.Metadata.Annotations["checksum/config"]
	}
	base := checksum()
	if base == "" {
		t.Fatal("no checksum/config annotation")
	}
	if got := checksum("--set", "replicaCount=5"); got != base {
		t.Errorf("checksum/config changed with replicaCount: %s -> %s", base, got)
	}
	if got := checksum("--set", "config.scheduler.tick=2ms"); got == base {
		t.Error("checksum/config did not change with config.scheduler.tick")
	}
	if got := checksum("--set", "admin.port=9000"); got == base {
		t.Error("checksum/config did not change with admin.port (admin.listen is in bridge.yaml)")
	}
}

func TestChartRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "config.routes: at least one route is required"},
		{[]string{"--set-json", oneRoute, "--set", "config.redis.password=x"}, "secrets.redisPassword"},
		{[]string{"--set-json", oneRoute, "--set", "config.redis.sentinel_password=x"}, "secrets.redisSentinelPassword"},
		{[]string{"--set-json", oneRoute, "--set", "config.kafka.sasl.password=x"}, "secrets.kafkaSaslPassword"},
		{[]string{"--set-json", oneRoute, "--set", "config.admin.token=x"}, "secrets.adminToken"},
		{[]string{"--set-json", oneRoute, "--set", "config.instance=x"}, "config.instance"},
		// values.schema.json: misspelled keys fail instead of being ignored.
		{[]string{"--set-json", oneRoute, "--set", "replicas=3"}, "'replicas' not allowed"},
		{[]string{"--set-json", oneRoute, "--set", "config.sharts=3"}, "'sharts' not allowed"},
		{[]string{"--set-json", `config.routes=[{"name":"x"}]`}, "missing properties"},
		// The config part of values.schema.json, generated from the Go config struct.
		{[]string{"--set-json", oneRoute, "--set", "config.redis.adr=x"}, "'adr' not allowed"},
		{[]string{"--set-json", oneRoute, "--set", "config.scheduler.tick=fast"}, "scheduler/tick"},
		{[]string{"--set-json", oneRoute, "--set", "config.scheduler.tick=5"}, "scheduler/tick"},
		{[]string{"--set-json", oneRoute, "--set", "config.delivery=sometimes"}, "delivery"},
		{[]string{"--set-json", oneRoute, "--set", "config.log.format=xml"}, "log/format"},
		{[]string{"--set-json", oneRoute, "--set", "config.shards=0"}, "shards"},
		{[]string{"--set-json", oneRoute, "--set", "config.kafka.sasl.mechanism=GSSAPI"}, "mechanism"},
		{[]string{"--set-json", `config.routes=[{"name":"x","from":{"kafka":{"topic":"a"},"amqp":{"queue":"q"}},"to":{"kafka":{"topic":"b"}}}]`}, "routes/0/from"},
		{[]string{"--set-json", `config.routes=[{"name":"x","from":{"kafka":{"topc":"a"}},"to":{"kafka":{"topic":"b"}}}]`}, "'topc' not allowed"},
		{[]string{"--set-json", oneRoute, "--set", "resources.limits.memory=1Gb"}, "not a memory quantity"},
	} {
		_, err := helmTemplate(t, tc.args...)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("helm template %v: want an error mentioning %q, got %v", tc.args, tc.want, err)
		}
	}
}

func TestChartAdminPortAndNotes(t *testing.T) {
	ms := render(t, "--set-json", oneRoute, "--set", "admin.port=9100", "--set", "service.port=9100")
	d := decodeAs[deployment](t, ms.find("Deployment", fullname))
	eff := checkBridgeDeployment(t, ms, d, "bridge", true)
	if got := lookup(eff, "admin.listen"); got != "0.0.0.0:9100" {
		t.Errorf("admin.listen %v with admin.port=9100", got)
	}
	// NOTES.txt renders and points at commands that exist. `helm template` leaves the
	// notes out and `helm install --dry-run` wants a cluster, so a copy of the chart
	// renders them into a ConfigMap.
	notes := renderNotes(t, "--set-json", oneRoute)
	for _, want := range []string{"/bridge ctl stats", "port-forward svc/" + fullname, "no admin token is set", "127.0.0.1:6379"} {
		if !strings.Contains(notes, want) {
			t.Errorf("NOTES lack %q:\n%s", want, notes)
		}
	}
	quiet := renderNotes(t, "-f", filepath.Join(chartDir, "ci", "kafka-values.yaml"))
	for _, unwanted := range []string{"no admin token is set", "127.0.0.1:6379", "serviceMonitor.enabled=true"} {
		if strings.Contains(quiet, unwanted) {
			t.Errorf("NOTES with ci/kafka-values.yaml say %q:\n%s", unwanted, quiet)
		}
	}
	if checkCtlCommands(t, "NOTES.txt", notes) == 0 {
		t.Error("NOTES.txt shows no `bridge ctl` command")
	}
}

// renderNotes renders NOTES.txt with args through a copy of the chart in which the notes
// are the data of a ConfigMap.
func renderNotes(t *testing.T, args ...string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "delay-bridge")
	if err := os.CopyFS(dir, os.DirFS(chartDir)); err != nil {
		t.Fatal(err)
	}
	notes := filepath.Join(dir, "templates", "NOTES.txt")
	text, err := os.ReadFile(notes)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(notes); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"_charttest_notes.tpl": `{{- define "charttest.notes" -}}` + string(text) + `{{- end -}}`,
		"charttest-notes.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: charttest-notes\ndata:\n  notes: {{ include \"charttest.notes\" . | quote }}\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, "templates", name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	full := append([]string{"template", release, dir, "--namespace", namespace, "--kube-version", kubeVersion,
		"--show-only", "templates/charttest-notes.yaml"}, args...)
	out, err := run("", nil, helm(t), full...)
	if err != nil {
		t.Fatalf("rendering NOTES.txt: %v", err)
	}
	cm := parseManifests(t, []byte(out)).find("ConfigMap", "charttest-notes")
	if cm == nil || cm.Data["notes"] == "" {
		t.Fatalf("NOTES.txt rendered nothing:\n%s", out)
	}
	return cm.Data["notes"]
}

// ---- examples/k8s --------------------------------------------------------------------

func TestExamplesK8s(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(root, "examples", "k8s", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 2 {
		t.Fatalf("want examples/k8s/deployment.yaml and sidecar.yaml, found %v", files)
	}
	checked := kubecheck(t, files...)
	t.Logf("kubecheck: %d objects decode strictly", len(checked))
	seen := map[string]bool{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ms := parseManifests(t, raw)
		base := filepath.Base(f)
		seen[base] = true
		checkCtlCommands(t, base, string(raw))
		for _, o := range ms.all("Deployment") {
			d := decodeAs[deployment](t, o)
			for _, c := range d.Spec.Template.Spec.Containers {
				if len(c.Args) == 0 || c.Args[0] != "run" {
					continue // not a bridge
				}
				// A sidecar shares its pod's readiness with the application.
				sidecar := len(d.Spec.Template.Spec.Containers) > 1
				t.Run(base+"/"+d.Metadata.Name+"/"+c.Name, func(t *testing.T) {
					checkBridgeDeployment(t, ms, d, c.Name, !sidecar)
				})
				seen[base+":bridge"] = true
			}
		}
	}
	for _, want := range []string{"deployment.yaml:bridge", "sidecar.yaml:bridge"} {
		if !seen[want] {
			t.Errorf("no bridge container found in %s", strings.TrimSuffix(want, ":bridge"))
		}
	}
}

// ---- docs ----------------------------------------------------------------------------

var ctlRef = regexp.MustCompile(`bridge ctl (?:--?[a-z-]+(?:[ =]\S+)? )*([a-z][a-z-]*)`)

func checkCtlCommands(t *testing.T, where, text string) (found int) {
	t.Helper()
	out, err := run("", nil, bridge(t), "ctl", "--help")
	if err != nil {
		t.Fatal(err)
	}
	_, cmds, ok := strings.Cut(out, "Commands:")
	if !ok {
		t.Fatalf("bridge ctl --help has no Commands section:\n%s", out)
	}
	known := map[string]bool{}
	name := regexp.MustCompile(`^  ([a-z][a-z-]*)\b`)
	for _, l := range strings.Split(strings.TrimLeft(cmds, "\n"), "\n") {
		if l != "" && !strings.HasPrefix(l, " ") {
			break // the end of the Commands section
		}
		if m := name.FindStringSubmatch(l); m != nil {
			known[m[1]] = true
		}
	}
	if !known["stats"] || !known["requeue"] {
		t.Fatalf("could not read the ctl commands from:\n%s", out)
	}
	for _, m := range ctlRef.FindAllStringSubmatch(text, -1) {
		found++
		if !known[m[1]] {
			t.Errorf("%s: %q names a ctl command that does not exist (have %v)", where, m[0], slices.Sorted(mapKeys(known)))
		}
	}
	return found
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func TestOperationsDoc(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(root, "docs", "OPERATIONS.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(raw)
	if bad := unknownMetrics(metricNames(t), doc); len(bad) > 0 {
		t.Errorf("docs/OPERATIONS.md names metrics the bridge does not export: %v", bad)
	}
	if n := checkCtlCommands(t, "docs/OPERATIONS.md", doc); n < 10 {
		t.Errorf("docs/OPERATIONS.md: found only %d `bridge ctl COMMAND` examples", n)
	}
	for _, want := range []string{
		"delaybridge_fire_lateness_seconds", "delaybridge_messages_dead_lettered_total",
		"delaybridge_messages_invalid_total", "delaybridge_messages_pending", "delaybridge_shards_owned",
		"appendfsync everysec", "min_replicas", "master_name", "/healthz", "/readyz", "/metrics",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/OPERATIONS.md does not mention %s", want)
		}
	}
}
