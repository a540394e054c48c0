package conform

// samples are small conversations every plugin must handle: each shape a
// real agent sends (plain chat, tool calls, parallel calls, an unanswered
// call at the end, content parts, a field the ABI does not know, a single
// message).
var samples = []struct {
	name string
	json string
}{
	{"single user message", `[{"role":"user","content":"hello"}]`},
	{"system and user", `[{"role":"system","content":"Be brief."},{"role":"user","content":"hello"}]`},
	{"chat", `[
 {"role":"system","content":"You are a helpful assistant."},
 {"role":"user","content":"recap - I need a flight to Boston."},
 {"role":"assistant","content":"recap - user wants a flight to BOS.\nWhich date?"},
 {"role":"user","content":"Friday."},
 {"role":"assistant","content":"recap - date is Friday.\nMorning or evening?"},
 {"role":"user","content":"Morning."},
 {"role":"assistant","content":"recap - morning flight.\nBooking UA 123 at 8:05."},
 {"role":"user","content":"Great, thanks."},
 {"role":"assistant","content":"recap - booked UA 123.\nDone."},
 {"role":"user","content":"And a hotel?"},
 {"role":"assistant","content":"recap - hotel asked.\nWhich area?"},
 {"role":"user","content":"Downtown."}]`},
	{"tool calls", `[
 {"role":"system","content":"You are a coding agent."},
 {"role":"user","content":"Fix the failing test in pkg/parse/split.go"},
 {"role":"assistant","content":"Let me run the tests.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"bash","arguments":"{\"cmd\":\"go test ./pkg/parse\"}"}}]},
 {"role":"tool","tool_call_id":"call_1","content":"--- FAIL: TestSplit (0.00s)\n split_test.go:12: got 2 parts, want 3"},
 {"role":"assistant","content":"Reading the file.","tool_calls":[{"id":"call_2","type":"function","function":{"name":"read_file","arguments":"{\"path\":\"pkg/parse/split.go\"}"}}]},
 {"role":"tool","tool_call_id":"call_2","content":"package parse\n\nfunc Split(s string) []string { return strings.SplitN(s, \",\", 2) }"},
 {"role":"assistant","content":"SplitN limits to 2 parts; use Split.","tool_calls":[{"id":"call_3","type":"function","function":{"name":"edit","arguments":"{\"path\":\"pkg/parse/split.go\",\"old\":\"SplitN(s, \\\",\\\", 2)\",\"new\":\"Split(s, \\\",\\\")\"}"}}]},
 {"role":"tool","tool_call_id":"call_3","content":"ok"},
 {"role":"assistant","content":"Running tests again.","tool_calls":[{"id":"call_1","type":"function","function":{"name":"bash","arguments":"{\"cmd\":\"go test ./pkg/parse\"}"}}]},
 {"role":"tool","tool_call_id":"call_1","content":"ok  \tpkg/parse\t0.01s"},
 {"role":"user","content":"Thanks. Now commit it."}]`},
	{"parallel calls", `[
 {"role":"system","content":"You are an airline agent."},
 {"role":"user","content":"Compare flights SFO-JFK on May 3 and May 4."},
 {"role":"assistant","content":null,"tool_calls":[
   {"id":"a","type":"function","function":{"name":"search","arguments":"{\"date\":\"2024-05-03\"}"}},
   {"id":"b","type":"function","function":{"name":"search","arguments":"{\"date\":\"2024-05-04\"}"}}]},
 {"role":"tool","tool_call_id":"b","content":"[{\"flight\":\"HAT002\",\"price\":310}]"},
 {"role":"tool","tool_call_id":"a","content":"[{\"flight\":\"HAT001\",\"price\":280}]"},
 {"role":"assistant","content":"May 3 is cheaper: HAT001 at $280."},
 {"role":"user","content":"Book it."},
 {"role":"assistant","content":null,"tool_calls":[{"id":"c","type":"function","function":{"name":"book","arguments":"{\"flight\":\"HAT001\"}"}}]},
 {"role":"tool","tool_call_id":"c","content":"{\"reservation\":\"R7X2K9\"}"},
 {"role":"assistant","content":"Booked: reservation R7X2K9."},
 {"role":"user","content":"Thanks!"}]`},
	{"unanswered call at the end", `[
 {"role":"system","content":"You are a coding agent."},
 {"role":"user","content":"Submit the patch."},
 {"role":"assistant","content":"Checking the diff.","tool_calls":[{"id":"x1","type":"function","function":{"name":"bash","arguments":"{\"cmd\":\"git diff\"}"}}]},
 {"role":"tool","tool_call_id":"x1","content":"diff --git a/a.go b/a.go"},
 {"role":"assistant","content":"Submitting.","tool_calls":[{"id":"x2","type":"function","function":{"name":"submit","arguments":"{}"}}]}]`},
	{"content parts and unknown fields", `[
 {"role":"developer","content":[{"type":"text","text":"Answer in French."}]},
 {"role":"user","content":[{"type":"text","text":"What is in this picture?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}],"cache_control":{"type":"ephemeral"}},
 {"role":"assistant","content":"Un chat.","refusal":null},
 {"role":"user","name":"alice","content":"Merci."}]`},
}
