package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/delaybridge/delay-bridge/config"
)

var chartDir = filepath.Join("..", "..", "charts", "delay-bridge")

// The chart's generated files are what the generator writes now: a change to the config
// struct or values.yaml without `go run ./tools/chartgen` fails here.
func TestGeneratedFilesCurrent(t *testing.T) {
	schema, readme, err := Generate(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string][]byte{"values.schema.json": schema, "README.md": readme} {
		got, err := os.ReadFile(filepath.Join(chartDir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("charts/delay-bridge/%s is out of date: run `go run ./tools/chartgen` and commit the result", name)
		}
	}
}

// Every configuration key (as the bridge prints its configuration) is in the schema,
// and the schema has no key the bridge lacks.
func TestConfigSchemaKeys(t *testing.T) {
	s, err := ConfigSchema()
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var schema map[string]any
	if err := json.Unmarshal(raw, &schema); err != nil {
		t.Fatal(err)
	}
	inSchema := map[string]bool{}
	schemaKeys("", schema, inSchema)
	def, err := config.MarshalYAML(config.Default())
	if err != nil {
		t.Fatal(err)
	}
	var defaults map[string]any
	if err := yaml.Unmarshal(def, &defaults); err != nil {
		t.Fatal(err)
	}
	inConfig := map[string]bool{}
	yamlKeys("", defaults, inConfig)
	for k := range inConfig {
		if !inSchema[k] {
			t.Errorf("configuration key %s is not in the schema", k)
		}
	}
	for _, k := range []string{"routes[].from.kafka.topic", "routes[].to.amqp.routing_key", "scheduler.tick", "redis.tls.ca_file"} {
		if !inSchema[k] {
			t.Errorf("schema lacks %s (keys: %d)", k, len(inSchema))
		}
	}
	for k := range inSchema {
		if !strings.Contains(k, "[]") && !inConfig[k] && !isSectionKey(k, inConfig) {
			t.Errorf("schema key %s is not a configuration key", k)
		}
	}
}

func isSectionKey(k string, keys map[string]bool) bool {
	for c := range keys {
		if strings.HasPrefix(c, k+".") {
			return true
		}
	}
	return false
}

func schemaKeys(prefix string, s map[string]any, out map[string]bool) {
	if props, ok := s["properties"].(map[string]any); ok {
		for k, v := range props {
			key := k
			if prefix != "" {
				key = prefix + "." + k
			}
			out[key] = true
			schemaKeys(key, v.(map[string]any), out)
		}
	}
	if items, ok := s["items"].(map[string]any); ok {
		schemaKeys(prefix+"[]", items, out)
	}
}

func yamlKeys(prefix string, m map[string]any, out map[string]bool) {
	for k, v := range m {
		key := k
		if prefix != "" {
			key = prefix + "." + k
		}
		out[key] = true
		if sub, ok := v.(map[string]any); ok {
			yamlKeys(key, sub, out)
		}
	}
}

// The duration pattern accepts exactly what time.ParseDuration does.
func TestDurationPattern(t *testing.T) {
	re := regexp.MustCompile(DurationPattern)
	for _, s := range []string{"1ms", "30s", "8760h", "1h30m", "0", "1.5s", ".5s", "10us", "10µs", "-1s", "+2m",
		"fast", "1", "1 s", "s", "1d", "", "1ms ", "ms1", "1.s", "0s"} {
		_, err := time.ParseDuration(s)
		if re.MatchString(s) != (err == nil) {
			t.Errorf("%q: pattern match %v, time.ParseDuration error %v", s, re.MatchString(s), err)
		}
	}
}

// loadSet loads a configuration from --set style overrides on top of a valid one.
func loadSet(route string, set ...string) error {
	base := []string{"routes.0.name=r"}
	switch route {
	case "amqp":
		base = append(base, "routes.0.from.amqp.queue=q", "routes.0.to.amqp.exchange=x")
	default:
		base = append(base, "routes.0.from.kafka.topic=a", "routes.0.to.kafka.topic=b", "kafka.sasl.username=u")
	}
	_, err := config.Load(config.LoadOptions{Env: []string{}, Set: append(base, set...)})
	return err
}

func setKey(path string) string { return strings.ReplaceAll(path, "routes[]", "routes.0") }

// The enums and bounds the schema adds to the Go types are the ones config.Validate
// enforces: every allowed value loads, a value outside is refused naming the key.
func TestConstraintsMatchValidate(t *testing.T) {
	for path, c := range constraints {
		route := "kafka"
		if strings.Contains(path, "amqp") {
			route = "amqp"
		}
		key := setKey(path)
		for _, v := range c.enum {
			vals := []string{v}
			if c.caseless {
				vals = append(vals, strings.ToUpper(v))
			}
			for _, v := range vals {
				if err := loadSet(route, key+"="+v); err != nil {
					t.Errorf("schema allows %s=%q, the bridge refuses it: %v", path, v, err)
				}
			}
		}
		if len(c.enum) > 0 {
			if err := loadSet(route, key+"=not-a-value"); err == nil || !strings.Contains(err.Error(), strings.ReplaceAll(path, "routes[]", "routes[0]")) {
				t.Errorf("%s=not-a-value: the bridge does not refuse it (%v), but the schema does", path, err)
			}
		}
		for _, b := range []struct {
			limit *float64
			out   float64
		}{{c.minimum, -1}, {c.maximum, +1}} {
			if b.limit == nil {
				continue
			}
			// 'f', not %g: a bound such as 1048576 is an integer to the bridge, not 1.048576e+06.
			in, out := strconv.FormatFloat(*b.limit, 'f', -1, 64), strconv.FormatFloat(*b.limit+b.out, 'f', -1, 64)
			if err := loadSet(route, key+"="+in); err != nil {
				t.Errorf("schema allows %s=%s, the bridge refuses it: %v", path, in, err)
			}
			if err := loadSet(route, key+"="+out); err == nil {
				t.Errorf("%s=%s: the bridge accepts it, the schema refuses it", path, out)
			}
		}
	}
}
