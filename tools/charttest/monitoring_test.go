package charttest

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite examples/prometheus/alerts.yml from the chart's PrometheusRule")

// GOMEMLIMIT is goMemLimitPercent of the memory limit, in bytes, and absent without one.
func TestChartGoMemLimit(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // "" = no GOMEMLIMIT
	}{
		{nil, strconv.Itoa(1 << 30 * 9 / 10)}, // default: 90 % of 1Gi
		{[]string{"--set", "resources.limits.memory=512M"}, "460800000"},
		{[]string{"--set", "resources.limits.memory=1.5Gi", "--set", "goMemLimitPercent=80"}, "1288490188"}, // floor(1.5 Gi * 0.8),
		{[]string{"--set", "goMemLimitPercent=0"}, ""},
		{[]string{"--set", "resources.limits=null"}, ""},
	} {
		out, err := helmTemplate(t, append([]string{"--set-json", oneRoute, "--show-only", "templates/deployment.yaml"}, tc.args...)...)
		if err != nil {
			t.Fatal(err)
		}
		d := decodeAs[deployment](t, parseManifests(t, out).find("Deployment", fullname))
		got := ""
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "GOMEMLIMIT" {
				got = e.Value
			}
		}
		if got != tc.want {
			t.Errorf("helm template %v: GOMEMLIMIT=%q, want %q", tc.args, got, tc.want)
		}
	}
}

type networkPolicy struct {
	Spec struct {
		PodSelector labelSelector `yaml:"podSelector"`
		PolicyTypes []string      `yaml:"policyTypes"`
		Ingress     []struct {
			Ports []struct {
				Port any `yaml:"port"`
			} `yaml:"ports"`
			From []map[string]any `yaml:"from"`
		} `yaml:"ingress"`
		Egress []struct {
			Ports []struct {
				Port any `yaml:"port"`
			} `yaml:"ports"`
		} `yaml:"egress"`
	} `yaml:"spec"`
}

func TestChartNetworkPolicy(t *testing.T) {
	if ms := render(t, "--set-json", oneRoute); ms.find("NetworkPolicy", "") != nil {
		t.Error("a NetworkPolicy is rendered by default (documented as off)")
	}
	ms := render(t, "-f", filepath.Join(chartDir, "ci", "kafka-values.yaml")) // kubecheck decodes it strictly
	o := ms.find("NetworkPolicy", fullname)
	if o == nil {
		t.Fatal("no NetworkPolicy with networkPolicy.enabled")
	}
	np := decodeAs[networkPolicy](t, o)
	d := decodeAs[deployment](t, ms.find("Deployment", fullname))
	if !subset(np.Spec.PodSelector.MatchLabels, d.Spec.Template.Metadata.Labels) {
		t.Errorf("NetworkPolicy selects %v, not the bridge pods", np.Spec.PodSelector.MatchLabels)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []string{"Ingress", "Egress"}) {
		t.Errorf("policyTypes %v with egress rules set", np.Spec.PolicyTypes)
	}
	if len(np.Spec.Ingress) != 1 || len(np.Spec.Ingress[0].Ports) != 1 || np.Spec.Ingress[0].Ports[0].Port != 8089 {
		t.Errorf("ingress %+v, want the admin port 8089 only", np.Spec.Ingress)
	} else if len(np.Spec.Ingress[0].From) != 1 || np.Spec.Ingress[0].From[0]["namespaceSelector"] == nil {
		t.Errorf("ingress from %v, want networkPolicy.ingressFrom", np.Spec.Ingress[0].From)
	}
	var egressPorts []any
	for _, e := range np.Spec.Egress {
		for _, p := range e.Ports {
			egressPorts = append(egressPorts, p.Port)
		}
	}
	for _, want := range []any{53, 6379, 26379, 9092} {
		if !slices.Contains(egressPorts, want) {
			t.Errorf("egress ports %v lack %v", egressPorts, want)
		}
	}
	// Only ingress restricted when no egress rules are given.
	ms = render(t, "--set-json", oneRoute, "--set", "networkPolicy.enabled=true")
	np = decodeAs[networkPolicy](t, ms.find("NetworkPolicy", fullname))
	if !slices.Equal(np.Spec.PolicyTypes, []string{"Ingress"}) || len(np.Spec.Ingress[0].From) != 1 {
		t.Errorf("policyTypes %v from %v: want Ingress only, from the release namespace's pods", np.Spec.PolicyTypes, np.Spec.Ingress[0].From)
	}
}

// plainRulesArgs render the PrometheusRule for a Prometheus without the operator: the
// job name of examples/prometheus/prometheus.yml and the compose file's one bridge.
var plainRulesArgs = []string{"--set-json", oneRoute, "--set", "prometheusRule.enabled=true", "--set", "fullnameOverride=delay-bridge",
	"--set", `prometheusRule.selector=job="delay-bridge"`, "--set", "replicaCount=1", "--show-only", "templates/prometheusrule.yaml"}

const plainRulesHeader = `# delay-bridge alert rules for a Prometheus without the Prometheus Operator (rule_files),
# selecting job="delay-bridge" (examples/prometheus/prometheus.yml). Rendered from the
# chart's PrometheusRule (charts/delay-bridge/templates/prometheusrule.yaml) with one
# instance and 64 shards; adjust DelayBridgeShardsUnowned and DelayBridgeInstancesDown to
# yours.
# Regenerate: go test ./tools/charttest -run TestPlainAlertRules -update
`

// examples/prometheus/alerts.yml is the chart's PrometheusRule, as a plain rules file.
func TestPlainAlertRules(t *testing.T) {
	out, err := helmTemplate(t, plainRulesArgs...)
	if err != nil {
		t.Fatal(err)
	}
	ms := parseManifests(t, out)
	pr := ms.find("PrometheusRule", "delay-bridge")
	if pr == nil {
		t.Fatalf("no PrometheusRule rendered:\n%s", out)
	}
	var rule struct {
		Spec struct {
			Groups any `yaml:"groups"`
		} `yaml:"spec"`
	}
	if err := pr.node.Decode(&rule); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(map[string]any{"groups": rule.Spec.Groups}); err != nil {
		t.Fatal(err)
	}
	want := plainRulesHeader + buf.String()
	file := filepath.Join(root, "examples", "prometheus", "alerts.yml")
	if *update {
		if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != want {
		t.Errorf("examples/prometheus/alerts.yml differs from the chart's PrometheusRule: run go test ./tools/charttest -run TestPlainAlertRules -update")
	}
	checkParsedMetrics(t, metricNames(t), promRules(t, file)) // the file itself, as Prometheus loads it
	checkPrometheusRule(t, pr, 64, "delay-bridge")
}

// The dashboard's panels query metrics the bridge exports, and the chart ships it.
func TestDashboard(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "dashboards", "delay-bridge.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboards/delay-bridge.json: %v", err)
	}
	names := metricNames(t)
	used := map[string]bool{}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if bad := unknownMetrics(names, tg.Expr); len(bad) > 0 {
				t.Errorf("panel %q queries metrics the bridge does not export: %v", p.Title, bad)
			}
			if strings.Count(tg.Expr, "(") != strings.Count(tg.Expr, ")") {
				t.Errorf("panel %q: unbalanced parentheses: %s", p.Title, tg.Expr)
			}
			for _, m := range metricRef.FindAllString(tg.Expr, -1) {
				used[strings.TrimSuffix(m, "_bucket")] = true
			}
		}
	}
	// Grafana's interval variable is not PromQL; the others sit in label matchers.
	var exprs []string
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, strings.ReplaceAll(tg.Expr, "$__rate_interval", "5m"))
		}
	}
	checkParsedMetrics(t, names, promExprs(t, exprs))
	for _, want := range []string{"delaybridge_delivery_lateness_seconds", "delaybridge_fire_lateness_seconds",
		"delaybridge_ingress_consuming", "delaybridge_ingress_lag_messages", "delaybridge_publish_failures_total",
		"delaybridge_messages_dropped_total", "delaybridge_messages_dead_lettered_total", "delaybridge_shards_owned",
		"delaybridge_messages_pending"} {
		if !used[want] {
			t.Errorf("no dashboard panel shows %s", want)
		}
	}
	// The chart's ConfigMap carries the same file.
	ms := render(t, "-f", filepath.Join(chartDir, "ci", "kafka-values.yaml"))
	cm := ms.find("ConfigMap", fullname+"-dashboard")
	if cm == nil {
		t.Fatal("no dashboard ConfigMap with grafanaDashboard.enabled")
	}
	if strings.TrimSpace(cm.Data["delay-bridge.json"]) != strings.TrimSpace(string(raw)) {
		t.Error("the dashboard ConfigMap's delay-bridge.json differs from dashboards/delay-bridge.json")
	}
	if cm.Metadata.Labels["grafana_dashboard"] != "1" {
		t.Errorf("dashboard ConfigMap labels %v lack grafana_dashboard", cm.Metadata.Labels)
	}
}
