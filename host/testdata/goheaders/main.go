// Command goheaders is a test plugin for the header view (ABI 1.1): it
// declares view "headers", so the host sends no content, and reads the
// contents its config names through the host (message_content_into on
// the fast path, message_content on the Extism path). Its summary lists
// what it read, as "index:kind:size:text" items joined with "|", so a
// test can check every content arrived intact and only when read.
package main

import (
	"fmt"
	"strings"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/pdk"
)

func init() {
	pdk.Register(pdk.Policy{
		Name:         "goheaders",
		Version:      "0.0.1",
		Description:  "Reads the contents its config names through the host; see host/testdata.",
		ConfigSchema: `{"type":"object","properties":{"read":{"type":"array","items":{"type":"integer"}}},"additionalProperties":false}`,
		Defaults:     map[string]any{"read": []int{}},
		View:         abi.ViewHeaders,
		Compact:      compact,
	})
}

func main() {}

func compact(h pdk.Host, req *abi.CompactRequest) (*abi.CompactResult, error) {
	var cfg struct {
		Read []int `json:"read"`
	}
	if err := req.DecodeConfig(&cfg); err != nil {
		return nil, err
	}
	var out []string
	for i, m := range req.Messages {
		if !m.Content.IsNull() && m.Content.Omitted() == "" {
			return nil, fmt.Errorf("message %d: content sent in a header view", i)
		}
	}
	for _, i := range cfg.Read {
		if i < 0 || i >= len(req.Messages) {
			return nil, fmt.Errorf("no message %d", i)
		}
		m := req.Messages[i]
		size := m.Content.Len()
		kind := m.Content.Omitted()
		text := m.Text()
		if kind == abi.OmittedText && len(text) != size {
			return nil, fmt.Errorf("message %d: %d bytes read, the header said %d", i, len(text), size)
		}
		if kind == abi.OmittedParts && len(m.Content.Raw()) != size {
			return nil, fmt.Errorf("message %d: %d bytes of JSON read, the header said %d", i, len(m.Content.Raw()), size)
		}
		out = append(out, fmt.Sprintf("%d:%s:%d:%s", i, kind, size, text))
	}
	res := abi.Unchanged(len(req.Messages), strings.Join(out, "|"))
	return res, nil
}
