package config

import (
	"cmp"
	"errors"
	"fmt"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
	kyaml "github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	"go.yaml.in/yaml/v3"
)

// EnvPrefix starts every environment variable the loader reads. Levels are separated by
// "__" and keys are matched case-insensitively: DELAYBRIDGE_SCHEDULER__CLAIM_BATCH=500
// sets scheduler.claim_batch, DELAYBRIDGE_ROUTES__0__TO__KAFKA__TOPIC=x sets
// routes[0].to.kafka.topic.
const EnvPrefix = "DELAYBRIDGE_"

// Mask replaces secrets in Redacted output.
const Mask = "*****"

// LoadOptions says where Load reads configuration from.
type LoadOptions struct {
	// File is a YAML file; "" = none (defaults, environment and flags only).
	File string
	// Env is the environment as "NAME=value" strings; nil = os.Environ(). Only names
	// starting with EnvPrefix are read.
	Env []string
	// Set are "key=value" overrides from --set flags, applied in order. Keys are dotted
	// paths (scheduler.tick, redis.addrs); list elements are addressed by index
	// (routes.0.to.kafka.topic or routes[0].to.kafka.topic; index len(routes) appends).
	Set []string
}

// FieldError is one problem with one configuration key. Key uses the dotted form with
// list indexes in brackets (routes[0].from.kafka.topic); it is "" for a problem with a
// whole source (an unreadable file). Source says where the value came from: "default",
// "file PATH", "env NAME", "flag --set KEY", or "not set".
type FieldError struct {
	Key    string
	Source string
	Msg    string
}

func (e *FieldError) Error() string {
	switch {
	case e.Key == "":
		return e.Source + ": " + e.Msg
	case e.Source == "":
		return e.Key + ": " + e.Msg
	default:
		return e.Key + ": " + e.Msg + " (" + e.Source + ")"
	}
}

// FieldErrors flattens err (as returned by Load or Validate, possibly joined) into its
// FieldErrors; other errors become a FieldError with only Msg.
func FieldErrors(err error) []*FieldError {
	if err == nil {
		return nil
	}
	var out []*FieldError
	var walk func(error)
	walk = func(e error) {
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		var fe *FieldError
		if errors.As(e, &fe) {
			out = append(out, fe)
			return
		}
		out = append(out, &FieldError{Msg: e.Error()})
	}
	walk(err)
	return out
}

// Load builds the configuration from, in increasing precedence: Default(), the YAML
// file, DELAYBRIDGE_ environment variables, and --set flags; then validates it.
//
// The file is strict: a key that is not a configuration key is an error naming it. A
// YAML null leaves the key at its lower-precedence value. Durations are Go durations
// ("1ms", "8760h"); a bare number other than 0 is refused, since its unit would be a
// guess. In the environment and in flags a list of strings is comma-separated
// (DELAYBRIDGE_REDIS__ADDRS=a:1,b:2).
//
// Every error is a *FieldError naming the key and where its value came from; several are
// joined with errors.Join. On a validation error the loaded configuration is returned
// alongside the error; on a loading error the zero Config is.
//
// Environment names that Kubernetes injects for a Service called "delaybridge"
// (DELAYBRIDGE_SERVICE_HOST, DELAYBRIDGE_PORT, DELAYBRIDGE_PORT_8089_TCP…) and the test
// suite's DELAYBRIDGE_TEST_* are ignored; any other unknown DELAYBRIDGE_ name is an
// error naming the variable.
func Load(opts LoadOptions) (Config, error) {
	l := &loader{k: koanf.New("."), origin: map[string]string{}, secrets: secretSet{}}
	l.loadDefaults()
	if opts.File != "" {
		l.loadFile(opts.File)
	}
	env := opts.Env
	if env == nil {
		env = os.Environ()
	}
	l.loadEnv(env)
	l.loadFlags(opts.Set)
	l.secrets.addValue("", l.k.Raw())
	if len(l.errs) > 0 {
		l.secrets.scrubErrors(l.errs)
		return Config{}, errors.Join(l.errs...)
	}

	var cfg Config
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		TagName:     "koanf",
		ErrorUnused: true,
		Result:      &cfg,
	})
	if err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if err := dec.Decode(l.k.Raw()); err != nil {
		// Values were type-checked per source above, so this is a bug, not bad input.
		return Config{}, fmt.Errorf("config: decoding the merged configuration: %w", err)
	}
	if err := cfg.Validate(); err != nil {
		var out []error
		for _, fe := range FieldErrors(err) {
			if fe.Source == "" && fe.Key != "" {
				fe.Source = l.sourceOf(fe.Key)
			}
			out = append(out, fe)
		}
		l.secrets.scrubErrors(out)
		return cfg, errors.Join(out...)
	}
	return cfg, nil
}

type loader struct {
	k       *koanf.Koanf
	origin  map[string]string // display key (routes[0].name) -> source
	errs    []error
	secrets secretSet // every secret value seen, masked in every message
}

func (l *loader) fail(key, source, format string, args ...any) {
	l.errs = append(l.errs, &FieldError{Key: key, Source: source, Msg: fmt.Sprintf(format, args...)})
}

var configType = reflect.TypeFor[Config]()

func (l *loader) loadDefaults() {
	m := toMap(reflect.ValueOf(Default()))
	if err := l.k.Load(confmap.Provider(m, ""), nil); err != nil {
		l.fail("", "default", "%v", err)
		return
	}
	recordOrigins(m, "", "default", l.origin)
}

func (l *loader) loadFile(path string) {
	src := "file " + path
	b, err := file.Provider(path).ReadBytes()
	if err != nil {
		l.fail("", src, "%v", err)
		return
	}
	l.secrets.addYAMLText(string(b))
	raw, err := kyaml.Parser().Unmarshal(b)
	if err != nil {
		l.fail("", src, "%s", scrubYAMLError(err.Error()))
		return
	}
	l.secrets.addValue("", raw)
	var issues []*FieldError
	norm := normalizeStruct(raw, configType, "", &issues)
	for _, fe := range issues {
		fe.Source = src
		l.errs = append(l.errs, fe)
	}
	if len(issues) > 0 {
		return
	}
	if err := l.k.Load(confmap.Provider(norm, ""), nil); err != nil {
		l.fail("", src, "%v", err)
		return
	}
	recordOrigins(norm, "", src, l.origin)
}

// setting is one env variable or --set flag.
type setting struct {
	source string
	parts  []string
	value  string
}

// ignoredEnv matches the remainder (after the prefix) of variables that are not
// configuration: those Kubernetes injects for a Service whose name upper-cases to the
// prefix (DELAYBRIDGE_SERVICE_HOST, DELAYBRIDGE_PORT_8089_TCP…), and DELAYBRIDGE_TEST_*,
// which the project's test suite reads (DELAYBRIDGE_TEST_AMQP_URL).
func ignoredEnv(rest string) bool {
	return rest == "PORT" || strings.HasPrefix(rest, "PORT_") || strings.HasPrefix(rest, "SERVICE_") ||
		strings.HasPrefix(rest, "TEST_")
}

func (l *loader) loadEnv(env []string) {
	var sets []setting
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) {
			continue
		}
		rest := name[len(EnvPrefix):]
		if rest == "" || ignoredEnv(rest) {
			continue
		}
		sets = append(sets, setting{
			source: "env " + name,
			parts:  strings.Split(strings.ToLower(rest), "__"),
			value:  value,
		})
	}
	// Deterministic order, with list indexes compared as numbers so routes.2 is
	// created before routes.10.
	slices.SortStableFunc(sets, func(a, b setting) int {
		for i := 0; i < len(a.parts) && i < len(b.parts); i++ {
			ai, aerr := strconv.Atoi(a.parts[i])
			bi, berr := strconv.Atoi(b.parts[i])
			if aerr == nil && berr == nil {
				if c := cmp.Compare(ai, bi); c != 0 {
					return c
				}
				continue
			}
			if c := strings.Compare(a.parts[i], b.parts[i]); c != 0 {
				return c
			}
		}
		return cmp.Compare(len(a.parts), len(b.parts))
	})
	for _, s := range sets {
		l.apply(s)
	}
}

func (l *loader) loadFlags(set []string) {
	for _, kv := range set {
		key, value, ok := strings.Cut(kv, "=")
		key = strings.TrimSpace(key)
		if !ok || key == "" {
			// The argument may be a value given without its key: show it only when it
			// looks like a key.
			if flagKeyRE.MatchString(kv) {
				l.fail("", "flag --set "+kv, "want key=value")
			} else {
				l.fail("", "flag --set", "want key=value, got an argument without \"=\" (not shown: it may hold a secret)")
			}
			continue
		}
		// routes[0].name is the same as routes.0.name.
		norm := strings.NewReplacer("[", ".", "]", "").Replace(key)
		l.apply(setting{source: "flag --set " + key, parts: strings.Split(norm, "."), value: value})
	}
}

// listPatch addresses elements of a list of sections by index; a patch with index
// len(list) appends.
type listPatch map[int]map[string]any

// flagKeyRE matches a configuration key as written in --set.
var flagKeyRE = regexp.MustCompile(`^[a-z0-9_]+([.\[\]][a-z0-9_\]]*)*$`)

func (l *loader) apply(s setting) {
	l.secrets.addSetting(s.parts, s.value)
	patch, key, fe := buildPatch(s.parts, configType, "", s.value)
	if fe != nil {
		fe.Source = s.source
		l.errs = append(l.errs, fe)
		return
	}
	err := l.k.Load(rawProvider(patch), nil, koanf.WithMergeFunc(func(src, dest map[string]any) error {
		return mergePatch(src, dest, "")
	}))
	if err != nil {
		var fe *FieldError
		if errors.As(err, &fe) {
			fe.Source = s.source
			l.errs = append(l.errs, fe)
		} else {
			l.fail(key, s.source, "%v", err)
		}
		return
	}
	// The setting is the origin of its key and of every enclosing section: a problem
	// reported on routes[0].to after --set routes.0.to.amqp.exchange=x is the flag's.
	for k := key; k != ""; {
		l.origin[k] = s.source
		i := strings.LastIndexAny(k, ".[")
		if i < 0 {
			break
		}
		k = k[:i]
	}
}

// rawProvider hands a map to koanf as is (confmap would deep-copy it and lose the
// listPatch type).
type rawProvider map[string]any

func (p rawProvider) ReadBytes() ([]byte, error) {
	return nil, errors.New("config: rawProvider has no bytes")
}
func (p rawProvider) Read() (map[string]any, error) { return p, nil }

// mergePatch merges src into dest: sections merge key by key, list patches merge into
// the indexed elements, anything else replaces.
func mergePatch(src, dest map[string]any, path string) error {
	for k, v := range src {
		key := joinKey(path, k)
		switch sv := v.(type) {
		case map[string]any:
			dm, ok := dest[k].(map[string]any)
			if !ok {
				dm = map[string]any{}
				dest[k] = dm
			}
			if err := mergePatch(sv, dm, key); err != nil {
				return err
			}
		case listPatch:
			list, _ := dest[k].([]any)
			for _, i := range slices.Sorted(mapKeys(sv)) {
				ekey := fmt.Sprintf("%s[%d]", key, i)
				switch {
				case i == len(list):
					list = append(list, map[string]any{})
				case i > len(list):
					return &FieldError{Key: ekey, Msg: fmt.Sprintf(
						"index out of range: %s has %d elements (index %d appends one)", key, len(list), len(list))}
				}
				em, ok := list[i].(map[string]any)
				if !ok {
					em = map[string]any{}
					list[i] = em
				}
				if err := mergePatch(sv[i], em, ekey); err != nil {
					return err
				}
			}
			dest[k] = list
		default:
			dest[k] = v
		}
	}
	return nil
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

// buildPatch turns a path and a textual value into a nested patch, type-checking both
// against the Config type. It returns the display key of the value.
func buildPatch(parts []string, t reflect.Type, path string, value string) (map[string]any, string, *FieldError) {
	name := parts[0]
	key := joinKey(path, name)
	f, ok := fieldByKey(t, name)
	if !ok {
		return nil, key, unknownKey(t, key, name)
	}
	ft := deref(f.Type)
	switch {
	case ft.Kind() == reflect.Struct && ft != durationType:
		if len(parts) == 1 {
			return nil, key, &FieldError{Key: key, Msg: fmt.Sprintf(
				"is a section: set one of its keys (%s)", strings.Join(keysOf(ft), ", "))}
		}
		sub, skey, fe := buildPatch(parts[1:], ft, key, value)
		if fe != nil {
			return nil, skey, fe
		}
		return map[string]any{name: sub}, skey, nil
	case ft.Kind() == reflect.Slice && isSection(ft.Elem()):
		if len(parts) < 3 {
			return nil, key, &FieldError{Key: key, Msg: fmt.Sprintf(
				"is a list of sections: set one key of one element, e.g. %s.0.%s", key, keysOf(deref(ft.Elem()))[0])}
		}
		i, err := strconv.Atoi(parts[1])
		if err != nil || i < 0 {
			return nil, key, &FieldError{Key: key, Msg: fmt.Sprintf("want a list index after %s, got %q", key, parts[1])}
		}
		ekey := fmt.Sprintf("%s[%d]", key, i)
		sub, skey, fe := buildPatch(parts[2:], deref(ft.Elem()), ekey, value)
		if fe != nil {
			return nil, skey, fe
		}
		return map[string]any{name: listPatch{i: sub}}, skey, nil
	default:
		if len(parts) > 1 {
			return nil, key, &FieldError{Key: joinKey(key, parts[1]), Msg: fmt.Sprintf(
				"unknown key: %s is a single value, not a section", key)}
		}
		v, err := parseText(value, f.Type)
		if err != nil {
			if hidesValue(key) {
				return nil, key, &FieldError{Key: key, Msg: "want " + wantOf(f.Type) + ", got " + shown(key, value)}
			}
			return nil, key, &FieldError{Key: key, Msg: err.Error()}
		}
		return map[string]any{name: v}, key, nil
	}
}

// ---- type-directed normalization of parsed YAML ----------------------------------

var durationType = reflect.TypeFor[time.Duration]()

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

func isSection(t reflect.Type) bool {
	t = deref(t)
	return t.Kind() == reflect.Struct && t != durationType
}

func tagName(f reflect.StructField) string {
	name, _, _ := strings.Cut(f.Tag.Get("koanf"), ",")
	return name
}

func fieldByKey(t reflect.Type, key string) (reflect.StructField, bool) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		if f.IsExported() && tagName(f) == key && key != "" && key != "-" {
			return f, true
		}
	}
	return reflect.StructField{}, false
}

func keysOf(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		if n := tagName(t.Field(i)); n != "" && n != "-" && t.Field(i).IsExported() {
			out = append(out, n)
		}
	}
	return out
}

func joinKey(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

func unknownKey(t reflect.Type, key, name string) *FieldError {
	msg := "unknown key"
	best, bestD := "", 3
	for _, k := range keysOf(t) {
		if d := editDistance(strings.ToLower(name), k); d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", best)
	} else {
		msg += " (valid keys here: " + strings.Join(keysOf(t), ", ") + ")"
	}
	return &FieldError{Key: key, Msg: msg}
}

func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := 1
			if a[i-1] == b[j-1] {
				c = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+c)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// normalizeStruct checks a parsed YAML mapping against struct type t and returns it with
// every value converted to its canonical type (string, int64, float64, bool,
// time.Duration, []any, map[string]any). Problems are appended to issues.
func normalizeStruct(raw map[string]any, t reflect.Type, path string, issues *[]*FieldError) map[string]any {
	out := map[string]any{}
	for _, name := range slices.Sorted(mapKeys(raw)) {
		v := raw[name]
		key := joinKey(path, name)
		f, ok := fieldByKey(t, name)
		if !ok {
			*issues = append(*issues, unknownKey(t, key, name))
			continue
		}
		if v == nil {
			continue // YAML null: leave the key at its lower-precedence value
		}
		if nv, ok := normalizeValue(v, f.Type, key, issues); ok {
			out[name] = nv
		}
	}
	return out
}

func normalizeValue(v any, t reflect.Type, key string, issues *[]*FieldError) (any, bool) {
	bad := func(format string, args ...any) (any, bool) {
		*issues = append(*issues, &FieldError{Key: key, Msg: fmt.Sprintf(format, args...)})
		return nil, false
	}
	dt := deref(t)
	switch {
	case isSection(dt):
		m, ok := v.(map[string]any)
		if !ok {
			return bad("want a section (a mapping with keys %s), got %s", strings.Join(keysOf(dt), ", "), shown(key, v))
		}
		return normalizeStruct(m, dt, key, issues), true
	case dt.Kind() == reflect.Slice:
		if s, ok := v.(string); ok && !isSection(dt.Elem()) {
			return splitList(s), true
		}
		list, ok := v.([]any)
		if !ok {
			return bad("want a list, got %s", shown(key, v))
		}
		out := make([]any, 0, len(list))
		good := true
		for i, e := range list {
			ekey := fmt.Sprintf("%s[%d]", key, i)
			if e == nil {
				*issues = append(*issues, &FieldError{Key: ekey, Msg: "empty list element"})
				good = false
				continue
			}
			ne, ok := normalizeValue(e, dt.Elem(), ekey, issues)
			good = good && ok
			out = append(out, ne)
		}
		return out, good
	default:
		nv, err := convertScalar(v, dt)
		if err != nil {
			if hidesValue(key) {
				hint := ""
				if _, scalar := v.(map[string]any); !scalar {
					if _, list := v.([]any); !list {
						hint = "; quote it"
					}
				}
				return bad("want %s, got %s%s", wantOf(dt), shown(key, v), hint)
			}
			return bad("%v", err)
		}
		return nv, true
	}
}

func describe(v any) string {
	switch v.(type) {
	case map[string]any:
		return "a section"
	case []any:
		return "a list"
	case string:
		return fmt.Sprintf("%q", v)
	}
	return fmt.Sprintf("%v", v)
}

func splitList(s string) []any {
	out := []any{}
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// convertScalar converts a YAML scalar to the canonical type for t.
func convertScalar(v any, t reflect.Type) (any, error) {
	if s, ok := v.(string); ok {
		return parseText(s, t)
	}
	switch {
	case t == durationType:
		if n, ok := asInt(v); ok && n == 0 {
			return time.Duration(0), nil
		}
		return nil, fmt.Errorf("want a Go duration such as \"1ms\", \"30s\" or \"8760h\", got %v (a bare number has no unit)", v)
	case t.Kind() == reflect.String:
		return nil, fmt.Errorf("want a string, got %v (quote it)", v)
	case t.Kind() == reflect.Bool:
		if b, ok := v.(bool); ok {
			return b, nil
		}
		return nil, fmt.Errorf("want true or false, got %v", v)
	case isIntKind(t.Kind()):
		if n, ok := asInt(v); ok {
			return n, nil
		}
		return nil, fmt.Errorf("want an integer, got %v", v)
	case t.Kind() == reflect.Float64 || t.Kind() == reflect.Float32:
		switch n := v.(type) {
		case float64:
			return n, nil
		case int:
			return float64(n), nil
		case int64:
			return float64(n), nil
		case uint64:
			return float64(n), nil
		}
		return nil, fmt.Errorf("want a number, got %v", v)
	}
	return nil, fmt.Errorf("unsupported configuration type %s", t)
}

func isIntKind(k reflect.Kind) bool {
	switch k {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return true
	}
	return false
}

func asInt(v any) (int64, bool) {
	switch n := v.(type) {
	case int:
		return int64(n), true
	case int64:
		return n, true
	case uint64:
		if n <= 1<<63-1 {
			return int64(n), true
		}
	case float64:
		if n == float64(int64(n)) {
			return int64(n), true
		}
	}
	return 0, false
}

// parseText converts a textual value (environment, flag, quoted YAML) to the canonical
// type for t. Lists of strings are comma-separated.
func parseText(s string, t reflect.Type) (any, error) {
	t = deref(t)
	switch {
	case t == durationType:
		d, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("want a Go duration such as \"1ms\", \"30s\" or \"8760h\", got %q", s)
		}
		return d, nil
	case t.Kind() == reflect.String:
		return s, nil
	case t.Kind() == reflect.Bool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("want true or false, got %q", s)
		}
		return b, nil
	case isIntKind(t.Kind()):
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return nil, fmt.Errorf("want an integer, got %q", s)
		}
		return n, nil
	case t.Kind() == reflect.Float64 || t.Kind() == reflect.Float32:
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil {
			return nil, fmt.Errorf("want a number, got %q", s)
		}
		return f, nil
	case t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.String:
		return splitList(s), nil
	case t.Kind() == reflect.Slice:
		return nil, fmt.Errorf("is a list of sections and cannot be set from one value")
	case t.Kind() == reflect.Struct:
		return nil, fmt.Errorf("is a section and cannot be set from one value (want a mapping with keys %s)", strings.Join(keysOf(t), ", "))
	}
	return nil, fmt.Errorf("unsupported configuration type %s", t)
}

// ---- struct -> map (defaults) and origins -----------------------------------------

// toMap renders a struct as a canonical nested map, omitting nil pointers.
func toMap(v reflect.Value) map[string]any {
	out := map[string]any{}
	t := v.Type()
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		name := tagName(f)
		if !f.IsExported() || name == "" || name == "-" {
			continue
		}
		if fv, ok := toValue(v.Field(i)); ok {
			out[name] = fv
		}
	}
	return out
}

func toValue(v reflect.Value) (any, bool) {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return nil, false
		}
		v = v.Elem()
	}
	switch {
	case v.Type() == durationType:
		return time.Duration(v.Int()), true
	case v.Kind() == reflect.Struct:
		return toMap(v), true
	case v.Kind() == reflect.Slice:
		if v.IsNil() {
			return nil, false
		}
		out := make([]any, 0, v.Len())
		for i := 0; i < v.Len(); i++ {
			if e, ok := toValue(v.Index(i)); ok {
				out = append(out, e)
			}
		}
		return out, true
	case isIntKind(v.Kind()):
		return v.Int(), true
	case v.Kind() == reflect.Float64 || v.Kind() == reflect.Float32:
		return v.Float(), true
	case v.Kind() == reflect.Bool:
		return v.Bool(), true
	case v.Kind() == reflect.String:
		return v.String(), true
	}
	return nil, false
}

// recordOrigins notes src as the origin of every key (sections, list elements and
// leaves) present in m.
func recordOrigins(m map[string]any, path, src string, origin map[string]string) {
	for k, v := range m {
		key := joinKey(path, k)
		origin[key] = src
		switch x := v.(type) {
		case map[string]any:
			recordOrigins(x, key, src, origin)
		case []any:
			for i, e := range x {
				if em, ok := e.(map[string]any); ok {
					ekey := fmt.Sprintf("%s[%d]", key, i)
					origin[ekey] = src
					recordOrigins(em, ekey, src, origin)
				}
			}
		}
	}
}

// sourceOf finds where key's value came from: the key itself, else its closest
// enclosing section or list.
func (l *loader) sourceOf(key string) string {
	for k := key; k != ""; {
		if s, ok := l.origin[k]; ok {
			return s
		}
		i := strings.LastIndexAny(k, ".[")
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return "not set"
}

// ---- output ----------------------------------------------------------------------

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
	case isIntKind(v.Kind()):
		return scalar("", strconv.FormatInt(v.Int(), 10))
	case v.Kind() == reflect.Float64 || v.Kind() == reflect.Float32:
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
