package pdk_test

import (
	"encoding/json"
	"fmt"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/convo"
	"github.com/compactd/compactd/pdk"
)

// A policy is a plain Go function over abi types. This one keeps the
// system messages and the last two units; in a plugin, main.go would call
// pdk.Register(keepTail) from an init function.
var keepTail = pdk.Policy{
	Name:         "keep-tail",
	Version:      "0.1.0",
	Description:  "Keeps the system messages and the last two units.",
	ConfigSchema: `{"type":"object","properties":{"units":{"type":"integer","minimum":1}},"additionalProperties":false}`,
	Defaults:     map[string]int{"units": 2},
	Compact: func(h pdk.Host, req *abi.CompactRequest) (*abi.CompactResult, error) {
		cfg := struct {
			Units int `json:"units"`
		}{Units: 2}
		if err := req.DecodeConfig(&cfg); err != nil {
			return nil, err
		}
		lead := convo.LeadingSystem(req.Messages)
		units := convo.Units(req.Messages)
		if len(units)-lead <= cfg.Units {
			return abi.Unchanged(len(req.Messages), "short enough"), nil
		}
		keep := units[len(units)-cfg.Units].Start
		var items []abi.Item
		for i := 0; i < lead; i++ {
			items = append(items, abi.Ref(i))
		}
		for i := keep; i < len(req.Messages); i++ {
			items = append(items, abi.Ref(i))
		}
		h.Log(pdk.LevelInfo, fmt.Sprintf("dropped %d messages", keep-lead))
		return &abi.CompactResult{Messages: items, Compacted: true, Summary: "kept the tail"}, nil
	},
}

// Example runs a policy natively, through the same JSON the Wasm export
// reads and writes, and checks its result as the host would.
func Example() {
	req := `{"abi":"1.0","config":{"units":2},"context":{"total_tokens":40},"messages":[
	  {"role":"system","content":"Be brief.","tokens":5},
	  {"role":"user","content":"Book a flight.","tokens":5},
	  {"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"search","arguments":"{}"}}],"tokens":10},
	  {"role":"tool","tool_call_id":"c1","content":"[HAT001]","tokens":10},
	  {"role":"assistant","content":"HAT001 it is.","tokens":5},
	  {"role":"user","content":"Thanks!","tokens":5}]}`
	host := &pdk.TestHost{}
	out, err := pdk.Call(&keepTail, host, abi.ExportCompact, []byte(req))
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(string(out))

	var parsed abi.CompactRequest
	_ = json.Unmarshal([]byte(req), &parsed)
	var res abi.CompactResult
	_ = json.Unmarshal(out, &res)
	fmt.Println("valid:", convo.CheckResult(parsed.Messages, res.Messages) == nil)
	fmt.Println(host.Logs())
	// Output:
	// {"messages":[{"ref":0},{"ref":4},{"ref":5}],"compacted":true,"summary":"kept the tail"}
	// valid: true
	// [1 dropped 3 messages]
}

// ExampleTestHost shows a fake LLM for a policy that summarizes.
func ExampleTestHost() {
	host := &pdk.TestHost{
		LLM: func(req abi.LLMRequest) (abi.LLMResponse, error) {
			return abi.LLMResponse{Text: "<summary>short</summary>", Usage: abi.LLMUsage{InputTokens: 100, OutputTokens: 5}}, nil
		},
	}
	resp, err := host.Complete(abi.LLMRequest{Messages: []abi.LLMMessage{{Role: "user", Content: "long history…"}}})
	fmt.Println(resp.Text, err, host.CountTokens("eight by"))

	var noProvider pdk.TestHost
	_, err = noProvider.Complete(abi.LLMRequest{})
	fmt.Println(err)
	// Output:
	// <summary>short</summary> <nil> 2
	// no_provider: no LLM provider configured
}
