// Command gohostile is a misbehaving Go plugin for the host's tests: its
// config's "mode" picks the misbehaviour. It runs on the fast path, so the
// host's limits are tested there as well as on the Extism path (see
// ../hostile for the C plugins).
package main

import (
	"os"
	"strings"
	"unsafe"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/facts"
	"github.com/compactd/compactd/idents"
	"github.com/compactd/compactd/pdk"
)

func init() {
	pdk.Register(pdk.Policy{
		Name:         "gohostile",
		Version:      "0.0.1",
		Description:  "Misbehaves on purpose; see README.md in host/testdata.",
		ConfigSchema: `{"type":"object","properties":{"mode":{"type":"string"},"n":{"type":"integer"}},"additionalProperties":false}`,
		Defaults:     map[string]any{"mode": "ok", "n": 0},
		Compact:      compact,
	})
}

func main() {}

var sink [][]byte

func compact(h pdk.Host, req *abi.CompactRequest) (*abi.CompactResult, error) {
	var cfg struct {
		Mode string `json:"mode"`
		N    int    `json:"n"`
	}
	if err := req.DecodeConfig(&cfg); err != nil {
		return nil, err
	}
	n := len(req.Messages)
	switch cfg.Mode {
	case "ok":
		return abi.Unchanged(n, "ok"), nil
	case "loop":
		for i := 0; ; i++ {
			if i < 0 {
				break
			}
		}
	case "alloc":
		for {
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = byte(i)
			}
			sink = append(sink, b)
		}
	case "garbage": // allocates and drops cfg.N MiB per call: GC must keep memory flat
		for i := 0; i < cfg.N; i++ {
			b := make([]byte, 1<<20)
			b[len(b)-1] = 1
		}
		return abi.Unchanged(n, "ok"), nil
	case "huge": // a summary of cfg.N MiB (48 by default)
		size := 48
		if cfg.N > 0 {
			size = cfg.N
		}
		res := abi.Unchanged(n, strings.Repeat("x", size<<20))
		return res, nil
	case "badref":
		return &abi.CompactResult{Messages: []abi.Item{abi.Ref(0), abi.Ref(n + 1000)}, Compacted: true}, nil
	case "reorder":
		items := []abi.Item{}
		for i := n - 1; i >= 0; i-- {
			items = append(items, abi.Ref(i))
		}
		return &abi.CompactResult{Messages: items, Compacted: true}, nil
	case "split":
		for i, m := range req.Messages {
			if m.Role == abi.RoleAssistant && len(m.ToolCalls) > 0 && i+1 < n-1 {
				items := []abi.Item{}
				for j := 0; j < n; j++ {
					if j != i {
						items = append(items, abi.Ref(j))
					}
				}
				return &abi.CompactResult{Messages: items, Compacted: true}, nil
			}
		}
		return &abi.CompactResult{Messages: []abi.Item{abi.New(abi.Message{Role: abi.RoleTool, ToolCallID: "ghost", Content: abi.TextContent("x")}), abi.Ref(n - 1)}, Compacted: true}, nil
	case "dropsystem":
		return &abi.CompactResult{Messages: []abi.Item{abi.Ref(n - 1)}, Compacted: true}, nil
	case "changelast":
		items := []abi.Item{}
		for j := 0; j < n-1; j++ {
			items = append(items, abi.Ref(j))
		}
		items = append(items, abi.New(abi.Message{Role: abi.RoleUser, Content: abi.TextContent("changed")}))
		return &abi.CompactResult{Messages: items, Compacted: true}, nil
	case "panic":
		var m map[string]int
		m["x"] = 1
	case "exit":
		os.Exit(3)
	case "error":
		return nil, &abi.Error{Code: abi.CodeInvalidConfig, Message: "gohostile: refusing"}
	case "idents":
		// Exercises extract_identifiers through the PDK: every message's
		// items, one warning per message, "kind:text" separated by tabs.
		var in []idents.Input
		for _, m := range req.Messages {
			in = append(in, idents.Input{Text: m.Text(), Observed: m.Role == abi.RoleTool || m.Role == abi.RoleUser})
		}
		got, err := h.ExtractIdentifiers(in)
		if err != nil {
			return nil, err
		}
		res := abi.Unchanged(n, "extracted")
		for _, items := range got {
			var b strings.Builder
			for _, it := range items {
				b.WriteString(itoa(int(it.Kind)) + ":" + it.Text + "\t")
			}
			res.Warnings = append(res.Warnings, b.String())
		}
		return res, nil
	case "identsbig":
		// A request block over abi.MaxHostInputBytes: the host must not
		// read it.
		hostExtractIdentifiers(extismAlloc(abi.MaxHostInputBytes + 1))
		return abi.Unchanged(n, "extract_identifiers answered a block over the limit"), nil
	case "identsbad":
		// A request block in no known version.
		off := extismAlloc(2)
		extismStoreU8(off, 9)
		extismStoreU8(off+1, 0)
		hostExtractIdentifiers(off)
		return abi.Unchanged(n, "extract_identifiers answered a malformed block"), nil
	case "identsfrombig", "identsfromout":
		// extract_identifiers_from with a request over the limit, or
		// outside the plugin's memory: the host must not read it on
		// the fast path; through Extism it answers unsupported.
		ptr, size := uint64(0), uint64(abi.MaxHostInputBytes+1)
		if cfg.Mode == "identsfromout" {
			ptr, size = 0xFFFF_FF00, 1024
		}
		if hostExtractIdentifiersFrom(ptr, size) == abi.ExtractUnsupported {
			res := abi.Unchanged(n, "extract_identifiers_from is not served on this path")
			res.Warnings = []string{"unsupported"}
			return res, nil
		}
		return abi.Unchanged(n, "extract_identifiers_from answered a bad request"), nil
	case "facts", "factsretry":
		// Exercises extract_message_facts_into: through the PDK (which
		// falls back to finding the facts here through Extism), or
		// straight, first with a buffer too small. One warning per
		// fact, "kind:text:used".
		var set *facts.Set
		if cfg.Mode == "facts" {
			var err error
			if set, err = h.MessageFacts(req.Messages, 0, facts.Options{UserChars: 200}); err != nil {
				return nil, err
			}
		} else {
			buf := make([]byte, 1)
			size := hostExtractMessageFactsInto(0, uint64(n), 200, bufAddr(buf), 1)
			if size == abi.FactsUnsupported {
				res := abi.Unchanged(n, "extract_message_facts_into is not served on this path")
				res.Warnings = []string{"unsupported"}
				return res, nil
			}
			buf = make([]byte, size)
			if got := hostExtractMessageFactsInto(0, uint64(n), 200, bufAddr(buf), size); got != size {
				return nil, &abi.Error{Code: abi.CodeInternal, Message: "the answer changed length between calls"}
			}
			var err error
			if set, err = facts.DecodeAnswer(buf); err != nil {
				return nil, &abi.Error{Code: abi.CodeInternal, Message: err.Error()}
			}
		}
		res := abi.Unchanged(n, "facts")
		for i, it := range set.Items {
			used := "0"
			if set.Used[i] {
				used = "1"
			}
			res.Warnings = append(res.Warnings, itoa(int(it.Kind))+":"+it.Text+":"+used)
		}
		return res, nil
	case "factsrange", "factsout":
		// extract_message_facts_into with messages the request does not
		// have, or a buffer outside the plugin's memory: the host must
		// not answer on the fast path; through Extism it answers
		// unsupported.
		first, count, ptr, size := uint64(n), uint64(1), uint64(0), uint64(0)
		if cfg.Mode == "factsout" {
			first, count, ptr, size = 0, uint64(n), 0xFFFF_FF00, 1<<20
		}
		if hostExtractMessageFactsInto(first, count, 0, ptr, size) == abi.FactsUnsupported {
			res := abi.Unchanged(n, "extract_message_facts_into is not served on this path")
			res.Warnings = []string{"unsupported"}
			return res, nil
		}
		return abi.Unchanged(n, "extract_message_facts_into answered a bad request"), nil
	case "count":
		// Exercises count_tokens and llm_complete through the PDK.
		total := 0
		for _, m := range req.Messages {
			total += h.CountTokens(m.Text())
		}
		_, err := h.Complete(abi.LLMRequest{Messages: []abi.LLMMessage{{Role: "user", Content: "hi"}}})
		h.Log(pdk.LevelInfo, "counted")
		res := abi.Unchanged(n, "counted")
		res.Warnings = []string{"tokens=" + itoa(total)}
		if err != nil {
			res.Warnings = append(res.Warnings, "llm: "+err.Error())
		}
		return res, nil
	}
	return nil, &abi.Error{Code: abi.CodeInvalidConfig, Message: "unknown mode " + cfg.Mode}
}

//go:wasmimport extism:host/user extract_identifiers
func hostExtractIdentifiers(offset uint64) uint64

//go:wasmimport extism:host/user extract_identifiers_from
func hostExtractIdentifiersFrom(ptr, n uint64) uint64

//go:wasmimport extism:host/user extract_message_facts_into
func hostExtractMessageFactsInto(first, count, userChars, ptr, capacity uint64) uint64

// bufAddr is b's address in the plugin's memory.
func bufAddr(b []byte) uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(b)))) }

//go:wasmimport extism:host/env alloc
func extismAlloc(n uint64) uint64

//go:wasmimport extism:host/env store_u8
func extismStoreU8(offset uint64, v uint32)

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	var b []byte
	for n > 0 {
		b = append([]byte{byte('0' + n%10)}, b...)
		n /= 10
	}
	return string(b)
}
