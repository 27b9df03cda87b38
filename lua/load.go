package lua

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// The include loader. A source file (a script or a helper) names the helpers it uses in
// lines of the form
//
//	--- @include "<name>"
//
// where <name> is a file of includes/ (or a script of this folder: see below) without
// ".lua". Loading a script puts every helper it needs, transitively, in front of it,
// each once and after the helpers it includes itself. A script's own body becomes the function
//
//	local function <name>(KEYS, ARGV) ... end
//
// so one script can call another (the ordered_* wrappers call the script they wrap):
// including a script's name includes that function.

//go:embed *.lua includes/*.lua
var files embed.FS

var includeLine = regexp.MustCompile(`(?m)^--- @include "([a-z0-9_]+)"[ \t]*\r?\n?`)

// unit is one loaded source file: its text without the include lines, and the names
// it includes in the order they appear.
type unit struct {
	name, text string
	deps       []string
	script     bool
}

// loader resolves units by name from the embedded files, memoised.
type loader struct {
	scripts map[string]bool
	units   map[string]*unit
}

func newLoader(scripts []string) *loader {
	l := &loader{scripts: make(map[string]bool, len(scripts)), units: map[string]*unit{}}
	for _, s := range scripts {
		l.scripts[s] = true
	}
	return l
}

func (l *loader) unit(name string) (*unit, error) {
	if u, ok := l.units[name]; ok {
		return u, nil
	}
	path := name + ".lua"
	if !l.scripts[name] {
		path = "includes/" + path
	}
	b, err := files.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("lua: no source %q for %q: %w", path, name, err)
	}
	u := &unit{name: name, script: l.scripts[name]}
	for _, m := range includeLine.FindAllStringSubmatch(string(b), -1) {
		u.deps = append(u.deps, m[1])
	}
	u.text = includeLine.ReplaceAllString(string(b), "")
	if u.script {
		u.text = "local function " + name + "(KEYS, ARGV)\n" + strings.TrimRight(u.text, "\n") + "\nend\n"
	}
	l.units[name] = u
	return u, nil
}

// order appends the units of names and everything they include to out, dependencies
// first, each once (seen); a cycle of includes is an error.
func (l *loader) order(names []string, seen map[string]int, out *[]*unit) error {
	const (
		visiting = 1
		done     = 2
	)
	for _, n := range names {
		switch seen[n] {
		case done:
			continue
		case visiting:
			return fmt.Errorf("lua: include cycle through %q", n)
		}
		seen[n] = visiting
		u, err := l.unit(n)
		if err != nil {
			return err
		}
		if err := l.order(u.deps, seen, out); err != nil {
			return err
		}
		seen[n] = done
		*out = append(*out, u)
	}
	return nil
}

func join(units []*unit) string {
	var b strings.Builder
	for _, u := range units {
		b.WriteString(u.text)
		if !strings.HasSuffix(u.text, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String()
}

// assemble is the EVAL source of script name: its helpers, itself, and the call.
func (l *loader) assemble(name string) (string, error) {
	var units []*unit
	if err := l.order([]string{name}, map[string]int{}, &units); err != nil {
		return "", err
	}
	return join(units) + "return " + name + "(KEYS, ARGV)\n", nil
}

// Library is the Redis Functions library of a set of scripts: one FUNCTION LOAD
// defines every helper once, and each script is a function.
type Library struct {
	// Name is "delaybridge_<hash>": the hash is of the library's code, so two builds
	// with different scripts load two libraries side by side and each calls its own.
	Name string
	// Code is the FUNCTION LOAD payload, starting with its "#!lua name=" line.
	Code string
	fn   map[string]string
	eval map[string]string
}

// Function is the name script is registered under in the library: "<script>_<hash>"
// (function names are global across a server's libraries, so they carry the hash too).
func (l *Library) Function(script string) string { return l.fn[script] }

// Eval is script's source for EVAL/EVALSHA on servers without Redis Functions: the same
// helpers and body as the library's function, assembled per script.
func (l *Library) Eval(script string) string { return l.eval[script] }

// Scripts are the library's script names, sorted.
func (l *Library) Scripts() []string {
	out := make([]string, 0, len(l.fn))
	for s := range l.fn {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// hashLen is how many hex digits of SHA-256(code) name a library: 48 bits, so two
// builds that differ in their scripts collide with negligible probability.
const hashLen = 12

// NewLibrary loads scripts and their includes into a library named after prefix and
// the hash of its code.
func NewLibrary(prefix string, scripts []string) (*Library, error) {
	ld := newLoader(scripts)
	var units []*unit
	seen := map[string]int{}
	sorted := append([]string(nil), scripts...)
	sort.Strings(sorted)
	if err := ld.order(sorted, seen, &units); err != nil {
		return nil, err
	}
	body := join(units)
	sum := sha256.Sum256([]byte(body))
	h := hex.EncodeToString(sum[:])[:hashLen]
	lib := &Library{Name: prefix + "_" + h, fn: map[string]string{}, eval: map[string]string{}}
	var b strings.Builder
	fmt.Fprintf(&b, "#!lua name=%s\n%s", lib.Name, body)
	for _, s := range sorted {
		lib.fn[s] = s + "_" + h
		fmt.Fprintf(&b, "redis.register_function('%s', %s)\n", lib.fn[s], s)
		src, err := ld.assemble(s)
		if err != nil {
			return nil, err
		}
		lib.eval[s] = src
	}
	lib.Code = b.String()
	return lib, nil
}
