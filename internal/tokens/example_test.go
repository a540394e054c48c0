package tokens_test

import (
	"fmt"

	"github.com/compactd/compactd/abi"
	"github.com/compactd/compactd/internal/tokens"
)

func ExampleTokenizer_CountMessages() {
	counter := tokens.New(tokens.Options{})
	msgs := []abi.Message{
		{Role: "system", Content: abi.TextContent("You are a helpful assistant.")},
		{Role: "user", Content: abi.TextContent("hello world")},
	}
	tok := counter.ForModel("gpt-4o")
	total := tok.CountMessages(msgs)
	fmt.Println(tok.Name(), msgs[0].Tokens, msgs[1].Tokens, total)

	// Counting the same history again tokenizes nothing.
	before := counter.Stats().BytesTokenized
	tok.CountMessages(msgs)
	fmt.Println("re-tokenized bytes:", counter.Stats().BytesTokenized-before)

	claude := counter.ForModel("claude-sonnet-4-5")
	fmt.Println(claude.Name(), claude.Exact(), claude.CountMessages(msgs))
	// Output:
	// o200k_base 10 6 16
	// re-tokenized bytes: 0
	// o200k_base×1.20 (claude estimate) false 20
}
