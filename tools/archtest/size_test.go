package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Size limits for the module's non-test Go files (bench/ is its own module).
const (
	maxFileLines = 620
	maxFuncLines = 80
)

// longFuncs are the functions allowed over maxFuncLines, each with its reason: tables,
// where splitting would scatter one decision over several places.
var longFuncs = map[string]string{
	"internal/envelope/codec.go value": "one case per header value type of the binary format: the decoder's table",
}

func TestFileAndFunctionSizes(t *testing.T) {
	root := filepath.Join("..", "..")
	fset := token.NewFileSet()
	files := 0
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if rel == "bench" || rel == ".git" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		files++
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		if n := fset.Position(f.End()).Line; n > maxFileLines {
			t.Errorf("%s: %d lines, limit %d: split it by job", rel, n, maxFileLines)
		}
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			key := filepath.ToSlash(rel) + " " + fd.Name.Name
			if _, allowed := longFuncs[key]; n > maxFuncLines && !allowed {
				t.Errorf("%s: %d lines, limit %d", key, n, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("walked only %d Go files from %s: not the module root?", files, root)
	}
}
