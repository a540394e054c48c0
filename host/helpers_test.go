package host

import "github.com/compactd/compactd/policyconfig"

func policyLayer(v map[string]any) policyconfig.Layer {
	return policyconfig.Layer{Source: "test", Values: v}
}
