package archtest

import (
	"go/types"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"golang.org/x/tools/go/packages"
)

// vocabulary are the internal leaf packages whose types the product's public packages
// may name in their exported API: the message (envelope), time (clock), and the
// observer interface (observe) are the shared words every layer speaks, and keeping
// them in internal/ keeps them out of reach of other modules on purpose (the module is
// an application; its packages are not a library). Any other internal type in an
// exported signature of a public package is a leak: an adapter's configuration must be
// its own struct, and a broker helper stays behind the adapter that uses it.
var vocabulary = map[string]bool{
	module + "/internal/envelope": true,
	module + "/internal/clock":    true,
	module + "/internal/observe":  true,
	module + "/internal/fault":    true,
}

// TestExportedAPINamesNoInternalType walks every exported declaration of every public
// package (not under internal/, not main, not tests) — functions, methods, struct
// fields, interface methods — and fails on a type from an internal package outside the
// vocabulary.
func TestExportedAPINamesNoInternalType(t *testing.T) {
	cfg := &packages.Config{Mode: packages.NeedName | packages.NeedTypes, Dir: filepath.Join("..", "..")}
	pkgs, err := packages.Load(cfg, "./...")
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 20 {
		t.Fatalf("loaded only %d packages", len(pkgs))
	}
	leaks := map[string]bool{}
	checked := 0
	for _, p := range pkgs {
		if len(p.Errors) > 0 {
			t.Fatalf("%s: %v", p.PkgPath, p.Errors)
		}
		if isInternal(p.PkgPath) || p.Name == "main" || strings.HasSuffix(p.PkgPath, "/e2e") {
			continue
		}
		sc := p.Types.Scope()
		for _, name := range sc.Names() {
			if o := sc.Lookup(name); o.Exported() {
				checked++
				w := walker{seen: map[types.Type]bool{}, leaks: leaks}
				w.walk(strings.TrimPrefix(p.PkgPath, module+"/")+"."+name, o.Type(), true)
			}
		}
	}
	if checked < 100 {
		t.Fatalf("checked only %d exported names: the walk is not seeing the API", checked)
	}
	var out []string
	for l := range leaks {
		out = append(out, l)
	}
	sort.Strings(out)
	for _, l := range out {
		t.Errorf("exported API names an internal type: %s", l)
	}
}

func isInternal(path string) bool {
	return strings.Contains(path+"/", "/internal/")
}

type walker struct {
	seen  map[types.Type]bool
	leaks map[string]bool
}

func (w walker) walk(where string, t types.Type, top bool) {
	switch t := t.(type) {
	case *types.Alias:
		w.walk(where, types.Unalias(t), top)
	case *types.Named:
		obj := t.Obj()
		if obj.Pkg() != nil && isInternal(obj.Pkg().Path()) && !vocabulary[obj.Pkg().Path()] {
			w.leaks[where+" → "+strings.TrimPrefix(obj.Pkg().Path(), module+"/")+"."+obj.Name()] = true
			return
		}
		if !top || w.seen[t] {
			return
		}
		w.seen[t] = true
		w.members(where, t)
	case *types.Pointer:
		w.walk(where, t.Elem(), false)
	case *types.Slice:
		w.walk(where, t.Elem(), false)
	case *types.Array:
		w.walk(where, t.Elem(), false)
	case *types.Map:
		w.walk(where, t.Key(), false)
		w.walk(where, t.Elem(), false)
	case *types.Chan:
		w.walk(where, t.Elem(), false)
	case *types.Signature:
		for i := 0; i < t.Params().Len(); i++ {
			w.walk(where, t.Params().At(i).Type(), false)
		}
		for i := 0; i < t.Results().Len(); i++ {
			w.walk(where, t.Results().At(i).Type(), false)
		}
	case *types.Struct:
		for i := 0; i < t.NumFields(); i++ {
			if f := t.Field(i); f.Exported() {
				w.walk(where+"."+f.Name(), f.Type(), false)
			}
		}
	case *types.Interface:
		for i := 0; i < t.NumMethods(); i++ {
			w.walk(where+"."+t.Method(i).Name(), t.Method(i).Type(), false)
		}
	}
}

// members walks what a declared type exposes: its fields or interface methods, and its
// exported methods.
func (w walker) members(where string, t *types.Named) {
	switch u := t.Underlying().(type) {
	case *types.Struct, *types.Interface:
		w.walk(where, u, false)
	}
	ms := types.NewMethodSet(types.NewPointer(t))
	for i := 0; i < ms.Len(); i++ {
		if m := ms.At(i).Obj(); m.Exported() {
			w.walk(where+"."+m.Name(), m.Type(), false)
		}
	}
}
