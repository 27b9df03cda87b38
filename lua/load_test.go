package lua

import (
	"strings"
	"testing"
)

// TestLibraryIncludesOnce: every helper is defined once in the library and in each
// script's EVAL source, after the helpers it includes, and no include line is left.
func TestLibraryIncludesOnce(t *testing.T) {
	lib, err := NewLibrary("delaybridge", Scripts)
	if err != nil {
		t.Fatal(err)
	}
	sources := map[string]string{"library": lib.Code}
	for _, s := range Scripts {
		sources[s] = lib.Eval(s)
	}
	for name, src := range sources {
		if strings.Contains(src, "--- @include") {
			t.Fatalf("%s keeps an include line", name)
		}
		if n := strings.Count(src, "\nlocal function cstart("); name != "browse" && name != "library" && n > 1 {
			t.Fatalf("%s defines cstart %d times", name, n)
		}
	}
	if n := strings.Count(lib.Code, "\nlocal function cstart("); n != 1 {
		t.Fatalf("the library defines cstart %d times", n)
	}
	// cold.lua includes counts.lua: counts comes first wherever cold is.
	park := lib.Eval("park")
	if strings.Index(park, "local function cstart(") > strings.Index(park, "local function costart(") {
		t.Fatal("park: cold.lua before the counts.lua it includes")
	}
	if !strings.HasSuffix(park, "return park(KEYS, ARGV)\n") {
		t.Fatalf("park's EVAL source does not end in its call: %q", park[len(park)-40:])
	}
	// ordered_park calls park: both functions, park first.
	op := lib.Eval("ordered_park")
	if i, j := strings.Index(op, "local function park("), strings.Index(op, "local function ordered_park("); i < 0 || j < i {
		t.Fatalf("ordered_park: park at %d, ordered_park at %d", i, j)
	}
}

// TestLibraryNamedByHash: the library's and its functions' names carry the hash of its
// code, so two builds with different scripts never call each other's functions.
func TestLibraryNamedByHash(t *testing.T) {
	a, err := NewLibrary("delaybridge", Scripts)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewLibrary("delaybridge", Scripts[:len(Scripts)-1])
	if err != nil {
		t.Fatal(err)
	}
	if a.Name == b.Name || a.Function("park") == b.Function("park") {
		t.Fatalf("different code, same names: %s %s, %s %s", a.Name, b.Name, a.Function("park"), b.Function("park"))
	}
	h := strings.TrimPrefix(a.Name, "delaybridge_")
	if !strings.HasPrefix(a.Code, "#!lua name="+a.Name+"\n") || a.Function("park") != "park_"+h {
		t.Fatalf("library %s, function %s", a.Name, a.Function("park"))
	}
	if c, _ := NewLibrary("delaybridge", Scripts); c.Code != a.Code {
		t.Fatal("the same scripts assemble differently")
	}
}

// TestLoaderRefusesCycles: an include cycle is an error, not a loop.
func TestLoaderRefusesCycles(t *testing.T) {
	l := newLoader([]string{"a"})
	l.units["a"] = &unit{name: "a", deps: []string{"b"}, script: true}
	l.units["b"] = &unit{name: "b", deps: []string{"a"}}
	if _, err := l.assemble("a"); err == nil || !strings.Contains(err.Error(), "cycle") {
		t.Fatalf("assemble of a cycle: %v", err)
	}
	if _, err := NewLibrary("x", []string{"no_such_script"}); err == nil {
		t.Fatal("a missing script loaded")
	}
}
