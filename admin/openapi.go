package admin

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"

	"go.yaml.in/yaml/v3"
)

// openAPIYAML is the OpenAPI 3 description of this API, kept as YAML in the repository
// (easier to review) and served as JSON at /v1/openapi.json.
//
//go:embed openapi/openapi.yaml
var openAPIYAML []byte

// OpenAPI returns the OpenAPI document as JSON.
var OpenAPI = sync.OnceValues(func() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(openAPIYAML, &doc); err != nil {
		return nil, fmt.Errorf("admin: openapi.yaml: %w", err)
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("admin: openapi.yaml to JSON: %w", err)
	}
	return b, nil
})

func handleOpenAPI(w http.ResponseWriter, _ *http.Request) {
	b, err := OpenAPI()
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error(), "")
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache")
	_, _ = w.Write(b)
}
