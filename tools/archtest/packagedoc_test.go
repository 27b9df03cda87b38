package archtest

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestEveryPackageHasADocComment: a newcomer's first question about a folder is what it
// is for, and `go doc` answers it from the package comment. Every package of the
// repository (bench/ included) has one, "// Package <name> ..." ("// Command <name> ..."
// for a main package), in a non-test file; a package made only of tests has it in one of
// its test files.
func TestEveryPackageHasADocComment(t *testing.T) {
	fset := token.NewFileSet()
	type pkg struct {
		name     string
		docs     []string // package comments of non-test files
		testDocs []string // package comments of test files
	}
	pkgs := map[string]*pkg{}
	err := walkGoFiles(repoRoot, func(p string) error {
		f, err := parser.ParseFile(fset, p, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		dir, _ := filepath.Rel(repoRoot, filepath.Dir(p))
		name := strings.TrimSuffix(f.Name.Name, "_test")
		k := pkgs[dir]
		if k == nil {
			k = &pkg{}
			pkgs[dir] = k
		}
		test := strings.HasSuffix(p, "_test.go")
		if !test || k.name == "" {
			k.name = name
		}
		if f.Doc != nil {
			if test {
				k.testDocs = append(k.testDocs, f.Doc.Text())
			} else {
				k.docs = append(k.docs, f.Doc.Text())
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 30 {
		t.Fatalf("found only %d packages from %s", len(pkgs), repoRoot)
	}
	dirs := make([]string, 0, len(pkgs))
	for d := range pkgs {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	for _, dir := range dirs {
		k := pkgs[dir]
		docs := k.docs
		if len(docs) == 0 {
			docs = k.testDocs
		}
		if len(docs) == 0 {
			t.Errorf("%s: package %s has no doc comment: add \"// Package %s ...\" saying what it is for", dir, k.name, k.name)
			continue
		}
		want := "Package " + k.name + " "
		if k.name == "main" {
			want = "Command "
		}
		ok := false
		for _, d := range docs {
			ok = ok || strings.HasPrefix(d, want)
		}
		if !ok {
			t.Errorf("%s: the package comment does not start with %q: %q", dir, want, firstLine(docs[0]))
		}
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}
