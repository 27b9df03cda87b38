package config

import (
	"fmt"
	"maps"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/go-viper/mapstructure/v2"
	kyaml "github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/confmap"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
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
	environ := opts.Env
	if environ == nil {
		environ = os.Environ()
	}
	l.loadEnv(environ)
	l.loadFlags(opts.Set)
	raw := l.k.Raw()
	l.secrets.addValue("", raw)
	if len(l.errs) > 0 {
		return Config{}, l.secrets.joinScrubbed(l.errs)
	}
	var cfg Config
	if err := decode(raw, &cfg, typed, nil); err != nil {
		// Every source was type-checked as it was loaded, so this is a bug, not bad input.
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
		return cfg, l.secrets.joinScrubbed(out)
	}
	return cfg, nil
}

// loader merges the sources into one koanf instance and remembers, for every key, which
// source set it last (origin), so that an error found later names it.
type loader struct {
	k       *koanf.Koanf
	origin  map[string]string // display key (routes[0].name) -> source
	errs    []error
	secrets secretSet // every secret value seen, masked in every message
}

func (l *loader) fail(key, source, format string, args ...any) {
	l.errs = append(l.errs, &FieldError{Key: key, Source: source, Msg: fmt.Sprintf(format, args...)})
}

// loadDefaults loads Default() through confmap, as the map mapstructure makes of it.
func (l *loader) loadDefaults() {
	var m map[string]any
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{TagName: "koanf", Result: &m})
	if err == nil {
		err = dec.Decode(Default())
	}
	if err == nil {
		err = l.k.Load(confmap.Provider(m, ""), nil)
	}
	if err != nil {
		l.fail("", "default", "%v", err)
		return
	}
	recordOrigins(m, "", "default", l.origin)
}

// loadFile reads the file with koanf's file provider and YAML parser, and type-checks it
// as a whole before merging it, so that every problem in it is reported at once.
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
	issues := append(checkTypes(raw), dropNulls(raw, "")...)
	for _, fe := range issues {
		fe.Source = src
		l.errs = append(l.errs, fe)
	}
	if len(issues) > 0 {
		return
	}
	if err := l.k.Load(confmap.Provider(raw, ""), nil); err != nil {
		l.fail("", src, "%v", err)
		return
	}
	recordOrigins(raw, "", src, l.origin)
}

// dropNulls deletes YAML nulls from m, so they leave keys at their lower-precedence
// values; a null list element is a problem.
func dropNulls(m map[string]any, path string) []*FieldError {
	var issues []*FieldError
	for k, v := range m {
		key := joinKey(path, k)
		switch x := v.(type) {
		case nil:
			delete(m, k)
		case map[string]any:
			issues = append(issues, dropNulls(x, key)...)
		case []any:
			for i, e := range x {
				ekey := fmt.Sprintf("%s[%d]", key, i)
				if e == nil {
					issues = append(issues, &FieldError{Key: ekey, Msg: "empty list element"})
				} else if em, ok := e.(map[string]any); ok {
					issues = append(issues, dropNulls(em, ekey)...)
				}
			}
		}
	}
	return issues
}

// ignoredEnv matches the remainder (after the prefix) of variables that are not
// configuration: those Kubernetes injects for a Service whose name upper-cases to the
// prefix (DELAYBRIDGE_SERVICE_HOST, DELAYBRIDGE_PORT_8089_TCP…), and DELAYBRIDGE_TEST_*,
// which the project's test suite reads (DELAYBRIDGE_TEST_AMQP_URL).
func ignoredEnv(rest string) bool {
	return rest == "PORT" || strings.HasPrefix(rest, "PORT_") || strings.HasPrefix(rest, "SERVICE_") ||
		strings.HasPrefix(rest, "TEST_")
}

// loadEnv reads DELAYBRIDGE_ variables with koanf's env provider; its key transform
// checks and converts each one (setting).
func (l *loader) loadEnv(environ []string) {
	p := env.Provider(".", env.Opt{
		Prefix:      EnvPrefix,
		EnvironFunc: func() []string { return environ },
		TransformFunc: func(name, value string) (string, any) {
			rest := strings.TrimPrefix(name, EnvPrefix)
			if rest == "" || ignoredEnv(rest) {
				return "", nil
			}
			return l.setting("env "+name, strings.Split(strings.ToLower(rest), "__"), value)
		},
	})
	l.loadSettings(p)
}

// flagKeyRE matches a configuration key as written in --set.
var flagKeyRE = regexp.MustCompile(`^[a-z0-9_]+([.\[\]][a-z0-9_\]]*)*$`)

// loadFlags loads --set key=value pairs through confmap. (koanf's posflag provider maps
// one flag per key; --set is one repeatable flag carrying any key.)
func (l *loader) loadFlags(set []string) {
	flat := map[string]any{}
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
		if path, v := l.setting("flag --set "+key, strings.Split(norm, "."), value); path != "" {
			flat[path] = v
		}
	}
	l.loadSettings(confmap.Provider(flat, "."))
}

// setting checks one environment variable or flag (its path against Config, its text
// against the key's type) and returns its koanf path and typed value, or "" after
// recording the problem.
func (l *loader) setting(source string, parts []string, value string) (string, any) {
	l.secrets.addSetting(parts, value)
	key, path, leaf, fe := settingPath(parts)
	var v any
	if fe == nil {
		var err error
		if v, err = convert(value, leaf); err != nil {
			fe = &FieldError{Key: key, Msg: typeMessage(key, err)}
		}
	}
	if fe != nil {
		fe.Source = source
		l.errs = append(l.errs, fe)
		return "", nil
	}
	// The setting is the origin of its key and of every enclosing section: a problem
	// reported on routes[0].to after --set routes.0.to.amqp.exchange=x is the flag's.
	for k := key; k != ""; {
		l.origin[k] = source
		i := strings.LastIndexAny(k, ".[")
		if i < 0 {
			break
		}
		k = k[:i]
	}
	return path, v
}

// loadSettings merges environment or flag settings. They patch: a section merges key by
// key, and a map with index keys (routes.0.name) merges into the indexed elements of the
// list beneath, an index one past the end appending one.
func (l *loader) loadSettings(p koanf.Provider) {
	err := l.k.Load(p, nil, koanf.WithMergeFunc(func(src, dest map[string]any) error {
		l.mergePatch(src, dest, "")
		return nil
	}))
	if err != nil {
		l.fail("", "environment and flags", "%v", err)
	}
}

func (l *loader) mergePatch(src, dest map[string]any, path string) {
	for k, v := range src {
		key := joinKey(path, k)
		patch, isMap := v.(map[string]any)
		switch {
		case !isMap:
			dest[k] = v
		case isIndexMap(patch):
			dest[k] = l.mergeList(patch, dest[k], key)
		default:
			dm, ok := dest[k].(map[string]any)
			if !ok {
				dm = map[string]any{}
				dest[k] = dm
			}
			l.mergePatch(patch, dm, key)
		}
	}
}

// isIndexMap tells a list patch: settingPath lets a number through only as the index
// of a list of sections, and no section key is a number.
func isIndexMap(m map[string]any) bool {
	for k := range m {
		if _, err := strconv.Atoi(k); err != nil {
			return false
		}
	}
	return len(m) > 0
}

func (l *loader) mergeList(patch map[string]any, cur any, key string) []any {
	list, _ := cur.([]any)
	idx := slices.SortedFunc(maps.Keys(patch), func(a, b string) int {
		x, _ := strconv.Atoi(a)
		y, _ := strconv.Atoi(b)
		return x - y
	})
	for _, s := range idx {
		i, _ := strconv.Atoi(s)
		ekey := fmt.Sprintf("%s[%d]", key, i)
		if i > len(list) {
			l.fail(ekey, l.sourceOf(ekey), "index out of range: %s has %d elements (index %d appends one)", key, len(list), len(list))
			continue
		}
		if i == len(list) {
			list = append(list, map[string]any{})
		}
		em, ok := list[i].(map[string]any)
		if !ok {
			em = map[string]any{}
			list[i] = em
		}
		sub, _ := patch[s].(map[string]any)
		l.mergePatch(sub, em, ekey)
	}
	return list
}

// recordOrigins notes src as the origin of every key (sections, list elements and
// leaves) present in m. Nil values (Default's routes) are not set.
func recordOrigins(m map[string]any, path, src string, origin map[string]string) {
	for k, v := range m {
		if rv := reflect.ValueOf(v); !rv.IsValid() || rv.Kind() == reflect.Slice && rv.IsNil() {
			continue
		}
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
