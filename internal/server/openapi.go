package server

import (
	"net/http"

	"github.com/compactd/compactd/api"
)

// routeOpenAPI serves the API's OpenAPI document (api/openapi.yaml) as
// written and as JSON.
func (s *Server) routeOpenAPI() {
	spec := api.YAML()
	specJSON, err := api.JSON()
	s.route("/v1/openapi.yaml", "openapi", map[string]handlerFunc{http.MethodGet: func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "application/yaml")
		w.WriteHeader(http.StatusOK)
		w.Write(spec)
		return nil
	}})
	s.route("/v1/openapi.json", "openapi", map[string]handlerFunc{http.MethodGet: func(w http.ResponseWriter, r *http.Request) error {
		if err != nil {
			return err // the embedded document is checked by the tests; never expected
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		w.Write(specJSON)
		return nil
	}})
}
