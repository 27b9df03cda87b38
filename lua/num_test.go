package lua

import (
	"reflect"
	"strings"
	"testing"

	"github.com/yuin/gopher-lua/ast"
	"github.com/yuin/gopher-lua/parse"
)

// TestScriptsPassNumbersAsText: Redis 7.0 formats every Lua number handed to
// redis.call with snprintf("%.17g") (num.lua), so no call gets a number literal: it is
// written as text ('0').
func TestScriptsPassNumbersAsText(t *testing.T) {
	lib, err := NewLibrary("delaybridge", Scripts)
	if err != nil {
		t.Fatal(err)
	}
	code := lib.Code[strings.IndexByte(lib.Code, '\n')+1:]
	chunk, err := parse.Parse(strings.NewReader(code), "library")
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	calls := 0
	eachCall(reflect.ValueOf(chunk), func(c *ast.FuncCallExpr) {
		get, ok := c.Func.(*ast.AttrGetExpr)
		if !ok {
			return
		}
		obj, ok1 := get.Object.(*ast.IdentExpr)
		key, ok2 := get.Key.(*ast.StringExpr)
		if !ok1 || !ok2 || obj.Value != "redis" || (key.Value != "call" && key.Value != "pcall") {
			return
		}
		calls++
		for i, a := range c.Args {
			if n, ok := a.(*ast.NumberExpr); ok {
				t.Errorf("library line %d: redis.%s argument %d is the number %s (write it as text)", c.Line(), key.Value, i+1, n.Value)
			}
		}
	})
	if calls < 100 {
		t.Fatalf("found %d redis.call sites, want the library's (the walk is broken)", calls)
	}
}

// eachCall calls f for every function call in the syntax tree under v.
func eachCall(v reflect.Value, f func(*ast.FuncCallExpr)) {
	switch v.Kind() {
	case reflect.Interface:
		if !v.IsNil() {
			eachCall(v.Elem(), f)
		}
	case reflect.Pointer:
		if v.IsNil() {
			return
		}
		if c, ok := v.Interface().(*ast.FuncCallExpr); ok {
			f(c)
		}
		eachCall(v.Elem(), f)
	case reflect.Slice:
		for i := 0; i < v.Len(); i++ {
			eachCall(v.Index(i), f)
		}
	case reflect.Struct:
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				eachCall(v.Field(i), f)
			}
		}
	}
}
