package charttest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var (
	sidecarChart = filepath.Join(root, "charts", "delay-bridge-sidecar")
	sidecarApp   = filepath.Join(root, "examples", "sidecar-app")
)

// sidecarAppCopy copies the example application chart and the library chart it depends
// on (file://../../charts/delay-bridge-sidecar) into a temporary tree with the same
// layout and runs `helm dependency build` there, so the repository stays untouched.
func sidecarAppCopy(t *testing.T) string {
	t.Helper()
	tmp := t.TempDir()
	app := filepath.Join(tmp, "examples", "sidecar-app")
	for src, dst := range map[string]string{sidecarApp: app, sidecarChart: filepath.Join(tmp, "charts", "delay-bridge-sidecar")} {
		if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
			t.Fatal(err)
		}
	}
	if out, err := run(app, nil, helm(t), "dependency", "build", "."); err != nil {
		t.Fatalf("helm dependency build of examples/sidecar-app: %v\n%s", err, out)
	}
	return app
}

func TestSidecarLibraryLint(t *testing.T) {
	if out, err := run("", nil, helm(t), "lint", "--strict", sidecarChart); err != nil {
		t.Errorf("helm lint --strict charts/delay-bridge-sidecar:\n%v", err)
	} else if !strings.Contains(out, "0 chart(s) failed") {
		t.Errorf("helm lint:\n%s", out)
	}
	app := sidecarAppCopy(t)
	for _, args := range [][]string{nil, {"--set", "delayBridge.native=false"}} {
		full := append([]string{"lint", "--strict", app, "--kube-version", kubeVersion}, args...)
		if out, err := run("", nil, helm(t), full...); err != nil {
			t.Errorf("helm lint --strict examples/sidecar-app %v:\n%v", args, err)
		} else if !strings.Contains(out, "0 chart(s) failed") {
			t.Errorf("helm lint %v:\n%s", args, out)
		}
	}
}

// renderApp renders the example application chart and checks every object decodes
// strictly into the Kubernetes API types.
func renderApp(t *testing.T, app string, args ...string) manifests {
	t.Helper()
	full := append([]string{"template", release, app, "--namespace", namespace, "--kube-version", kubeVersion}, args...)
	out, err := run("", nil, helm(t), full...)
	if err != nil {
		t.Fatalf("helm template examples/sidecar-app %v: %v", args, err)
	}
	file := filepath.Join(t.TempDir(), "rendered.yaml")
	if err := os.WriteFile(file, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
	if checked := kubecheck(t, file); len(checked) < 2 {
		t.Fatalf("kubecheck checked %v in:\n%s", checked, out)
	}
	return parseManifests(t, []byte(out))
}

// Both forms of the sidecar: the pod spec has the bridge where the form puts it, and the
// bridge container passes the same checks as the chart's (configuration through
// `bridge check-config` with the pod's environment, probes, security context, secrets).
func TestSidecarForms(t *testing.T) {
	app := sidecarAppCopy(t)
	for _, tc := range []struct {
		name   string
		args   []string
		native bool
	}{
		{"native", nil, true},
		{"plain", []string{"--set", "delayBridge.native=false"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms := renderApp(t, app, tc.args...)
			o := ms.find("Deployment", release)
			if o == nil {
				t.Fatal("no Deployment")
			}
			d := decodeAs[deployment](t, o)
			ps := &d.Spec.Template.Spec
			isBridge := func(c container) bool { return c.Name == "delay-bridge" }
			inInit, inMain := slices.IndexFunc(ps.InitContainers, isBridge), slices.IndexFunc(ps.Containers, isBridge)
			var c container
			switch {
			case tc.native && (inInit < 0 || inMain >= 0):
				t.Fatalf("native form: bridge in initContainers %d, containers %d; want initContainers only", inInit, inMain)
			case !tc.native && (inMain < 0 || inInit >= 0):
				t.Fatalf("plain form: bridge in initContainers %d, containers %d; want containers only", inInit, inMain)
			case tc.native:
				c = ps.InitContainers[inInit]
				if c.RestartPolicy != "Always" {
					t.Errorf("native sidecar restartPolicy %q, want Always", c.RestartPolicy)
				}
				if c.StartupProbe == nil || c.StartupProbe.HTTPGet == nil || c.StartupProbe.HTTPGet.Path != "/healthz" {
					t.Errorf("native sidecar: want a startup probe on /healthz (the app starts after it), got %+v", c.StartupProbe)
				}
			default:
				c = ps.Containers[inMain]
				if c.RestartPolicy != "" {
					t.Errorf("plain container with restartPolicy %q (only init containers may set it)", c.RestartPolicy)
				}
			}
			if !slices.ContainsFunc(ps.Containers, func(c container) bool { return c.Name == "app" }) {
				t.Error("the application container is gone")
			}
			if d.Spec.Template.Metadata.Annotations["checksum/delay-bridge-config"] == "" {
				t.Error("no checksum/delay-bridge-config pod annotation")
			}
			gomem := ""
			for _, e := range c.Env {
				if e.Name == "GOMEMLIMIT" {
					gomem = e.Value
				}
			}
			if gomem != "483183820" { // 90 % of the default 512Mi
				t.Errorf("GOMEMLIMIT %q, want 90%% of 512Mi = 483183820", gomem)
			}
			// The shared checks look at containers: give them the bridge there.
			check := d
			check.Spec.Template.Spec.Containers = []container{c}
			eff := checkBridgeDeployment(t, ms, check, "delay-bridge", false)
			for k, want := range map[string]string{"cluster": "orders", "kafka.group_id": "orders-delay-bridge", "admin.listen": "0.0.0.0:8089"} {
				if got, _ := lookup(eff, k).(string); got != want {
					t.Errorf("effective %s = %q, want %q", k, got, want)
				}
			}
		})
	}
}

func TestSidecarRefusals(t *testing.T) {
	app := sidecarAppCopy(t)
	// The native form on a cluster that cannot run it is refused; the plain form renders.
	old := []string{"template", release, app, "--kube-version", "1.28.0"}
	if _, err := run("", nil, helm(t), old...); err == nil || !strings.Contains(err.Error(), "need Kubernetes 1.29+") {
		t.Errorf("native sidecar on Kubernetes 1.28: want a refusal, got %v", err)
	}
	if _, err := run("", nil, helm(t), append(old, "--set", "delayBridge.native=false")...); err != nil {
		t.Errorf("plain sidecar on Kubernetes 1.28: %v", err)
	}
	for _, set := range []string{"delayBridge.config.redis.password=x", "delayBridge.config.admin.token=x", "delayBridge.config.routes=null"} {
		full := []string{"template", release, app, "--kube-version", kubeVersion, "--set", set}
		if _, err := run("", nil, helm(t), full...); err == nil || !strings.Contains(err.Error(), "delay-bridge sidecar") {
			t.Errorf("helm template --set %s: want the sidecar template to refuse it, got %v", set, err)
		}
	}
}
