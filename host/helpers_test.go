package host

import "github.com/compactd/compactd/internal/policyconfig"

func policyLayer(v map[string]any) policyconfig.Layer {
	return policyconfig.Layer{Source: "test", Values: v}
}
