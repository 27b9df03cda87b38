package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// The key space of Config, read from its koanf tags. koanf and mapstructure know it only
// while decoding; this file adds what their errors lack: the valid keys around a
// mistake (did you mean …?) and the shape checks on an environment or --set path.

var (
	configType   = reflect.TypeFor[Config]()
	durationType = reflect.TypeFor[time.Duration]()
)

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

func isSectionList(t reflect.Type) bool {
	t = deref(t)
	return t.Kind() == reflect.Slice && isSection(t.Elem())
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

// sectionAt returns the section type at a display key (routes[0].to.kafka), or nil when
// the key is not a section.
func sectionAt(key string) reflect.Type {
	t := configType
	if key == "" {
		return t
	}
	for _, name := range strings.Split(plainKey(key), ".") {
		f, ok := fieldByKey(t, name)
		if !ok {
			return nil
		}
		t = deref(f.Type)
		if t.Kind() == reflect.Slice {
			t = deref(t.Elem())
		}
		if !isSection(t) {
			return nil
		}
	}
	return t
}

// unknownField reports a key mapstructure left unused. The key's last segment may itself
// hold dots (a YAML key "scheduler.tick" at the top level), so the section it lies in is
// the longest prefix that is a section not knowing the rest.
func unknownField(key string) *FieldError {
	for i := strings.LastIndex(key, "."); i > 0; i = strings.LastIndex(key[:i], ".") {
		if t := sectionAt(key[:i]); t != nil {
			if _, known := fieldByKey(t, key[i+1:]); !known {
				return unknownKey(t, key, key[i+1:])
			}
		}
	}
	return unknownKey(configType, key, key)
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

// settingPath checks the path of one environment variable or --set flag (lower-level
// parts, list elements by index) against Config. It returns the display key
// (routes[0].name), the koanf path with canonical indexes (routes.0.name) and the type
// of the value it sets. Only single values can be set this way: a section or a list of
// sections is set one key at a time.
func settingPath(parts []string) (key, path string, leaf reflect.Type, fe *FieldError) {
	t := configType
	var canon []string
	for i := 0; i < len(parts); i++ {
		name := parts[i]
		key = joinKey(key, name)
		canon = append(canon, name)
		f, ok := fieldByKey(t, name)
		if !ok {
			return key, "", nil, unknownKey(t, key, name)
		}
		ft := deref(f.Type)
		last := i == len(parts)-1
		switch {
		case isSection(ft) && last:
			return key, "", nil, &FieldError{Key: key, Msg: fmt.Sprintf(
				"is a section: set one of its keys (%s)", strings.Join(keysOf(ft), ", "))}
		case isSection(ft):
			t = ft
		case isSectionList(ft):
			elem := deref(ft.Elem())
			if i+2 >= len(parts) {
				return key, "", nil, &FieldError{Key: key, Msg: fmt.Sprintf(
					"is a list of sections: set one key of one element, e.g. %s.0.%s", key, keysOf(elem)[0])}
			}
			n, err := strconv.Atoi(parts[i+1])
			if err != nil || n < 0 {
				return key, "", nil, &FieldError{Key: key, Msg: fmt.Sprintf("want a list index after %s, got %q", key, parts[i+1])}
			}
			i++
			key = fmt.Sprintf("%s[%d]", key, n)
			canon = append(canon, strconv.Itoa(n))
			t = elem
		case !last:
			return key, "", nil, &FieldError{Key: joinKey(key, parts[i+1]), Msg: fmt.Sprintf(
				"unknown key: %s is a single value, not a section", key)}
		default:
			return key, strings.Join(canon, "."), f.Type, nil
		}
	}
	return key, "", nil, &FieldError{Key: key, Msg: "empty key"}
}
