package charttest

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"go.yaml.in/yaml/v3"

	"github.com/delaybridge/delay-bridge/app/metrics"
	"github.com/delaybridge/delay-bridge/config"
)

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

// metricNames are the metric names the bridge registers (from metrics.NewMetrics).
func metricNames(t *testing.T) map[string]bool {
	t.Helper()
	rec := &recordingRegisterer{Registerer: prometheus.NewRegistry()}
	if _, err := metrics.NewMetrics(rec, "test", nil); err != nil {
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
		// Lateness, ingress and egress alerts.
		"DelayBridgeDeliveryLate":        {"histogram_quantile(0.99", "delaybridge_delivery_lateness_seconds_bucket"},
		"DelayBridgeIngressNotConsuming": {"delaybridge_ingress_consuming", "== 0"},
		"DelayBridgeIngressLagGrowing":   {"delaybridge_ingress_lag_messages", "deriv("},
		"DelayBridgePublishFailures":     {"delaybridge_publish_failures_total"},
		"DelayBridgeMessagesDropped":     {"delaybridge_messages_dropped_total", "> 0"},
		"DelayBridgeNotReady":            {"delaybridge_ready_check", "== 0"},
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
		{[]string{"--set-json", oneRoute, "--set", "config.kafka.session_timeout=10s"}, "'session_timeout' not allowed"},
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
