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
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"
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
	if err := goleak.Find(); code == 0 && err != nil {
		fmt.Fprintln(os.Stderr, "goroutines outlived the tests:", err)
		code = 1
	}
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
