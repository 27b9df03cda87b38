package charttest

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/delaybridge/delay-bridge/config"
)

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
