package charttest

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/delaybridge/delay-bridge/config"
)

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
