package charttest

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

type composeService struct {
	Image       string            `yaml:"image"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Ports       []string          `yaml:"ports"`
	Volumes     []string          `yaml:"volumes"`
	Healthcheck *struct {
		Test []string `yaml:"test"`
	} `yaml:"healthcheck"`
	DependsOn map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

// examples/docker-compose.yml cannot be run here (no Docker engine, no compose plugin),
// so its parts are checked against each other and against the repository: the bridge's
// healthcheck is a command of the image, Prometheus scrapes the bridge's admin port and
// loads the alert rules, Grafana is provisioned with the dashboard, and every mounted
// file exists.
func TestComposeFile(t *testing.T) {
	dir := filepath.Join(root, "examples")
	raw, err := os.ReadFile(filepath.Join(dir, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]composeService `yaml:"services"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(false)
	if err := dec.Decode(&compose); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	svc := compose.Services
	for _, name := range []string{"redis", "kafka", "rabbitmq", "bridge", "prometheus", "grafana"} {
		if _, ok := svc[name]; !ok {
			t.Errorf("no service %s", name)
		}
	}
	for name, s := range svc {
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(filepath.Join(dir, src)); err != nil {
					t.Errorf("service %s mounts %s, which does not exist: %v", name, src, err)
				}
			}
		}
	}

	// The bridge's healthcheck: the image's entrypoint asking /readyz on the admin port.
	bridgeSvc := svc["bridge"]
	listen := bridgeSvc.Environment["DELAYBRIDGE_ADMIN__LISTEN"]
	_, port, err := splitHostPort(listen)
	if err != nil {
		t.Fatalf("bridge: DELAYBRIDGE_ADMIN__LISTEN=%q: %v", listen, err)
	}
	hc := bridgeSvc.Healthcheck
	if hc == nil || len(hc.Test) < 3 || hc.Test[0] != "CMD" {
		t.Fatalf("bridge: want a healthcheck in exec form [CMD ...], got %+v", hc)
	}
	if ep := parseDockerfile(t).entrypoint; len(ep) == 0 || hc.Test[1] != ep[0] {
		t.Errorf("bridge healthcheck runs %q, the image's entrypoint is %q (the image has no shell)", hc.Test[1], ep)
	}
	args := hc.Test[2:]
	i := slices.Index(args, "--addr")
	if i < 0 || i+1 >= len(args) || args[i+1] != "http://127.0.0.1:"+port || args[len(args)-1] != "ready" {
		t.Errorf("bridge healthcheck %q: want ctl --addr http://127.0.0.1:%s ... ready", args, port)
	}
	if checkCtlCommands(t, "docker-compose.yml healthcheck", "bridge "+strings.Join(args, " ")) != 1 {
		t.Errorf("bridge healthcheck %q is not a `bridge ctl` command", args)
	}
	// Its flags parse: against a closed port it says "not ready" (exit 1), not "usage" (2).
	closed := slices.Clone(args)
	if i >= 0 && i+1 < len(closed) {
		closed[i+1] = "http://127.0.0.1:1"
	}
	err = exec.Command(bridge(t), closed...).Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Errorf("bridge %s against a closed port: %v, want exit status 1", strings.Join(closed, " "), err)
	}

	// Prometheus scrapes the bridge and loads the rules.
	var prom struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, filepath.Join(dir, "prometheus", "prometheus.yml"), &prom)
	if len(prom.ScrapeConfigs) != 1 || prom.ScrapeConfigs[0].JobName != "delay-bridge" || prom.ScrapeConfigs[0].MetricsPath != "/metrics" ||
		len(prom.ScrapeConfigs[0].StaticConfigs) != 1 || !slices.Equal(prom.ScrapeConfigs[0].StaticConfigs[0].Targets, []string{"bridge:" + port}) {
		t.Errorf("prometheus.yml scrape configs %+v: want job delay-bridge, /metrics of bridge:%s", prom.ScrapeConfigs, port)
	}
	mounts := map[string]string{} // container path -> host path
	for _, v := range svc["prometheus"].Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 {
			mounts[parts[1]] = parts[0]
		}
	}
	for _, rf := range prom.RuleFiles {
		if filepath.Clean(mounts[rf]) != filepath.Clean("./prometheus/alerts.yml") {
			t.Errorf("prometheus.yml loads %s, which is not examples/prometheus/alerts.yml (mounts %v)", rf, mounts)
		}
	}
	if len(prom.RuleFiles) != 1 {
		t.Errorf("prometheus.yml rule_files %v, want the alert rules", prom.RuleFiles)
	}

	// Grafana: the data source is the compose Prometheus, the dashboards provider reads the
	// directory the chart's dashboard is mounted in.
	gmounts := map[string]string{}
	for _, v := range svc["grafana"].Volumes {
		parts := strings.Split(v, ":")
		if len(parts) >= 2 {
			gmounts[parts[1]] = parts[0]
		}
	}
	var ds struct {
		Datasources []struct {
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	readYAML(t, filepath.Join(dir, "grafana", "datasources.yml"), &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" ||
		!slices.Contains(svc["prometheus"].Ports, "9090:9090") {
		t.Errorf("grafana data sources %+v: want prometheus at http://prometheus:9090", ds.Datasources)
	}
	var prov struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, filepath.Join(dir, "grafana", "dashboards.yml"), &prov)
	if len(prov.Providers) != 1 {
		t.Fatalf("grafana dashboards.yml: want one provider, got %+v", prov.Providers)
	}
	host, ok := gmounts[prov.Providers[0].Options.Path]
	if !ok {
		t.Fatalf("grafana's dashboard provider reads %s, which is not mounted (%v)", prov.Providers[0].Options.Path, gmounts)
	}
	if _, err := os.Stat(filepath.Join(dir, host, "delay-bridge.json")); err != nil {
		t.Errorf("grafana's dashboard directory %s lacks delay-bridge.json: %v", host, err)
	}
	for _, p := range []string{"/etc/grafana/provisioning/datasources/", "/etc/grafana/provisioning/dashboards/"} {
		if !slices.ContainsFunc(slices.Collect(mapKeys(gmounts)), func(m string) bool { return strings.HasPrefix(m, p) }) {
			t.Errorf("grafana: nothing mounted under %s", p)
		}
	}
}

func readYAML(t *testing.T, file string, v any) {
	t.Helper()
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}
