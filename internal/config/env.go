package config

import (
	"sort"

	"github.com/compactd/compactd/internal/policyconfig"
)

// envVar maps an environment variable to a policy's config key.
type envVar struct {
	name, policy, key string
}

// envVars are the environment variables compactd reads as config defaults.
// They sit above a plugin's own defaults and below the config file and the
// request (README.md, "Configuration precedence"). The LLM_COMPACTION_*
// names are the Playbooks framework's, so its users' settings carry over.
var envVars = []envVar{
	{"LLM_COMPACTION_ENABLED", "recap", "enabled"},
	{"LLM_COMPACTION_MIN_PRESERVED_ASSISTANT_MESSAGES", "recap", "min_preserved_assistant_messages"},
	{"LLM_COMPACTION_BATCH_SIZE", "recap", "batch_size"},
}

// EnvLayer returns the config values the environment sets for policy, or
// nil when it sets none. Values are parsed like --set values (JSON when
// they parse as JSON, else strings), so "true" and "4" have their types.
func EnvLayer(policy string, getenv func(string) string) *policyconfig.Layer {
	values := map[string]any{}
	for _, v := range envVars {
		if v.policy != policy {
			continue
		}
		if s := getenv(v.name); s != "" {
			values[v.key] = policyconfig.ParseValue(s)
		}
	}
	if len(values) == 0 {
		return nil
	}
	return &policyconfig.Layer{Source: "environment", Values: values}
}

// EnvVarNames lists the environment variables EnvLayer reads, sorted.
func EnvVarNames() []string {
	names := make([]string, 0, len(envVars))
	for _, v := range envVars {
		names = append(names, v.name)
	}
	sort.Strings(names)
	return names
}
