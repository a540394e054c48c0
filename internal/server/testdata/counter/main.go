// Command counter is a stateful test policy for the daemon's tests: it
// keeps the conversation unchanged and counts its calls per conversation
// in the ABI's state ({"calls": n}), reporting "call n" as its summary. A
// daemon that loses state across a restart starts counting again at 1.
package main

import (
	"encoding/json"
	"strconv"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/pdk"
)

func init() {
	pdk.Register(pdk.Policy{
		Name:         "counter",
		Version:      "1.0.0",
		Description:  "Counts its calls per conversation in the plugin state (a test policy).",
		ConfigSchema: `{"type":"object","properties":{"step":{"type":"integer","minimum":1}},"additionalProperties":false}`,
		Defaults:     map[string]int{"step": 1},
		Compact:      compact,
	})
}

func main() {}

func compact(_ pdk.Host, req *abi.CompactRequest) (*abi.CompactResult, error) {
	var cfg struct {
		Step int `json:"step"`
	}
	if err := req.DecodeConfig(&cfg); err != nil {
		return nil, err
	}
	var st struct {
		Calls int `json:"calls"`
	}
	if len(req.Context.State) > 0 {
		if err := json.Unmarshal(req.Context.State, &st); err != nil {
			return nil, &abi.Error{Code: abi.CodeInvalidRequest, Message: "state: " + err.Error()}
		}
	}
	st.Calls += cfg.Step
	res := abi.Unchanged(len(req.Messages), "call "+strconv.Itoa(st.Calls))
	res.State, _ = json.Marshal(st)
	return res, nil
}
