package archtest

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// TestEveryTestPackageChecksForLeaks: every goroutine has an owner and a stop, and the
// suite holds it by failing a package whose tests leave one running. docs/ARCHITECTURE.md
// says so ("Goroutine ownership"); this keeps the sentence true. A package's TestMain
// must call goleak (VerifyTestMain, or Find after m.Run).
func TestEveryTestPackageChecksForLeaks(t *testing.T) {
	type dir struct{ tests, leak bool }
	dirs := map[string]*dir{}
	err := filepath.WalkDir(repoRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, p)
		if d.IsDir() {
			if n := d.Name(); p != repoRoot && (strings.HasPrefix(n, ".") || n == "testdata" || rel == "bench") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		k := filepath.Dir(rel)
		if dirs[k] == nil {
			dirs[k] = &dir{}
		}
		dirs[k].tests = true
		src := string(b)
		if strings.Contains(src, "func TestMain(") && (strings.Contains(src, "goleak.VerifyTestMain(") || strings.Contains(src, "goleak.Find(")) {
			dirs[k].leak = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 30 {
		t.Fatalf("found only %d test packages from %s", len(dirs), repoRoot)
	}
	var missing []string
	for k, d := range dirs {
		if d.tests && !d.leak {
			missing = append(missing, k)
		}
	}
	sort.Strings(missing)
	for _, k := range missing {
		t.Errorf("%s: no TestMain with goleak: add func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }", k)
	}
}
