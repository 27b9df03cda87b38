package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"time"

	"github.com/delaybridge/delay-bridge/config"
)

// DurationPattern matches what time.ParseDuration accepts ("1ms", "1h30m", "0", "-1s").
const DurationPattern = `^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`

// constraint adds to the schema of one configuration key what its Go type cannot say.
// Paths are dotted koanf keys; "routes[]" is an element of routes. Every value here is
// checked against config.Validate by chartgen_test.go, and a path that is not a key makes
// the generator fail.
type constraint struct {
	enum        []string // allowed strings
	caseless    bool     // enum compared case-insensitively (as the bridge does)
	pattern     string
	minimum     *float64
	maximum     *float64
	required    []string
	oneKey      bool // exactly one property (an endpoint: kafka or amqp)
	description string
}

func num(f float64) *float64 { return &f }

var constraints = map[string]constraint{
	"instance": {description: "Set by the chart to the pod name; the template refuses a value."},
	"admin":    {description: "Set by the chart: admin.listen from admin.port, admin.token from secrets."},
	"shards":   {minimum: num(1), maximum: num(16384)},
	"delivery": {enum: []string{config.DeliveryAtLeastOnce, config.DeliveryAtMostOnce}},

	"redis.min_replicas":               {minimum: num(0)},
	"kafka.sasl.mechanism":             {enum: []string{"", "PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}},
	"amqp.url":                         {pattern: `^(amqps?://.*)?$`},
	"amqp.prefetch":                    {minimum: num(1), maximum: num(65535)},
	"scheduler.claim_batch":            {minimum: num(1), maximum: num(100000)},
	"ingress.kafka_fetch_min_bytes":    {minimum: num(1), maximum: num(config.MaxKafkaFetchMinBytes)},
	"limits.max_payload_bytes":         {minimum: num(1)},
	"retry.max_attempts":               {minimum: num(1)},
	"receipts_backlog.max_messages":    {minimum: num(1)},
	"receipts_backlog.max_bytes":       {minimum: num(1)},
	"routes[]":                         {required: []string{"name", "from", "to"}},
	"routes[].name":                    {pattern: `.`},
	"routes[].from":                    {oneKey: true},
	"routes[].to":                      {oneKey: true},
	"routes[].max_rate":                {minimum: num(0)},
	"routes[].on_invalid":              {enum: []string{"", config.OnInvalidDeadLetter, config.OnInvalidDeliver}},
	"routes[].from.amqp.exchange_type": {enum: []string{"", "direct", "topic", "fanout", "headers"}},
	"schedules[]":                      {required: []string{"id", "route", "spec"}},
	"log.level":                        {enum: []string{"debug", "info", "warn", "error"}, caseless: true},
	"log.format":                       {enum: []string{"json", "text"}},
}

var durationType = reflect.TypeFor[time.Duration]()

// ConfigSchema is the JSON schema of config.Config: every key by its koanf name, Go types
// as JSON types, durations as strings matching DurationPattern (or the number 0, which
// the bridge also takes), lists of strings also as one comma-separated string (as the
// bridge reads them), and no unknown keys anywhere.
func ConfigSchema() (*Obj, error) {
	used := map[string]bool{}
	s, err := schemaOf(reflect.TypeFor[config.Config](), "", used)
	if err != nil {
		return nil, err
	}
	for path := range constraints {
		if !used[path] {
			return nil, fmt.Errorf("chartgen: constraint for %q, which is not a configuration key", path)
		}
	}
	return s, nil
}

func schemaOf(t reflect.Type, path string, used map[string]bool) (*Obj, error) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	s := &Obj{}
	switch {
	case t == durationType:
		s.Set("type", []string{"string", "integer"})
		s.Set("pattern", DurationPattern)
		s.Set("minimum", 0)
		s.Set("maximum", 0)
	case t.Kind() == reflect.Struct:
		s.Set("type", "object")
		s.Set("additionalProperties", false)
		props := &Obj{}
		for i := range t.NumField() {
			f := t.Field(i)
			name, _, _ := strings.Cut(f.Tag.Get("koanf"), ",")
			if name == "" || name == "-" || !f.IsExported() {
				continue
			}
			key := name
			if path != "" {
				key = path + "." + name
			}
			fs, err := schemaOf(f.Type, key, used)
			if err != nil {
				return nil, err
			}
			props.Set(name, fs)
		}
		s.Set("properties", props)
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		s.Set("type", []string{"array", "string"})
		s.Set("items", (&Obj{}).Set("type", "string"))
	case t.Kind() == reflect.Slice:
		s.Set("type", "array")
		items, err := schemaOf(t.Elem(), path+"[]", used)
		if err != nil {
			return nil, err
		}
		s.Set("items", items)
	case t.Kind() == reflect.Map && t.Key().Kind() == reflect.String && t.Elem().Kind() == reflect.String:
		s.Set("type", "object")
		s.Set("additionalProperties", (&Obj{}).Set("type", "string"))
	case t.Kind() == reflect.String:
		s.Set("type", "string")
	case t.Kind() == reflect.Bool:
		s.Set("type", "boolean")
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Int64:
		s.Set("type", "integer")
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		s.Set("type", "number")
	default:
		return nil, fmt.Errorf("chartgen: %s: no JSON schema for Go type %s", path, t)
	}
	c, ok := constraints[path]
	if !ok {
		return s, nil
	}
	used[path] = true
	c.apply(s)
	return s, nil
}

// apply writes the constraints of one key into its schema.
func (c constraint) apply(s *Obj) {
	if c.description != "" {
		s.Set("description", c.description)
	}
	if len(c.enum) > 0 && !c.caseless {
		s.Set("enum", c.enum)
	}
	if len(c.enum) > 0 && c.caseless {
		s.Set("pattern", caselessPattern(c.enum))
	}
	if c.pattern != "" {
		s.Set("pattern", c.pattern)
	}
	if c.minimum != nil {
		s.Set("minimum", *c.minimum)
	}
	if c.maximum != nil {
		s.Set("maximum", *c.maximum)
	}
	if len(c.required) > 0 {
		s.Set("required", c.required)
	}
	if c.oneKey {
		s.Set("minProperties", 1)
		s.Set("maxProperties", 1)
	}
}

// caselessPattern matches any of words in any letter case (JSON schema regular
// expressions have no case-insensitive flag).
func caselessPattern(words []string) string {
	alts := make([]string, len(words))
	for i, w := range words {
		var b strings.Builder
		for _, r := range w {
			lo, up := strings.ToLower(string(r)), strings.ToUpper(string(r))
			if lo == up {
				b.WriteString(lo)
			} else {
				b.WriteString("[" + lo + up + "]")
			}
		}
		alts[i] = b.String()
	}
	return "^(" + strings.Join(alts, "|") + ")$"
}

// ---- ordered JSON ------------------------------------------------------------------

// Obj is a JSON object that keeps its keys in insertion order.
type Obj struct {
	keys []string
	vals map[string]any
}

// Set adds or replaces key (a replaced key keeps its place) and returns o.
func (o *Obj) Set(key string, v any) *Obj {
	if o.vals == nil {
		o.vals = map[string]any{}
	}
	if _, ok := o.vals[key]; !ok {
		o.keys = append(o.keys, key)
	}
	o.vals[key] = v
	return o
}

// Get returns the value of key.
func (o *Obj) Get(key string) (any, bool) {
	v, ok := o.vals[key]
	return v, ok
}

func (o *Obj) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, k := range o.keys {
		if i > 0 {
			b.WriteByte(',')
		}
		kb, err := marshal(k)
		if err != nil {
			return nil, err
		}
		vb, err := marshal(o.vals[k])
		if err != nil {
			return nil, err
		}
		b.Write(kb)
		b.WriteByte(':')
		b.Write(vb)
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}

// decodeOrdered parses JSON keeping object key order (objects become *Obj).
func decodeOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("trailing data after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		o := &Obj{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			v, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			o.Set(kt.(string), v)
		}
		_, err := dec.Token() // }
		return o, err
	case json.Delim('['):
		list := []any{}
		for dec.More() {
			v, err := decodeValue(dec)
			if err != nil {
				return nil, err
			}
			list = append(list, v)
		}
		_, err := dec.Token() // ]
		return list, err
	}
	return tok, nil
}

// ValuesSchema returns the chart's values.schema.json (current content) with its
// properties.config replaced by ConfigSchema.
func ValuesSchema(current []byte) ([]byte, error) {
	v, err := decodeOrdered(current)
	if err != nil {
		return nil, fmt.Errorf("chartgen: values.schema.json: %w", err)
	}
	root, ok := v.(*Obj)
	if !ok {
		return nil, fmt.Errorf("chartgen: values.schema.json is not an object")
	}
	pv, _ := root.Get("properties")
	props, ok := pv.(*Obj)
	if !ok {
		return nil, fmt.Errorf("chartgen: values.schema.json has no properties")
	}
	cs, err := ConfigSchema()
	if err != nil {
		return nil, err
	}
	cs.Set("description", "The bridge configuration (bridge.yaml). Generated from the Go config struct by `go run ./tools/chartgen`; do not edit by hand.")
	props.Set("config", cs)
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(root); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
