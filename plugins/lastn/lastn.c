/*
 * lastn: a compactd policy in C (ABI 1.1), written with the C kit
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

#define DEFAULT_N 4
#define DEFAULT_STEP 16
#define MAX_N 0x7fffffff /* larger values of n are clamped: they keep all */

static const char DESCRIPTION[] =
	"{\"abi\":\"1.1\",\"name\":\"lastn\",\"version\":\"0.4.0\",\"decision\":true,"
	"\"description\":\"Keeps the leading system/developer messages, the task (the first user message) "
	"and the last n messages, moving the cut in steps so the prompt-cache prefix stays stable between cuts; "
	"the kept tail never starts inside a tool-call unit, and the kept prefix is marked as a cache breakpoint.\","
	"\"config_schema\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\","
	"\"minimum\":1,\"default\":4,\"description\":\"messages kept after the leading "
	"system/developer messages and the task (widened to the start of a tool-call unit)\"},"
	"\"step\":{\"type\":\"integer\",\"minimum\":1,\"default\":16,\"description\":\"hysteresis: "
	"the tail is cut back to n messages once it holds n+step, so the kept prefix changes once every "
	"step messages (1 = cut on every message)\"},"
	"\"keep_task\":{\"type\":\"boolean\",\"default\":true,\"description\":\"keep the task "
	"(the first user message) verbatim; false drops it with the other old messages\"}},"
	"\"additionalProperties\":false},\"defaults\":{\"n\":4,\"step\":16,\"keep_task\":true}}";

/* config_int reads the integer config key (>= 1, clamped to MAX_N) into
 * *out, kept when absent. */
static int config_int(const cd_request *req, const char *key, int64_t *out, cd_error *err)
{
	cd_str v;
	int found = req->config.len ? cd_json_get(req->config, key, &v) : 0;
	if (found < 0)
		return cd_fail(err, CD_INVALID_CONFIG, "lastn: config is not an object");
	if (found == 0)
		return 0;
	int r = cd_json_int(v, out);
	if (r == 0) {
		char msg[64];
		snprintf(msg, sizeof msg, "lastn: %s must be an integer", key);
		return cd_fail(err, CD_INVALID_CONFIG, msg);
	}
	if (*out < 1) {
		char msg[64];
		snprintf(msg, sizeof msg, "lastn: %s must be at least 1", key);
		return cd_fail(err, CD_INVALID_CONFIG, msg);
	}
	if (*out > MAX_N)
		*out = MAX_N;
	return 0;
}

/* unit_start moves i back over tool results to the assistant message that
 * made the calls, but not before floor. */
static size_t unit_start(const cd_request *req, size_t i, size_t floor)
{
	while (i > floor && cd_is_role(&req->messages[i], "tool"))
		i--;
	return i;
}

/* forced_cut returns the newest length at which the host's decision cut
 * the tail back, as the state remembers it ({"forced":[len]}; 0: none). */
static size_t forced_cut(const cd_request *req, size_t total)
{
	cd_str v, k, item;
	cd_json_iter it;
	int64_t num;
	size_t last = 0;
	if (req->state.len == 0 || cd_json_get(req->state, "forced", &v) != 1 ||
	    cd_json_iter_init(&it, v) < 0 || it.object)
		return 0;
	while (cd_json_next(&it, &k, &item) == 1)
		if (cd_json_int(item, &num) == 1 && num > 0 && (uint64_t)num <= total && (size_t)num > last)
			last = (size_t)num;
	return last;
}

static int compact(const cd_request *req, cd_result *res, cd_error *err)
{
	int64_t n = DEFAULT_N, step = DEFAULT_STEP;
	int keep_task = 1;
	if (config_int(req, "n", &n, err) || config_int(req, "step", &step, err) ||
	    cd_config_bool(req, "keep_task", &keep_task, err))
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
	/* start: the first message of the kept tail. Replaying the growth
	 * message by message, as a stateful policy called on every request
	 * would have cut: once the tail holds n+step messages it is cut back
	 * to the last n, widened to the assistant message that made the calls
	 * when that is a tool result. Between cuts the output's prefix is
	 * byte-identical, so the provider's prompt cache keeps hitting. */
	size_t start = pinned;
	uint64_t trigger = (uint64_t)n + (uint64_t)step;
	/* A cut the host's decision forced (ABI 1.1 context.compact) is taken
	 * at its length whatever step says; only the newest one matters, as
	 * cuts only move the start forward. */
	size_t forced = forced_cut(req, total);
	for (size_t len = pinned + 1; len <= total; len++) {
		if (len != forced && (uint64_t)(len - start) < trigger)
			continue;
		if ((uint64_t)(len - start) <= (uint64_t)n)
			continue;
		size_t next = unit_start(req, len - (size_t)n, pinned);
		if (next > start)
			start = next;
	}
	/* The host decided to compact: cut back to the last n now, and
	 * remember it so the next requests replay the same cut. */
	if (req->has_decision && (uint64_t)(total - start) > (uint64_t)n && total > pinned) {
		size_t next = unit_start(req, total - (size_t)n, pinned);
		if (next > start) {
			start = next;
			forced = total;
		}
	}
	if (forced > 0) {
		cd_buf st = {0};
		cd_buf_lit(&st, "{\"forced\":[");
		cd_buf_int(&st, (int64_t)forced);
		cd_buf_lit(&st, "]}");
		cd_set_state(res, (cd_str){st.ptr, st.len});
		cd_buf_free(&st);
	}
	for (size_t i = 0; i < total; i++)
		if (i < pinned || i >= start)
			cd_keep(res, i);
	/* The kept prefix (system messages and task) never changes: mark it,
	 * so a cut's request reads it from the cache and writes only the
	 * tail. */
	if (pinned > 0)
		cd_mark(res, pinned - 1);

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
