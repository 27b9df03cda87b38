// Command chartgen writes the generated parts of the Helm chart in charts/delay-bridge:
//
//   - values.schema.json's properties.config, from the Go configuration struct
//     (config.Config) plus the enums and bounds config.Validate enforces, so that helm
//     refuses a misspelled or mistyped config.* value before anything is installed;
//   - README.md's values table, from values.yaml and its comments.
//
// Run it after changing the config package or values.yaml:
//
//	go run ./tools/chartgen
//
// Its test fails while either file differs from what it would write.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
)

// Generate returns the new contents of values.schema.json and README.md in chartDir.
func Generate(chartDir string) (schema, readme []byte, err error) {
	cur, err := os.ReadFile(filepath.Join(chartDir, "values.schema.json"))
	if err != nil {
		return nil, nil, err
	}
	if schema, err = ValuesSchema(cur); err != nil {
		return nil, nil, err
	}
	values, err := os.ReadFile(filepath.Join(chartDir, "values.yaml"))
	if err != nil {
		return nil, nil, err
	}
	table, err := ValuesTable(values)
	if err != nil {
		return nil, nil, err
	}
	rd, err := os.ReadFile(filepath.Join(chartDir, "README.md"))
	if err != nil {
		return nil, nil, err
	}
	if readme, err = WithValuesTable(rd, table); err != nil {
		return nil, nil, err
	}
	return schema, readme, nil
}

func main() {
	chart := flag.String("chart", "charts/delay-bridge", "chart directory")
	flag.Parse()
	schema, readme, err := Generate(*chart)
	if err == nil {
		err = os.WriteFile(filepath.Join(*chart, "values.schema.json"), schema, 0o644)
	}
	if err == nil {
		err = os.WriteFile(filepath.Join(*chart, "README.md"), readme, 0o644)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
