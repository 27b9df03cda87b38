package lua

import (
	"strings"
	"testing"

	glua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/ast"
	"github.com/yuin/gopher-lua/parse"
)

// luaGlobals are the globals the scripts may read: Redis's API and Lua's libraries.
var luaGlobals = map[string]bool{
	"redis": true, "string": true, "table": true, "math": true, "tonumber": true,
	"tostring": true, "unpack": true, "ipairs": true, "pairs": true, "type": true,
	"error": true, "pcall": true, "select": true, "next": true,
}

// TestLibraryKeepsNoState: a library's top level lives as long as the library, across
// every call, so it holds only functions and constants (numbers and strings): a table
// there would carry one call's state into the next. Per-call state is a table a script
// makes and passes to the helpers. And no code reads or writes a global other than
// Redis's API and Lua's own (Redis refuses both in a function).
func TestLibraryKeepsNoState(t *testing.T) {
	lib, err := NewLibrary("delaybridge", Scripts)
	if err != nil {
		t.Fatal(err)
	}
	code := lib.Code[strings.IndexByte(lib.Code, '\n')+1:] // the "#!lua" line is Redis's
	chunk, err := parse.Parse(strings.NewReader(code), "library")
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	for _, st := range chunk {
		switch st := st.(type) {
		case *ast.LocalAssignStmt:
			for i, e := range st.Exprs {
				switch e.(type) {
				case *ast.FunctionExpr, *ast.NumberExpr, *ast.StringExpr:
				default:
					t.Errorf("line %d: the library's top level keeps %s (%T): state across calls", st.Line(), st.Names[i], e)
				}
			}
		case *ast.FuncCallStmt: // redis.register_function
		default:
			t.Errorf("line %d: %T at the library's top level", st.Line(), st)
		}
	}
	proto, err := glua.Compile(chunk, "library")
	if err != nil {
		t.Fatalf("compile: %v", err)
	}
	checkGlobals(t, proto)
}

func checkGlobals(t *testing.T, p *glua.FunctionProto) {
	for pc, inst := range p.Code {
		op := int(inst >> 26)
		if op != glua.OP_GETGLOBAL && op != glua.OP_SETGLOBAL {
			continue
		}
		name := p.Constants[inst&0x3ffff].String()
		if op == glua.OP_SETGLOBAL || !luaGlobals[name] {
			t.Errorf("line %d: global %q", p.DbgSourcePositions[pc], name)
		}
	}
	for _, c := range p.FunctionPrototypes {
		checkGlobals(t, c)
	}
}
