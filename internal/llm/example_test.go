package llm_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/internal/llm"
)

// The daemon makes one Client from its config and gives every compaction
// request its own budget. Identical requests are answered from the cache.
func ExampleClient_Budgeted() {
	// A local server speaking the OpenAI Chat Completions format.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = io.WriteString(w, `{"object":"chat.completion","model":"summarizer",
		  "choices":[{"index":0,"message":{"role":"assistant","content":"<summary>fixed the parser</summary>"},"finish_reason":"stop"}],
		  "usage":{"prompt_tokens":812,"completion_tokens":9,"total_tokens":821}}`)
	}))
	defer srv.Close()

	client, err := llm.New(llm.Config{
		Provider: llm.KindOpenAI,
		BaseURL:  srv.URL + "/v1",
		Model:    "summarizer",
		Budget:   llm.Limits{MaxCalls: 4},
	}, llm.WithGetenv(func(string) string { return "" }))
	if err != nil {
		panic(err)
	}
	// compactor.Options{NewLLM: func() host.Completer { return client.Budgeted() }}
	perRequest := client.Budgeted()
	req := abi.LLMRequest{Messages: []abi.LLMMessage{{Role: "user", Content: "summarize: …"}}, MaxTokens: 200}
	for i := 0; i < 2; i++ {
		resp, err := perRequest.Complete(context.Background(), req)
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s cached=%v tokens=%d+%d\n", resp.Text, resp.Cached, resp.Usage.InputTokens, resp.Usage.OutputTokens)
	}
	calls, _ := perRequest.Spent()
	st := client.Stats()
	fmt.Printf("budget calls=%d provider calls=%d hits=%d misses=%d\n", calls, st.Calls, st.CacheHits, st.CacheMisses)
	// Output:
	// <summary>fixed the parser</summary> cached=false tokens=812+9
	// <summary>fixed the parser</summary> cached=true tokens=812+9
	// budget calls=1 provider calls=1 hits=1 misses=1
}
