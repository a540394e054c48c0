package tokens

// ClaudeScale is the factor applied to o200k_base counts for Claude models.
//
// Anthropic does not publish Claude's tokenizer. A published comparison of
// Claude 3.5 Sonnet and GPT-4o (whose tokenizer is o200k_base) on identical
// inputs found Claude producing about 16% more tokens on English prose, ~21%
// more on math and ~30% more on Python code ("Hidden costs in AI deployment:
// Why Claude models may be 20-30% more expensive than GPT in enterprise
// settings", VentureBeat, 2025, the "hidden tokenizer inefficiency"; its
// price table is credited to Vantage, June 2024). Agent traffic mixes code,
// tool output and prose, so the factor is 1.20: above prose, below code.
// It was measured on Claude 3.5 Sonnet; later Claude tokenizers may differ,
// and Options.Families can override it.
const ClaudeScale = 1.20

// BuiltinFamilies returns the built-in model table, in a new slice the
// caller may modify. A Counter checks Options.Families first, then these.
//
// OpenAI models are exact: o200k_base for gpt-4o, chatgpt-4o, gpt-4.1,
// gpt-4.5, gpt-5, o1, o3 and o4 models; cl100k_base for gpt-4 (but not
// gpt-4o, gpt-4.1 or gpt-4.5, which match longer prefixes), gpt-4-turbo,
// gpt-3.5 and text-embedding models. Each also matches with an "openai/"
// (OpenRouter) or "ft:" (fine-tuned) prefix. Claude is an estimate scaled by
// ClaudeScale; Gemini, Llama, Mistral, DeepSeek and Qwen are estimates at
// scale 1: their tokenizers differ from o200k_base (their own vocabularies
// range from 32K to 256K entries) and no published calibration against it
// covers them.
func BuiltinFamilies() []Family {
	return []Family{
		{
			Name:     "openai",
			Prefixes: openAIForms("gpt-4o", "chatgpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "o1", "o3", "o4"),
			Encoding: O200kBase,
			Scale:    1,
			Note:     "OpenAI's own encoding for these models (tiktoken)",
		},
		{
			Name:     "openai-cl100k",
			Prefixes: openAIForms("gpt-4", "gpt-3.5", "gpt-35", "text-embedding-"),
			Encoding: Cl100kBase,
			Scale:    1,
			Note:     "OpenAI's own encoding for these models (tiktoken)",
		},
		{
			Name:     "claude",
			Prefixes: []string{"claude", "anthropic/"},
			Encoding: O200kBase,
			Scale:    ClaudeScale,
			Estimate: true,
			Note: "Claude's tokenizer is not public; Claude 3.5 Sonnet produced ~16% (prose), " +
				"~21% (math) and ~30% (Python) more tokens than GPT-4o on identical inputs " +
				"(VentureBeat, \"hidden tokenizer inefficiency\"); agent traffic mixes code and prose",
		},
		{
			Name:     "gemini",
			Prefixes: []string{"gemini", "google/"},
			Encoding: O200kBase,
			Scale:    1,
			Estimate: true,
			Note:     "Gemini's tokenizer differs from o200k_base; no published calibration, counted as o200k_base",
		},
		{
			Name:     "llama",
			Prefixes: []string{"llama", "meta-llama/", "codellama"},
			Encoding: O200kBase,
			Scale:    1,
			Estimate: true,
			Note:     "Llama's tokenizer differs from o200k_base; no published calibration, counted as o200k_base",
		},
		{
			Name:     "mistral",
			Prefixes: []string{"mistral", "mixtral", "codestral", "mistralai/"},
			Encoding: O200kBase,
			Scale:    1,
			Estimate: true,
			Note:     "Mistral's tokenizer differs from o200k_base; no published calibration, counted as o200k_base",
		},
		{
			Name:     "deepseek",
			Prefixes: []string{"deepseek"},
			Encoding: O200kBase,
			Scale:    1,
			Estimate: true,
			Note:     "DeepSeek's tokenizer differs from o200k_base; no published calibration, counted as o200k_base",
		},
		{
			Name:     "qwen",
			Prefixes: []string{"qwen", "qwq"},
			Encoding: O200kBase,
			Scale:    1,
			Estimate: true,
			Note:     "Qwen's tokenizer differs from o200k_base; no published calibration, counted as o200k_base",
		},
	}
}

// openAIForms returns each prefix as is, with "openai/" (OpenRouter) and
// with "ft:" (fine-tuned models, "ft:gpt-4o-mini:org::id").
func openAIForms(prefixes ...string) []string {
	out := make([]string, 0, 3*len(prefixes))
	for _, p := range prefixes {
		out = append(out, p, "openai/"+p, "ft:"+p)
	}
	return out
}
