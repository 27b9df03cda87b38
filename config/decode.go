package config

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/go-viper/mapstructure/v2"
)

// Decoding is mapstructure's, driven by one decode hook (typed) that converts YAML
// scalars and the text of environment variables and flags to the field types with this
// package's messages, and refuses what mapstructure would otherwise coerce or describe
// by Go type names.

// typeError is a value of the wrong type. How it is shown depends on the key it was
// given for (a secret is described, never shown), which the hook does not know: the
// message is made once the key is (message).
type typeError struct {
	want string // "an integer", "a list", …
	got  any
	note string // appended when the value is shown: " (quote it)"
}

func (e *typeError) Error() string { return "want " + e.want + ", got " + describe(e.got) + e.note }

// message is the error's text for key.
func (e *typeError) message(key string) string {
	if !hidesValue(key) {
		return e.Error()
	}
	hint := ""
	switch e.got.(type) {
	case map[string]any, []any, string:
	default:
		if e.want == "a string" {
			hint = "; quote it" // a number or boolean where text goes
		}
	}
	return "want " + e.want + ", got " + shown(key, e.got) + hint
}

// typeMessage is the text of a conversion error for key.
func typeMessage(key string, err error) string {
	var te *typeError
	if errors.As(err, &te) {
		return te.message(key)
	}
	return err.Error()
}

const wantDuration = `a Go duration such as "1ms", "30s" or "8760h"`

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

// convert checks v against type t and returns it in a form mapstructure decodes into t
// as is. v is a YAML value, a typed default, or text (an environment variable, a flag, a
// quoted YAML scalar): text converts to any single value, and to a list of strings
// split at commas.
func convert(v any, t reflect.Type) (any, error) {
	t = deref(t)
	s, isText := v.(string)
	bad := func(want, note string) (any, error) {
		if isText {
			note = ""
		}
		return nil, &typeError{want: want, got: v, note: note}
	}
	switch k := t.Kind(); {
	case t == durationType:
		if d, ok := asDuration(v); ok {
			return d, nil
		}
		return bad(wantDuration, " (a bare number has no unit)")
	case k == reflect.String:
		if isText {
			return s, nil
		}
		return bad("a string", " (quote it)")
	case k == reflect.Bool:
		if b, ok := v.(bool); ok {
			return b, nil
		}
		if b, err := strconv.ParseBool(strings.TrimSpace(s)); isText && err == nil {
			return b, nil
		}
		return bad("true or false", "")
	case k >= reflect.Int && k <= reflect.Int64:
		if n, ok := asInt(v); ok {
			return n, nil
		}
		return bad("an integer", "")
	case k == reflect.Float64 || k == reflect.Float32:
		if f, ok := asFloat(v); ok {
			return f, nil
		}
		return bad("a number", "")
	case k == reflect.Slice && isText && t.Elem().Kind() == reflect.String:
		return splitList(s), nil
	case k == reflect.Slice && reflect.ValueOf(v).Kind() == reflect.Slice:
		return v, nil
	case k == reflect.Slice:
		return bad("a list", "")
	case k == reflect.Struct:
		if _, ok := v.(map[string]any); ok {
			return v, nil
		}
		return bad(wantSection(t), "")
	}
	return v, nil
}

func wantSection(t reflect.Type) string {
	return "a section (a mapping with keys " + strings.Join(keysOf(t), ", ") + ")"
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

// asDuration accepts a Go duration as text, and 0 as a number (its unit does not matter).
func asDuration(v any) (time.Duration, bool) {
	switch x := v.(type) {
	case time.Duration:
		return x, true
	case string:
		d, err := time.ParseDuration(strings.TrimSpace(x))
		return d, err == nil
	}
	n, ok := asInt(v)
	return 0, ok && n == 0
}

func asInt(v any) (int64, bool) {
	switch n := v.(type) {
	case string:
		i, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
		return i, err == nil
	case int:
		return int64(n), true
	case int64:
		return n, true
	case uint64:
		return int64(n), n <= 1<<63-1
	case float64:
		return int64(n), n == float64(int64(n))
	}
	return 0, false
}

func asFloat(v any) (float64, bool) {
	switch n := v.(type) {
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
		return f, err == nil
	case float64:
		return n, true
	}
	n, ok := asInt(v)
	return float64(n), ok
}

// typed is the decode hook of every decode that keeps its result.
func typed(from, to reflect.Value) (any, error) {
	if k := to.Kind(); k == reflect.Pointer || k == reflect.Interface {
		return from.Interface(), nil // decoded again as the pointed-to type
	}
	return convert(from.Interface(), to.Type())
}

// lenient is the decode hook of the pass that only collects unknown keys: a value of the
// wrong type is dropped, so that no error keeps mapstructure from recording them.
func lenient(from, to reflect.Value) (any, error) {
	v := from.Interface()
	switch to.Kind() {
	case reflect.Pointer, reflect.Interface:
		return v, nil
	case reflect.Struct:
		if _, ok := v.(map[string]any); ok && to.Type() != durationType {
			return v, nil
		}
	case reflect.Slice:
		if from.Kind() == reflect.Slice {
			return v, nil
		}
	}
	return nil, nil
}

// decode decodes raw into out with mapstructure: koanf tags, exact key names, the given
// hook; md, when set, collects unused keys, else they are an error.
func decode(raw map[string]any, out *Config, hook mapstructure.DecodeHookFuncValue, md *mapstructure.Metadata) error {
	dec, err := mapstructure.NewDecoder(&mapstructure.DecoderConfig{
		TagName:     "koanf",
		MatchName:   func(mapKey, fieldName string) bool { return mapKey == fieldName },
		DecodeHook:  hook,
		ErrorUnused: md == nil,
		Metadata:    md,
		Result:      out,
	})
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	err = dec.Decode(raw)
	// Decode wraps the joined errors in one message; keep them apart.
	if j, ok := errors.Unwrap(err).(interface{ Unwrap() []error }); ok {
		return errors.Join(j.Unwrap()...)
	}
	return err
}

// checkTypes returns every problem with a parsed YAML file: values of the wrong type
// (from the typed decode) and unknown keys (from the lenient decode's metadata).
func checkTypes(raw map[string]any) []*FieldError {
	var out []*FieldError
	var scratch Config
	for _, e := range leafErrors(decode(raw, &scratch, typed, &mapstructure.Metadata{})) {
		var de *mapstructure.DecodeError
		if errors.As(e, &de) {
			out = append(out, &FieldError{Key: de.Name(), Msg: typeMessage(de.Name(), de.Unwrap())})
		} else {
			out = append(out, &FieldError{Msg: e.Error()})
		}
	}
	var md mapstructure.Metadata
	scratch = Config{}
	if err := decode(raw, &scratch, lenient, &md); err != nil {
		out = append(out, &FieldError{Msg: err.Error()})
	}
	slices.Sort(md.Unused)
	for _, key := range md.Unused {
		out = append(out, unknownField(key))
	}
	return out
}
