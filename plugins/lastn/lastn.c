/*
 * lastn: a compactd policy in C (ABI 1.0).
 *
 * Keeps the leading system/developer messages and the last n messages. The
 * kept tail never starts inside a tool-call unit: when the cut falls on a
 * `tool` message it moves earlier, to the assistant message that made the
 * calls. The result is refs only.
 *
 * The module uses nothing but the Extism kernel functions declared below and
 * wasi-libc's malloc/realloc/free/memcpy. Build (see README.md):
 *
 *   clang --target=wasm32-wasi --sysroot=/usr -O2 -mexec-model=reactor \
 *     -Wall -Werror -Wl,--export=describe -Wl,--export=compact \
 *     -o lastn.wasm lastn.c
 */

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* ---- Extism kernel imports (module "extism:host/env") ------------------ */

#define EXTISM_IMPORT(name) \
	__attribute__((import_module("extism:host/env"), import_name(name)))

EXTISM_IMPORT("input_length") extern uint64_t extism_input_length(void);
EXTISM_IMPORT("input_load_u64") extern uint64_t extism_input_load_u64(uint64_t off);
EXTISM_IMPORT("input_load_u8") extern uint32_t extism_input_load_u8(uint64_t off);
EXTISM_IMPORT("alloc") extern uint64_t extism_alloc(uint64_t n);
EXTISM_IMPORT("store_u64") extern void extism_store_u64(uint64_t off, uint64_t v);
EXTISM_IMPORT("store_u8") extern void extism_store_u8(uint64_t off, uint32_t v);
EXTISM_IMPORT("output_set") extern void extism_output_set(uint64_t off, uint64_t n);
EXTISM_IMPORT("error_set") extern void extism_error_set(uint64_t off);

/* ---- Policy constants ---------------------------------------------------- */

#define DEFAULT_N 8
#define MAX_N 0x7fffffffu /* larger values of n are clamped: they keep all */

static const char DESCRIPTION[] =
	"{\"abi\":\"1.0\",\"name\":\"lastn\",\"version\":\"0.1.0\","
	"\"description\":\"Keeps the leading system/developer messages and the last n messages; "
	"the kept tail never starts inside a tool-call unit.\","
	"\"config_schema\":{\"type\":\"object\",\"properties\":{\"n\":{\"type\":\"integer\","
	"\"minimum\":1,\"default\":8,\"description\":\"messages kept after the leading "
	"system/developer messages (widened to the start of a tool-call unit)\"}},"
	"\"additionalProperties\":false},\"defaults\":{\"n\":8}}";

/* ---- Kernel memory I/O --------------------------------------------------- */

/* read_input copies the call's input into a malloc'd, NUL-terminated buffer. */
static char *read_input(size_t *len_out)
{
	uint64_t n = extism_input_length();
	if (n >= (uint64_t)SIZE_MAX)
		return NULL;
	char *buf = malloc((size_t)n + 1);
	if (buf == NULL)
		return NULL;
	uint64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w = extism_input_load_u64(i);
		memcpy(buf + i, &w, 8); /* wasm is little-endian, like the kernel */
	}
	for (; i < n; i++)
		buf[i] = (char)extism_input_load_u8(i);
	buf[n] = '\0';
	*len_out = (size_t)n;
	return buf;
}

/* to_kernel copies n bytes into a new kernel block; 0 if alloc failed. */
static uint64_t to_kernel(const char *p, size_t n)
{
	uint64_t off = extism_alloc(n);
	if (off == 0)
		return 0;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		extism_store_u64(off + i, w);
	}
	for (; i < n; i++)
		extism_store_u8(off + i, (uint8_t)p[i]);
	return off;
}

/* ---- A tiny append-only byte buffer for building JSON ------------------- */

typedef struct {
	char *p;
	size_t len, cap;
	int oom;
} buf_t;

static void buf_put(buf_t *b, const char *s, size_t n)
{
	if (b->oom)
		return;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n)
			cap *= 2;
		char *np = realloc(b->p, cap);
		if (np == NULL) {
			b->oom = 1;
			return;
		}
		b->p = np;
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

static void buf_str(buf_t *b, const char *s) { buf_put(b, s, strlen(s)); }

static void buf_uint(buf_t *b, uint64_t v)
{
	char tmp[24];
	size_t i = sizeof tmp;
	do {
		tmp[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	buf_put(b, tmp + i, sizeof tmp - i);
}

/* fail sets a JSON error body {"code":code,"message":msg[ at byte off]} and
 * returns 1, the export's failure status. msg must not need JSON escaping. */
static int32_t fail(const char *code, const char *msg, int64_t at)
{
	buf_t b = {0};
	buf_str(&b, "{\"code\":\"");
	buf_str(&b, code);
	buf_str(&b, "\",\"message\":\"lastn: ");
	buf_str(&b, msg);
	if (at >= 0) {
		buf_str(&b, " at byte ");
		buf_uint(&b, (uint64_t)at);
	}
	buf_str(&b, "\"}");
	if (!b.oom) {
		uint64_t off = to_kernel(b.p, b.len);
		if (off != 0)
			extism_error_set(off);
	}
	free(b.p);
	return 1;
}

/* ---- JSON scanner --------------------------------------------------------
 *
 * Validates as it goes (RFC 8259 grammar; strings are checked for control
 * characters and escapes, not for UTF-8 well-formedness) and records the
 * first error and its byte offset. Nesting is tracked with a fixed stack,
 * so deep input cannot overflow the C stack.
 */

#define MAX_DEPTH 10000 /* like Go's encoding/json */

typedef struct {
	const char *s;
	size_t n, i;
	const char *err; /* first error, NULL if none */
	size_t err_at;
	const char *err_code; /* "invalid_request" unless set otherwise */
} scan_t;

static int scan_fail(scan_t *sc, const char *msg)
{
	if (sc->err == NULL) {
		sc->err = msg;
		sc->err_at = sc->i;
	}
	return 0;
}

static void ws(scan_t *sc)
{
	while (sc->i < sc->n) {
		char c = sc->s[sc->i];
		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			break;
		sc->i++;
	}
}

static int peek(scan_t *sc) { return sc->i < sc->n ? (unsigned char)sc->s[sc->i] : -1; }

static int expect(scan_t *sc, char c, const char *msg)
{
	ws(sc);
	if (peek(sc) != (unsigned char)c)
		return scan_fail(sc, msg);
	sc->i++;
	return 1;
}

static int hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* A scanned string: raw bytes [start, end) between the quotes. */
typedef struct {
	size_t start, end;
	int escaped;
} str_t;

static int scan_string(scan_t *sc, str_t *out)
{
	if (peek(sc) != '"')
		return scan_fail(sc, "expected a string");
	sc->i++;
	size_t start = sc->i;
	int escaped = 0;
	for (;;) {
		if (sc->i >= sc->n)
			return scan_fail(sc, "unterminated string");
		unsigned char c = (unsigned char)sc->s[sc->i];
		if (c == '"')
			break;
		if (c < 0x20)
			return scan_fail(sc, "control character in string");
		if (c == '\\') {
			escaped = 1;
			sc->i++;
			int e = peek(sc);
			switch (e) {
			case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
				sc->i++;
				break;
			case 'u':
				sc->i++;
				for (int k = 0; k < 4; k++) {
					if (hexval(peek(sc)) < 0)
						return scan_fail(sc, "bad unicode escape in string");
					sc->i++;
				}
				break;
			default:
				return scan_fail(sc, "bad escape in string");
			}
			continue;
		}
		sc->i++;
	}
	if (out) {
		out->start = start;
		out->end = sc->i;
		out->escaped = escaped;
	}
	sc->i++; /* closing quote */
	return 1;
}

/* str_is reports whether the scanned string decodes to the ASCII text lit. */
static int str_is(const scan_t *sc, const str_t *s, const char *lit)
{
	if (!s->escaped) {
		size_t n = s->end - s->start;
		return strlen(lit) == n && memcmp(sc->s + s->start, lit, n) == 0;
	}
	size_t i = s->start;
	for (; i < s->end; lit++) {
		unsigned c = (unsigned char)sc->s[i++];
		if (c == '\\') {
			unsigned e = (unsigned char)sc->s[i++];
			switch (e) {
			case 'b': c = '\b'; break;
			case 'f': c = '\f'; break;
			case 'n': c = '\n'; break;
			case 'r': c = '\r'; break;
			case 't': c = '\t'; break;
			case 'u':
				c = 0;
				for (int k = 0; k < 4; k++)
					c = c * 16 + (unsigned)hexval((unsigned char)sc->s[i++]);
				break;
			default: c = e; break; /* " \ / */
			}
		}
		/* lit is ASCII, so a code point >= 0x80 never matches. */
		if (*lit == '\0' || c >= 0x80 || c != (unsigned char)*lit)
			return 0;
	}
	return *lit == '\0';
}

static int scan_literal(scan_t *sc, const char *lit)
{
	size_t n = strlen(lit);
	if (sc->n - sc->i < n || memcmp(sc->s + sc->i, lit, n) != 0)
		return scan_fail(sc, "invalid literal");
	sc->i += n;
	return 1;
}

/* A scanned number. If integral is set, value is its exact value clamped to
 * MAX_N (negative values are reported through neg). */
typedef struct {
	int integral, neg;
	uint64_t value;
} num_t;

static int scan_number(scan_t *sc, num_t *out)
{
	int neg = 0;
	if (peek(sc) == '-') {
		neg = 1;
		sc->i++;
	}
	int c = peek(sc);
	if (c < '0' || c > '9')
		return scan_fail(sc, "invalid number");
	size_t int_start = sc->i;
	if (c == '0') {
		sc->i++;
	} else {
		while ((c = peek(sc)) >= '0' && c <= '9')
			sc->i++;
	}
	size_t int_end = sc->i, frac_start = sc->i, frac_end = sc->i;
	if (peek(sc) == '.') {
		sc->i++;
		frac_start = sc->i;
		while ((c = peek(sc)) >= '0' && c <= '9')
			sc->i++;
		frac_end = sc->i;
		if (frac_end == frac_start)
			return scan_fail(sc, "invalid number");
	}
	int64_t exp = 0;
	if ((c = peek(sc)) == 'e' || c == 'E') {
		sc->i++;
		int eneg = 0;
		if ((c = peek(sc)) == '+' || c == '-') {
			eneg = c == '-';
			sc->i++;
		}
		size_t es = sc->i;
		while ((c = peek(sc)) >= '0' && c <= '9') {
			if (exp < 1000000)
				exp = exp * 10 + (c - '0');
			sc->i++;
		}
		if (sc->i == es)
			return scan_fail(sc, "invalid number");
		if (eneg)
			exp = -exp;
	}
	if (out == NULL)
		return 1;

	/* value = digits(int ++ frac) * 10^(exp - len(frac)); decide whether it
	 * is an integer and compute it, clamped. Digits live in two ranges. */
	size_t nint = int_end - int_start, nfrac = frac_end - frac_start;
	size_t nd = nint + nfrac;
#define DIGIT(k) (sc->s[(k) < nint ? int_start + (k) : frac_start + (k) - nint] - '0')
	size_t first = 0, last = nd; /* significant digits [first, last) */
	while (first < nd && DIGIT(first) == 0)
		first++;
	while (last > first && DIGIT(last - 1) == 0)
		last--;
	out->neg = neg;
	if (first == last) { /* zero */
		out->integral = 1;
		out->value = 0;
		out->neg = 0;
		return 1;
	}
	int64_t e = exp - (int64_t)nfrac + (int64_t)(nd - last); /* exponent of the last sig. digit */
	if (e < 0) {
		out->integral = 0;
		out->value = 0;
		return 1;
	}
	out->integral = 1;
	uint64_t v = 0;
	int big = (int64_t)(last - first) + e > 10;
	for (size_t k = first; !big && k < last; k++)
		v = v * 10 + (uint64_t)DIGIT(k);
	for (int64_t k = 0; !big && k < e; k++)
		v *= 10;
#undef DIGIT
	out->value = big || v > MAX_N ? MAX_N : v;
	return 1;
}

static int scan_scalar(scan_t *sc)
{
	switch (peek(sc)) {
	case '"': return scan_string(sc, NULL);
	case 't': return scan_literal(sc, "true");
	case 'f': return scan_literal(sc, "false");
	case 'n': return scan_literal(sc, "null");
	case -1: return scan_fail(sc, "unexpected end of input");
	default:
		if (peek(sc) == '-' || (peek(sc) >= '0' && peek(sc) <= '9'))
			return scan_number(sc, NULL);
		return scan_fail(sc, "unexpected character");
	}
}

/* key_colon scans an object key and the colon after it. */
static int key_colon(scan_t *sc, str_t *key)
{
	ws(sc);
	if (peek(sc) != '"')
		return scan_fail(sc, "expected an object key");
	if (!scan_string(sc, key))
		return 0;
	return expect(sc, ':', "expected ':' after object key");
}

static char depth_stack[MAX_DEPTH];

/* skip_value scans over one JSON value of any kind, iteratively. */
static int skip_value(scan_t *sc)
{
	size_t depth = 0;
	for (;;) {
		ws(sc);
		int c = peek(sc);
		if (c == '{' || c == '[') {
			if (depth == MAX_DEPTH)
				return scan_fail(sc, "nesting too deep");
			depth_stack[depth++] = (char)c;
			sc->i++;
			ws(sc);
			if (peek(sc) == (c == '{' ? '}' : ']')) {
				sc->i++;
				depth--;
			} else if (c == '{') {
				if (!key_colon(sc, NULL))
					return 0;
				continue;
			} else {
				continue;
			}
		} else if (!scan_scalar(sc)) {
			return 0;
		}
		/* A value just ended: close containers or move to the next item. */
		for (;;) {
			if (depth == 0)
				return 1;
			ws(sc);
			char top = depth_stack[depth - 1];
			c = peek(sc);
			if (c == ',') {
				sc->i++;
				if (top == '{' && !key_colon(sc, NULL))
					return 0;
				break;
			}
			if (c == (top == '{' ? '}' : ']')) {
				sc->i++;
				depth--;
				continue;
			}
			return scan_fail(sc, top == '{' ? "expected ',' or '}' in object"
			                                : "expected ',' or ']' in array");
		}
	}
}

/* ---- The request --------------------------------------------------------- */

enum { R_NONE, R_SYSTEM, R_DEVELOPER, R_USER, R_ASSISTANT, R_TOOL };

typedef struct {
	uint8_t *roles; /* one role per message */
	size_t count, cap;
	uint64_t n; /* config n */
	int have_messages;
} request_t;

static int role_code(const scan_t *sc, const str_t *s)
{
	if (str_is(sc, s, "system")) return R_SYSTEM;
	if (str_is(sc, s, "developer")) return R_DEVELOPER;
	if (str_is(sc, s, "user")) return R_USER;
	if (str_is(sc, s, "assistant")) return R_ASSISTANT;
	if (str_is(sc, s, "tool")) return R_TOOL;
	return R_NONE;
}

/* scan_message scans one element of "messages" and returns its role code. */
static int scan_message(scan_t *sc, int *role)
{
	*role = R_NONE;
	ws(sc);
	if (peek(sc) != '{')
		return scan_fail(sc, "a message is not an object");
	sc->i++;
	ws(sc);
	if (peek(sc) == '}') {
		sc->i++;
		return scan_fail(sc, "a message has no role");
	}
	int seen_role = 0;
	for (;;) {
		str_t key;
		if (!key_colon(sc, &key))
			return 0;
		ws(sc);
		if (str_is(sc, &key, "role")) {
			str_t v;
			if (peek(sc) != '"')
				return scan_fail(sc, "a message's role is not a string");
			if (!scan_string(sc, &v))
				return 0;
			*role = role_code(sc, &v); /* a repeated key: the last one wins */
			seen_role = 1;
			if (*role == R_NONE)
				return scan_fail(sc, "a message has an unknown role");
		} else if (!skip_value(sc)) {
			return 0;
		}
		ws(sc);
		int c = peek(sc);
		if (c == ',') {
			sc->i++;
			continue;
		}
		if (c == '}') {
			sc->i++;
			break;
		}
		return scan_fail(sc, "expected ',' or '}' in message");
	}
	if (!seen_role)
		return scan_fail(sc, "a message has no role");
	return 1;
}

static int scan_messages(scan_t *sc, request_t *rq)
{
	rq->count = 0; /* a repeated "messages" key: the last one wins */
	rq->have_messages = 1;
	ws(sc);
	if (peek(sc) != '[')
		return scan_fail(sc, "\\\"messages\\\" is not an array");
	sc->i++;
	ws(sc);
	if (peek(sc) == ']') {
		sc->i++;
		return 1;
	}
	for (;;) {
		int role;
		if (!scan_message(sc, &role))
			return 0;
		if (rq->count == rq->cap) {
			size_t cap = rq->cap ? rq->cap * 2 : 64;
			uint8_t *np = realloc(rq->roles, cap);
			if (np == NULL)
				return scan_fail(sc, "out of memory");
			rq->roles = np;
			rq->cap = cap;
		}
		rq->roles[rq->count++] = (uint8_t)role;
		ws(sc);
		int c = peek(sc);
		if (c == ',') {
			sc->i++;
			continue;
		}
		if (c == ']') {
			sc->i++;
			return 1;
		}
		return scan_fail(sc, "expected ',' or ']' in messages");
	}
}

static int config_fail(scan_t *sc, const char *msg)
{
	if (sc->err == NULL)
		sc->err_code = "invalid_config";
	return scan_fail(sc, msg);
}

static int scan_config(scan_t *sc, request_t *rq)
{
	ws(sc);
	if (peek(sc) == 'n') /* "config": null is the same as no config */
		return scan_literal(sc, "null");
	if (peek(sc) != '{')
		return config_fail(sc, "config is not an object");
	sc->i++;
	ws(sc);
	if (peek(sc) == '}') {
		sc->i++;
		return 1;
	}
	for (;;) {
		str_t key;
		if (!key_colon(sc, &key))
			return 0;
		ws(sc);
		if (str_is(sc, &key, "n")) {
			int c = peek(sc);
			num_t num;
			if (c != '-' && (c < '0' || c > '9'))
				return config_fail(sc, "n must be an integer");
			if (!scan_number(sc, &num))
				return 0;
			ws(sc);
			if (peek(sc) != ',' && peek(sc) != '}') /* e.g. 01 */
				return scan_fail(sc, "expected ',' or '}' in config");
			if (!num.integral)
				return config_fail(sc, "n must be an integer");
			if (num.neg || num.value < 1)
				return config_fail(sc, "n must be at least 1");
			rq->n = num.value;
		} else if (!skip_value(sc)) { /* unknown keys are ignored */
			return 0;
		}
		ws(sc);
		int c = peek(sc);
		if (c == ',') {
			sc->i++;
			continue;
		}
		if (c == '}') {
			sc->i++;
			return 1;
		}
		return scan_fail(sc, "expected ',' or '}' in config");
	}
}

/* parse_request scans the whole request; on failure sc->err is set. */
static int parse_request(scan_t *sc, request_t *rq)
{
	ws(sc);
	if (peek(sc) != '{')
		return scan_fail(sc, "the request is not a JSON object");
	sc->i++;
	ws(sc);
	if (peek(sc) == '}') {
		sc->i++;
	} else {
		for (;;) {
			str_t key;
			if (!key_colon(sc, &key))
				return 0;
			int ok;
			if (str_is(sc, &key, "messages"))
				ok = scan_messages(sc, rq);
			else if (str_is(sc, &key, "config"))
				ok = scan_config(sc, rq);
			else
				ok = skip_value(sc);
			if (!ok)
				return 0;
			ws(sc);
			int c = peek(sc);
			if (c == ',') {
				sc->i++;
				continue;
			}
			if (c == '}') {
				sc->i++;
				break;
			}
			return scan_fail(sc, "expected ',' or '}' in the request");
		}
	}
	ws(sc);
	if (sc->i != sc->n)
		return scan_fail(sc, "data after the request object");
	if (!rq->have_messages) {
		sc->i = 0;
		return scan_fail(sc, "the request has no \\\"messages\\\"");
	}
	if (rq->count == 0) {
		sc->i = 0;
		return scan_fail(sc, "\\\"messages\\\" is empty");
	}
	return 1;
}

/* ---- Exports ------------------------------------------------------------- */

__attribute__((export_name("describe"))) int32_t describe(void)
{
	uint64_t off = to_kernel(DESCRIPTION, sizeof DESCRIPTION - 1);
	if (off == 0)
		return fail("internal", "kernel alloc failed", -1);
	extism_output_set(off, sizeof DESCRIPTION - 1);
	return 0;
}

__attribute__((export_name("compact"))) int32_t compact(void)
{
	size_t len = 0;
	char *in = read_input(&len);
	if (in == NULL)
		return fail("internal", "out of memory reading the input", -1);

	scan_t sc = {.s = in, .n = len, .err_code = "invalid_request"};
	request_t rq = {.n = DEFAULT_N};
	int ok = parse_request(&sc, &rq);
	free(in);
	if (!ok) {
		free(rq.roles);
		return fail(sc.err_code, sc.err, (int64_t)sc.err_at);
	}

	size_t total = rq.count, lead = 0;
	while (lead < total && (rq.roles[lead] == R_SYSTEM || rq.roles[lead] == R_DEVELOPER))
		lead++;

	/* start: the first message of the kept tail. */
	size_t start = lead;
	if (rq.n < total - lead) {
		start = total - (size_t)rq.n;
		while (start > lead && rq.roles[start] == R_TOOL)
			start--; /* widen to the assistant message that made the calls */
	}
	free(rq.roles);
	int compacted = start > lead;

	buf_t b = {0};
	buf_str(&b, "{\"messages\":[");
	int first = 1;
	for (size_t i = 0; i < total; i++) {
		if (i >= lead && i < start)
			continue;
		buf_str(&b, first ? "{\"ref\":" : ",{\"ref\":");
		first = 0;
		buf_uint(&b, i);
		buf_str(&b, "}");
	}
	if (compacted) {
		buf_str(&b, "],\"compacted\":true,\"summary\":\"kept the last ");
		buf_uint(&b, total - start);
		buf_str(&b, " of ");
		buf_uint(&b, total);
		buf_str(&b, " messages\",\"entries_summarized\":");
		buf_uint(&b, start - lead);
		buf_str(&b, "}");
	} else {
		buf_str(&b, "],\"compacted\":false,\"summary\":\"kept all ");
		buf_uint(&b, total);
		buf_str(&b, " messages\",\"entries_summarized\":0}");
	}
	if (b.oom) {
		free(b.p);
		return fail("internal", "out of memory writing the result", -1);
	}
	uint64_t off = to_kernel(b.p, b.len);
	size_t outlen = b.len;
	free(b.p);
	if (off == 0)
		return fail("internal", "kernel alloc failed", -1);
	extism_output_set(off, outlen);
	return 0;
}
