package testkit

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ReceiptSchema compiles docs/receipt.schema.json (formats asserted) and returns a
// validator of one receipt's JSON.
func ReceiptSchema(t testing.TB) func(payload []byte) error {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	path := filepath.Join(filepath.Dir(file), "..", "docs", "receipt.schema.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("testkit: read the receipt schema: %v", err)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("testkit: parse %s: %v", path, err)
	}
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	if err := c.AddResource("receipt.schema.json", doc); err != nil {
		t.Fatalf("testkit: %v", err)
	}
	sch, err := c.Compile("receipt.schema.json")
	if err != nil {
		t.Fatalf("testkit: compile %s: %v", path, err)
	}
	return func(payload []byte) error {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
		if err != nil {
			return err
		}
		return sch.Validate(v)
	}
}
