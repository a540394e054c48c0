/*
 * lastn: a compactd policy in C (ABI 1.0), written with the C kit
 * (kits/c/compactd.h).
 *
 * Keeps the leading system/developer messages, the task (the first user
 * message; keep_task, default true) and the last n messages. The kept tail
 * never starts inside a tool-call unit: when the cut falls on a `tool`
 * message it moves earlier, to the assistant message that made the calls.
 * The result is refs only.
 *
 * Build (see README.md):
 *
 *   clang --target=wasm32-wasi --sysroot=/usr -O2 -mexec-model=reactor \
 *     -Wall -Werror -o lastn.wasm lastn.c
 */
#include "../../kits/c/compactd.h"

#define DEFAULT_N 8
#define MAX_N 0x7fffffff /* larger values of n are clamped: they keep all */

static const char DESCRIPTION[] =
	"{\"abi\":\"1.0\",\"name\":\"lastn\",\"version\":\"0.2.0\","
	"\"description\":\"Keeps the leading system/developer messages, the task (the first user message) "
	"and the last n messages; the kept tail never starts inside a tool-call unit.\","
	"\"config_schema\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\","
	"\"minimum\":1,\"default\":8,\"description\":\"messages kept after the leading "
	"system/developer messages and the task (widened to the start of a tool-call unit)\"},"
	"\"keep_task\":{\"type\":\"boolean\",\"default\":true,\"description\":\"keep the task "
	"(the first user message) verbatim; false drops it with the other old messages\"}},"
	"\"additionalProperties\":false},\"defaults\":{\"n\":8,\"keep_task\":true}}";

/* config_n reads n: an integer >= 1, clamped to MAX_N. */
static int config_n(const cd_request *req, int64_t *n, cd_error *err)
{
	cd_str v;
	int found = req->config.len ? cd_json_get(req->config, "n", &v) : 0;
	if (found < 0)
		return cd_fail(err, CD_INVALID_CONFIG, "lastn: config is not an object");
	if (found == 0)
		return 0;
	int r = cd_json_int(v, n);
	if (r == 0)
		return cd_fail(err, CD_INVALID_CONFIG, "lastn: n must be an integer");
	if (*n < 1)
		return cd_fail(err, CD_INVALID_CONFIG, "lastn: n must be at least 1");
	if (*n > MAX_N)
		*n = MAX_N;
	return 0;
}

static int compact(const cd_request *req, cd_result *res, cd_error *err)
{
	int64_t n = DEFAULT_N;
	int keep_task = 1;
	if (config_n(req, &n, err) || cd_config_bool(req, "keep_task", &keep_task, err))
		return 1;
	size_t total = req->n_messages;
	for (size_t i = 0; i < total; i++) {
		const cd_message *m = &req->messages[i];
		if (!cd_is_system(m) && !cd_is_role(m, "user") && !cd_is_role(m, "assistant") && !cd_is_role(m, "tool"))
			return cd_fail(err, CD_INVALID_REQUEST, "lastn: a message has an unknown role");
	}

	size_t lead = cd_leading_system(req);
	/* pinned: the kept prefix, the system messages and (keep_task) up to
	 * and including the first user message, unless that is the last one. */
	size_t pinned = lead;
	if (keep_task) {
		size_t t = lead;
		while (t < total && !cd_is_role(&req->messages[t], "user"))
			t++;
		if (t + 1 < total)
			pinned = t + 1;
	}
	/* start: the first message of the kept tail. */
	size_t start = pinned;
	if ((uint64_t)n < total - pinned) {
		start = total - (size_t)n;
		while (start > pinned && cd_is_role(&req->messages[start], "tool"))
			start--; /* widen to the assistant message that made the calls */
	}
	for (size_t i = 0; i < total; i++)
		if (i < pinned || i >= start)
			cd_keep(res, i);

	char summary[96];
	if (start > pinned) {
		res->compacted = 1;
		res->entries_summarized = (int64_t)(start - pinned);
		snprintf(summary, sizeof summary, "kept the last %zu of %zu messages", total - start, total);
	} else {
		snprintf(summary, sizeof summary, "kept all %zu messages", total);
	}
	cd_buf_lit(&res->summary, summary);
	return 0;
}

COMPACTD_POLICY(DESCRIPTION, compact);
