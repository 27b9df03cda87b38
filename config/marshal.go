package config

import (
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// MarshalYAML renders c as YAML in the order of the Config struct, with durations in
// their shortest Go form ("8760h", "5m", "1ms"). The output loads back to the same
// Config. Call it on Redacted(c) before showing it to anyone.
func MarshalYAML(c Config) ([]byte, error) {
	node := yamlNode(reflect.ValueOf(c))
	var buf strings.Builder
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(node); err != nil {
		return nil, fmt.Errorf("config: marshal yaml: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: marshal yaml: %w", err)
	}
	return []byte(buf.String()), nil
}

// yamlNode builds the node by hand: yaml.v3 would need yaml tags beside the koanf ones,
// and would write durations as nanoseconds.
func yamlNode(v reflect.Value) *yaml.Node {
	scalar := func(tag, value string) *yaml.Node {
		return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value}
	}
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return scalar("!!null", "null")
		}
		v = v.Elem()
	}
	switch {
	case v.Type() == durationType:
		return scalar("!!str", FormatDuration(time.Duration(v.Int())))
	case v.Kind() == reflect.Struct:
		n := &yaml.Node{Kind: yaml.MappingNode}
		t := v.Type()
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			name := tagName(f)
			if !f.IsExported() || name == "" || name == "-" {
				continue
			}
			fv := v.Field(i)
			if fv.Kind() == reflect.Pointer && fv.IsNil() {
				continue
			}
			n.Content = append(n.Content, scalar("!!str", name), yamlNode(fv))
		}
		return n
	case v.Kind() == reflect.Slice:
		n := &yaml.Node{Kind: yaml.SequenceNode}
		if v.Len() == 0 || !isSection(v.Type().Elem()) {
			n.Style = yaml.FlowStyle
		}
		for i := 0; i < v.Len(); i++ {
			n.Content = append(n.Content, yamlNode(v.Index(i)))
		}
		return n
	case v.Kind() == reflect.Map: // string -> string (schedules' headers), keys sorted
		n := &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle}
		keys := v.MapKeys()
		slices.SortFunc(keys, func(a, b reflect.Value) int { return strings.Compare(a.String(), b.String()) })
		for _, k := range keys {
			n.Content = append(n.Content, scalar("!!str", k.String()), yamlNode(v.MapIndex(k)))
		}
		return n
	case v.CanInt():
		return scalar("", strconv.FormatInt(v.Int(), 10))
	case v.CanFloat():
		return scalar("", strconv.FormatFloat(v.Float(), 'g', -1, 64))
	case v.Kind() == reflect.Bool:
		return scalar("", strconv.FormatBool(v.Bool()))
	case v.Kind() == reflect.String:
		return scalar("!!str", v.String())
	}
	return scalar("!!null", "null")
}

// FormatDuration is time.Duration.String without trailing zero units: "8760h" rather
// than "8760h0m0s", "5m" rather than "5m0s".
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

func cloneRoutes(rs []Route) []Route {
	if rs == nil {
		return nil
	}
	out := make([]Route, len(rs))
	for i, r := range rs {
		r.AllowTargets = slices.Clone(r.AllowTargets)
		r.From = cloneEndpoint(r.From)
		r.To = cloneEndpoint(r.To)
		out[i] = r
	}
	return out
}

func cloneSchedules(ss []Schedule) []Schedule {
	if ss == nil {
		return nil
	}
	out := slices.Clone(ss)
	for i := range out {
		out[i].Headers = maps.Clone(out[i].Headers)
	}
	return out
}

func cloneEndpoint(e Endpoint) Endpoint {
	if e.Kafka != nil {
		k := *e.Kafka
		e.Kafka = &k
	}
	if e.AMQP != nil {
		a := *e.AMQP
		e.AMQP = &a
	}
	return e
}
