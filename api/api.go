// Package api holds compactd's HTTP API description: the OpenAPI 3.1
// document openapi.yaml, the single source of the API's schemas and error
// codes. The daemon serves it (GET /v1/openapi.yaml and /v1/openapi.json),
// the server's tests validate every response against it (package apitest),
// and the Python and TypeScript clients are checked against it.
package api

import (
	_ "embed"
	"encoding/json"
	"fmt"

	"gopkg.in/yaml.v3"
)

//go:embed openapi.yaml
var spec []byte

// YAML returns the OpenAPI document as written. The slice is shared: do
// not modify it.
func YAML() []byte { return spec }

// JSON returns the OpenAPI document converted to JSON.
func JSON() ([]byte, error) {
	var doc any
	if err := yaml.Unmarshal(spec, &doc); err != nil {
		return nil, fmt.Errorf("api: openapi.yaml: %w", err)
	}
	b, err := json.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("api: openapi.yaml as JSON: %w", err)
	}
	return b, nil
}

// ErrorCodes returns the error codes the document defines (the ErrorCode
// schema's enum) with the HTTP status each belongs to (its x-status).
func ErrorCodes() (map[string]int, error) {
	var doc struct {
		Components struct {
			Schemas struct {
				ErrorCode struct {
					Enum   []string       `yaml:"enum"`
					Status map[string]int `yaml:"x-status"`
				} `yaml:"ErrorCode"`
			} `yaml:"schemas"`
		} `yaml:"components"`
	}
	if err := yaml.Unmarshal(spec, &doc); err != nil {
		return nil, fmt.Errorf("api: openapi.yaml: %w", err)
	}
	ec := doc.Components.Schemas.ErrorCode
	out := make(map[string]int, len(ec.Enum))
	for _, code := range ec.Enum {
		status, ok := ec.Status[code]
		if !ok {
			return nil, fmt.Errorf("api: error code %q has no x-status", code)
		}
		out[code] = status
	}
	if len(out) != len(ec.Status) {
		return nil, fmt.Errorf("api: ErrorCode's x-status lists codes its enum does not")
	}
	return out, nil
}
