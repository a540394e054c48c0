package cli

import (
	"github.com/compactd/compactd/internal/config"
	"github.com/compactd/compactd/policyconfig"
)

// envConfig is the one-shot CLI's config source: environment defaults only
// (the daemon adds its config file above them).
type envConfig struct {
	getenv func(string) string
}

func (e envConfig) Layers(policy string) []policyconfig.Layer {
	if l := config.EnvLayer(policy, e.getenv); l != nil {
		return []policyconfig.Layer{*l}
	}
	return nil
}
