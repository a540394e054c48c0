/*
 * __NAME__: a compactd policy in C.
 *
 * Keeps the task (the first user message), the last keep_units units
 * verbatim, and before them mask_units units whose tool outputs are masked
 * to their first line; older units are dropped. The boundaries move in
 * steps of `step` units, so the conversation's prefix (and the provider's
 * prompt cache) changes once per step, not on every turn.
 *
 * Build: make          (clang, wasm32-wasi, see Makefile)
 * Test:  make test     (native build of test___NAME__.c)
 */
#include "compactd.h"

#define MAX_LINE_CHARS 200

static const char DESCRIPTION[] =
	"{\"abi\":\"1.0\",\"name\":\"__NAME__\",\"version\":\"0.1.0\","
	"\"description\":\"Keeps the task and the last units; masks older tool outputs to their first line and drops the oldest.\","
	"\"config_schema\":{\"type\":\"object\",\"properties\":{"
	"\"keep_units\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":100000,\"description\":\"newest units kept verbatim\"},"
	"\"mask_units\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":100000,\"description\":\"units before those, kept with tool outputs masked\"},"
	"\"step\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":1000,\"description\":\"boundaries move in steps of this many units\"}},"
	"\"additionalProperties\":false},"
	"\"defaults\":{\"keep_units\":8,\"mask_units\":24,\"step\":4}}";

/* utf8_prefix returns the byte length of s's first `chars` code points. */
static size_t utf8_prefix(cd_str s, size_t chars)
{
	size_t i = 0;
	for (size_t n = 0; i < s.len && n < chars; n++) {
		i++;
		while (i < s.len && ((unsigned char)s.ptr[i] & 0xC0) == 0x80)
			i++;
	}
	return i;
}

/* mask writes the masked form of a tool output into out and returns 1, or
 * returns 0 when masking would not make it shorter. */
static int mask(cd_str content, cd_buf *out)
{
	size_t line = 0;
	while (line < content.len && content.ptr[line] != '\n')
		line++;
	if (line > 0 && content.ptr[line - 1] == '\r')
		line--;
	cd_str head = {content.ptr, utf8_prefix((cd_str){content.ptr, line}, MAX_LINE_CHARS)};
	size_t masked = content.len - head.len;
	if (masked == 0)
		return 0;
	cd_buf_str(out, head);
	cd_buf_lit(out, " [\xE2\x80\xA6 ");
	cd_buf_int(out, (int64_t)masked);
	cd_buf_lit(out, " bytes masked]");
	return out->len < content.len;
}

static int compact(const cd_request *req, cd_result *res, cd_error *err)
{
	int64_t keep = 8, mask_units = 24, step = 4;
	if (cd_config_int(req, "keep_units", 1, 100000, &keep, err) ||
	    cd_config_int(req, "mask_units", 0, 100000, &mask_units, err) ||
	    cd_config_int(req, "step", 1, 1000, &step, err))
		return 1;

	size_t lead = cd_leading_system(req), n_units;
	cd_unit *units = cd_units(req, lead, &n_units);
	if (units == NULL && lead < req->n_messages)
		return cd_fail(err, CD_INTERNAL, "out of memory");

	/* Units [0, drop) go, [drop, verbatim) are masked, the rest stay. */
	int64_t older = (int64_t)n_units - keep;
	size_t verbatim = older > 0 ? (size_t)(older - older % step) : 0;
	size_t drop = verbatim > (size_t)mask_units ? verbatim - (size_t)mask_units : 0;

	size_t task = req->n_messages;
	for (size_t i = lead; i < req->n_messages; i++) {
		if (cd_is_role(&req->messages[i], "user")) {
			task = i;
			break;
		}
	}

	for (size_t i = 0; i < lead; i++)
		cd_keep(res, i);
	size_t dropped = 0, masked = 0;
	cd_buf text = {0};
	for (size_t u = 0; u < n_units; u++) {
		for (size_t i = units[u].start; i < units[u].end; i++) {
			const cd_message *m = &req->messages[i];
			if (u < drop && i != task) {
				dropped++;
				continue;
			}
			text.len = 0;
			if (u < verbatim && cd_is_role(m, "tool") && m->content_kind == CD_CONTENT_TEXT && mask(m->content, &text)) {
				cd_add_message(res, "tool", (cd_str){text.ptr, text.len}, m->tool_call_id, m->name);
				cd_rewrote(res, i);
				masked++;
				continue;
			}
			cd_keep(res, i);
		}
	}
	cd_buf_free(&text);
	free(units);

	char summary[200];
	if (dropped == 0 && masked == 0) {
		res->n_items = 0;
		res->items.len = 0;
		cd_keep_all(res, req);
		snprintf(summary, sizeof summary, "nothing to compact (%zu units)", n_units);
	} else {
		res->compacted = 1;
		res->entries_summarized = (int64_t)(dropped + masked);
		snprintf(summary, sizeof summary, "dropped %zu messages, masked %zu tool outputs, kept the last %zu units verbatim",
		         dropped, masked, n_units - verbatim);
	}
	cd_buf_lit(&res->summary, summary);
	return 0;
}

COMPACTD_POLICY(DESCRIPTION, compact);
