/*
 * Unit tests for __NAME__, built natively: make test.
 *
 * Each case runs the policy on a JSON request through both paths (the
 * Extism path's JSON and the fast path's binary form, as the host sends
 * them) and checks that they agree and that the result is what we expect.
 */
#include "__NAME__.c"

#include <stdio.h>

static int failures;

#define CHECK(cond, ...)                                        \
	do {                                                        \
		if (!(cond)) {                                          \
			failures++;                                         \
			fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__); \
			fprintf(stderr, __VA_ARGS__);                       \
			fprintf(stderr, "\n");                              \
		}                                                       \
	} while (0)

/* run compacts the JSON request on both paths; it returns the JSON output
 * (free it) and the status in *rc. */
static char *run(const char *request, int *rc)
{
	cd_buf json_out = {0}, fast_out = {0}, fast_in = {0};
	*rc = cd_call_json(CD_FN_COMPACT, cd_cstr(request), &json_out);
	cd_request req;
	cd_arena arena = {0};
	cd_error err = {0};
	if (cd_decode_json(request, strlen(request), &req, &arena, &err) == 0) {
		cd_encode_fast(&req, &fast_in);
		int frc = cd_call_fast(CD_FN_COMPACT, (cd_str){fast_in.ptr, fast_in.len}, &fast_out);
		CHECK(frc == *rc && fast_out.len == json_out.len && memcmp(fast_out.ptr, json_out.ptr, json_out.len) == 0,
		      "the fast path disagrees:\n  json: %.*s\n  fast: %.*s", (int)json_out.len, json_out.ptr, (int)fast_out.len, fast_out.ptr);
	}
	cd_arena_free(&arena);
	cd_buf_free(&fast_in);
	cd_buf_free(&fast_out);
	cd_buf_byte(&json_out, '\0');
	return json_out.ptr;
}

static int contains(const char *s, const char *part) { return strstr(s, part) != NULL; }

/* A system prompt, the task, then n tool-call units whose outputs have
 * three lines each. */
static char *conversation(int n, const char *config)
{
	cd_buf b = {0};
	cd_buf_lit(&b, "{\"abi\":\"1.0\",\"config\":");
	cd_buf_lit(&b, config);
	cd_buf_lit(&b, ",\"context\":{\"total_tokens\":0},\"messages\":["
	               "{\"role\":\"system\",\"content\":\"You are an agent.\"},"
	               "{\"role\":\"user\",\"content\":\"Fix the bug in parse.go\"}");
	for (int i = 0; i < n; i++) {
		char unit[400];
		snprintf(unit, sizeof unit,
		         ",{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"c%d\",\"type\":\"function\","
		         "\"function\":{\"name\":\"bash\",\"arguments\":\"{}\"}}]},"
		         "{\"role\":\"tool\",\"tool_call_id\":\"c%d\",\"content\":\"line one of %d \\u00e9\\nline two, long enough to be worth masking\\nline three\"}",
		         i, i, i);
		cd_buf_lit(&b, unit);
	}
	cd_buf_lit(&b, "]}");
	cd_buf_byte(&b, '\0');
	return b.ptr;
}

int main(void)
{
	int rc;
	cd_buf d = {0};
	CHECK(cd_call_json(CD_FN_DESCRIBE, CD_STR(""), &d) == 0, "describe failed");
	CHECK(cd_json_valid((cd_str){d.ptr, d.len}), "describe is not JSON");
	cd_buf_free(&d);

	/* Short conversations come back unchanged. */
	char *req = conversation(3, "{\"keep_units\":8,\"mask_units\":24,\"step\":4}");
	char *out = run(req, &rc);
	CHECK(rc == 0 && contains(out, "\"compacted\":false") && contains(out, "{\"ref\":7}"), "short: %s", out);
	free(out);
	free(req);

	/* The task and 20 units with keep 4, mask 8, step 4: 17 units are
	 * older, 16 leave the verbatim tail (a multiple of the step); the newest
	 * 8 of those are masked, the other 8 dropped but for the task. */
	req = conversation(20, "{\"keep_units\":4,\"mask_units\":8,\"step\":4}");
	out = run(req, &rc);
	CHECK(rc == 0, "compact failed: %s", out);
	CHECK(contains(out, "\"compacted\":true"), "not compacted: %s", out);
	CHECK(contains(out, "{\"ref\":0},{\"ref\":1},{\"ref\":16}"), "the task must follow the system prompt: %s", out);
	CHECK(contains(out, "\"line one of 8 \xC3\xA9 [\xE2\x80\xA6 53 bytes masked]\""), "masked output: %s", out);
	CHECK(contains(out, "dropped 14 messages, masked 8 tool outputs, kept the last 5 units verbatim"), "summary: %s", out);
	CHECK(contains(out, "\"entries_summarized\":22"), "entries_summarized: %s", out);
	free(out);
	free(req);

	/* Bad config is an invalid_config error. */
	req = conversation(2, "{\"keep_units\":0}");
	out = run(req, &rc);
	CHECK(rc == 1 && contains(out, "\"invalid_config\""), "bad config: %s", out);
	free(out);
	free(req);

	/* Malformed requests are errors, not crashes. */
	out = run("{\"messages\":[{\"role\":", &rc);
	CHECK(rc == 1 && contains(out, "invalid_request"), "malformed: %s", out);
	free(out);
	cd_buf o = {0};
	CHECK(cd_call_fast(CD_FN_COMPACT, CD_STR("CDF1\x05\x00\x00\x00{}"), &o) == 1, "truncated fast request accepted");
	cd_buf_free(&o);

	if (failures) {
		fprintf(stderr, "%d failed\n", failures);
		return 1;
	}
	printf("0 failed: __NAME__ tests passed\n");
	return 0;
}
