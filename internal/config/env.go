package config

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/compactd/compactd/policyconfig"
)

// ErrInvalidEnv is wrapped by CheckEnv's errors.
var ErrInvalidEnv = errors.New("invalid environment variable")

// envKind is the type of an environment variable's value.
type envKind int

const (
	envBool envKind = iota // true or false, in any case
	envInt                 // a decimal integer
)

// envVar maps an environment variable to a policy's config key.
type envVar struct {
	name, policy, key string
	kind              envKind
}

// envVars are the environment variables compactd reads as config defaults.
// They sit above a plugin's own defaults and below the config file and the
// request (docs/configuration.md, "A policy's config"). The LLM_COMPACTION_*
// names are the Playbooks framework's, so its users' settings carry over
// (plugins/recap/README.md).
var envVars = []envVar{
	{"LLM_COMPACTION_ENABLED", "recap", "enabled", envBool},
	{"LLM_COMPACTION_MIN_PRESERVED_ASSISTANT_MESSAGES", "recap", "min_preserved_assistant_messages", envInt},
	{"LLM_COMPACTION_BATCH_SIZE", "recap", "batch_size", envInt},
}

// EnvLayer returns the config values the environment sets for policy, or
// nil when it sets none. An unset or empty variable sets nothing. Boolean
// variables accept true and false in any case (Playbooks compares the
// lower-cased value with "true"), integers a decimal number; surrounding
// white space is ignored. A value that is neither is passed on as a
// string, so the policy's schema rejects it as an invalid config instead
// of it silently meaning a default (CheckEnv names the variable).
func EnvLayer(policy string, getenv func(string) string) *policyconfig.Layer {
	values := map[string]any{}
	for _, v := range envVars {
		if v.policy != policy {
			continue
		}
		s := strings.TrimSpace(getenv(v.name))
		if s == "" {
			continue
		}
		parsed, _ := v.parse(s)
		values[v.key] = parsed
	}
	if len(values) == 0 {
		return nil
	}
	return &policyconfig.Layer{Source: "environment", Values: values}
}

// parse returns the typed value of s, or s itself and false when it is
// not of the variable's type.
func (v envVar) parse(s string) (any, bool) {
	switch v.kind {
	case envBool:
		switch strings.ToLower(s) {
		case "true":
			return true, true
		case "false":
			return false, true
		}
	case envInt:
		if n, err := strconv.ParseInt(s, 10, 64); err == nil {
			return n, true
		}
	}
	return s, false
}

// CheckEnv reports the first environment variable EnvLayer reads whose
// value is not of its type, naming it; nil when all are unset or valid.
// Commands call it at startup so a typo fails early with the variable's
// name rather than later as a policy's invalid config. (Ranges, such as
// batch_size >= 1, are the policy schema's to check.)
func CheckEnv(getenv func(string) string) error {
	for _, v := range envVars {
		s := strings.TrimSpace(getenv(v.name))
		if s == "" {
			continue
		}
		if _, ok := v.parse(s); !ok {
			want := "true or false"
			if v.kind == envInt {
				want = "an integer"
			}
			return fmt.Errorf("%w %s=%q: want %s (it sets %s's %s)", ErrInvalidEnv, v.name, s, want, v.policy, v.key)
		}
	}
	return nil
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
