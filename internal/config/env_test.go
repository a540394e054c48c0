package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/compactd/compactd/policyconfig"
)

func getenv(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestEnvLayer(t *testing.T) {
	tests := []struct {
		name   string
		policy string
		env    map[string]string
		want   map[string]any // nil: no layer
	}{
		{"nothing set", "recap", nil, nil},
		{"empty values set nothing", "recap", map[string]string{"LLM_COMPACTION_BATCH_SIZE": "", "LLM_COMPACTION_ENABLED": "  "}, nil},
		{"all three", "recap", map[string]string{
			"LLM_COMPACTION_ENABLED":                          "false",
			"LLM_COMPACTION_MIN_PRESERVED_ASSISTANT_MESSAGES": "5",
			"LLM_COMPACTION_BATCH_SIZE":                       "2",
		}, map[string]any{"enabled": false, "min_preserved_assistant_messages": int64(5), "batch_size": int64(2)}},
		{"booleans in any case", "recap", map[string]string{"LLM_COMPACTION_ENABLED": "TRUE"}, map[string]any{"enabled": true}},
		{"Playbooks' False", "recap", map[string]string{"LLM_COMPACTION_ENABLED": "False"}, map[string]any{"enabled": false}},
		{"white space", "recap", map[string]string{"LLM_COMPACTION_BATCH_SIZE": " 4\n"}, map[string]any{"batch_size": int64(4)}},
		{"not a boolean: passed on for the schema to reject", "recap", map[string]string{"LLM_COMPACTION_ENABLED": "yes"}, map[string]any{"enabled": "yes"}},
		{"not an integer: passed on", "recap", map[string]string{"LLM_COMPACTION_BATCH_SIZE": "4.5"}, map[string]any{"batch_size": "4.5"}},
		{"other policies get nothing", "sliding", map[string]string{"LLM_COMPACTION_BATCH_SIZE": "2"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := EnvLayer(tt.policy, getenv(tt.env))
			if tt.want == nil {
				if l != nil {
					t.Fatalf("layer %+v, want none", l)
				}
				return
			}
			if l == nil || l.Source != "environment" || !reflect.DeepEqual(l.Values, tt.want) {
				t.Fatalf("layer %+v, want %v", l, tt.want)
			}
		})
	}
}

func TestCheckEnv(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want string // "" for no error, else a substring
	}{
		{"nothing set", nil, ""},
		{"valid", map[string]string{"LLM_COMPACTION_ENABLED": "True", "LLM_COMPACTION_BATCH_SIZE": "3"}, ""},
		{"bad boolean", map[string]string{"LLM_COMPACTION_ENABLED": "1"}, `LLM_COMPACTION_ENABLED="1": want true or false (it sets recap's enabled)`},
		{"bad integer", map[string]string{"LLM_COMPACTION_MIN_PRESERVED_ASSISTANT_MESSAGES": "three"}, `LLM_COMPACTION_MIN_PRESERVED_ASSISTANT_MESSAGES="three": want an integer`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckEnv(getenv(tt.env))
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalidEnv) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
}

func TestEnvVarNames(t *testing.T) {
	got := fmt.Sprint(EnvVarNames())
	if want := "[LLM_COMPACTION_BATCH_SIZE LLM_COMPACTION_ENABLED LLM_COMPACTION_MIN_PRESERVED_ASSISTANT_MESSAGES]"; got != want {
		t.Fatalf("got %s", got)
	}
}

// recapSchema is plugins/recap's config schema and defaults (the plugin is
// a main package; compactor's tests run the real one with these variables).
const recapSchema = `{"type":"object","properties":{
  "enabled":{"type":"boolean"},
  "min_preserved_assistant_messages":{"type":"integer","minimum":1},
  "batch_size":{"type":"integer","minimum":1}},"additionalProperties":false}`

const recapDefaults = `{"enabled":true,"min_preserved_assistant_messages":3,"batch_size":4}`

// TestEnvPrecedence resolves recap's config from its defaults, the
// environment, a config file layer and a request override: each higher
// layer wins key by key, and a bad environment value is an invalid config.
func TestEnvPrecedence(t *testing.T) {
	schema, err := policyconfig.Compile("recap", json.RawMessage(recapSchema), json.RawMessage(recapDefaults))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"LLM_COMPACTION_BATCH_SIZE": "2", "LLM_COMPACTION_MIN_PRESERVED_ASSISTANT_MESSAGES": "5", "LLM_COMPACTION_ENABLED": "FALSE"}
	file := policyconfig.Layer{Source: "config file", Values: map[string]any{"batch_size": 6, "min_preserved_assistant_messages": 7}}
	request := policyconfig.Layer{Source: "request", Values: map[string]any{"batch_size": 8}}
	tests := []struct {
		name   string
		layers []policyconfig.Layer
		want   string
	}{
		{"defaults", nil, `{"batch_size":4,"enabled":true,"min_preserved_assistant_messages":3}`},
		{"environment over defaults", []policyconfig.Layer{*EnvLayer("recap", getenv(env))}, `{"batch_size":2,"enabled":false,"min_preserved_assistant_messages":5}`},
		{"config file over environment", []policyconfig.Layer{*EnvLayer("recap", getenv(env)), file}, `{"batch_size":6,"enabled":false,"min_preserved_assistant_messages":7}`},
		{"request over config file", []policyconfig.Layer{*EnvLayer("recap", getenv(env)), file, request}, `{"batch_size":8,"enabled":false,"min_preserved_assistant_messages":7}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := schema.Resolve(tt.layers...)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.want {
				t.Fatalf("got  %s\nwant %s", got, tt.want)
			}
		})
	}
	for _, bad := range []map[string]string{{"LLM_COMPACTION_ENABLED": "yes"}, {"LLM_COMPACTION_BATCH_SIZE": "0"}, {"LLM_COMPACTION_BATCH_SIZE": "many"}} {
		if _, err := schema.Resolve(*EnvLayer("recap", getenv(bad))); !errors.Is(err, policyconfig.ErrInvalid) {
			t.Errorf("%v: err = %v", bad, err)
		}
	}
}
