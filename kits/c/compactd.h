/*
 * compactd.h — write a compactd policy in C (plugin ABI 1.0).
 *
 * Header-only: include it in the one .c file of your plugin and end that
 * file with
 *
 *     COMPACTD_POLICY(DESCRIPTION_JSON, my_compact);
 *
 * where my_compact is
 *
 *     int my_compact(const cd_request *req, cd_result *res, cd_error *err);
 *
 * It returns 0 after filling res, or non-zero after cd_fail(err, ...).
 * The macro defines every export the host looks for: describe and compact
 * on the Extism path (JSON in, JSON out), and compactd_fast_v1_alloc /
 * compactd_fast_v1_call on the fast path, where the host writes the request
 * in binary straight into this module's memory (abi/README.md, "The fast
 * path"). The host prefers the fast path; both give the same result.
 *
 * What you get: the request decoded (roles, contents, tool calls, tokens,
 * context, config), config readers, a small JSON reader for config, state
 * and LLM answers, a result builder with correct JSON escaping, the host
 * functions (count_tokens, llm_complete, logging) and error reporting.
 * Strings are (pointer, length) pairs of UTF-8 bytes, not NUL-terminated.
 *
 * Built for wasm32-wasi (clang --target=wasm32-wasi --sysroot=/usr
 * -mexec-model=reactor) it imports the Extism kernel and compactd's host
 * functions. Built natively (cc, for unit tests) the host functions are
 * served by cd_test_host and the exports become cd_call_json/cd_call_fast.
 *
 * Memory: everything a call allocates is freed before the next call, except
 * the fast path's input and output buffers, which are reused.
 */
#ifndef COMPACTD_H
#define COMPACTD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) || defined(__clang__)
#define CD_API static inline __attribute__((unused))
#else
#define CD_API static inline
#endif

/* ---- Strings and buffers ------------------------------------------------ */

/* cd_str is a UTF-8 byte string: ptr is not NUL-terminated. */
typedef struct {
	const char *ptr;
	size_t len;
} cd_str;

#define CD_STR(lit) ((cd_str){(lit), sizeof(lit) - 1})

CD_API cd_str cd_cstr(const char *s) { return (cd_str){s, s ? strlen(s) : 0}; }

CD_API int cd_str_eq(cd_str a, const char *lit)
{
	size_t n = strlen(lit);
	return a.len == n && memcmp(a.ptr, lit, n) == 0;
}

/* cd_buf is a growable byte buffer; oom is set once an allocation failed
 * (later writes are ignored), so callers check it once at the end. */
typedef struct {
	char *ptr;
	size_t len, cap;
	int oom;
} cd_buf;

CD_API void cd_buf_free(cd_buf *b)
{
	free(b->ptr);
	b->ptr = NULL;
	b->len = b->cap = 0;
	b->oom = 0;
}

CD_API int cd_buf_grow(cd_buf *b, size_t n)
{
	if (b->oom)
		return 0;
	if (b->len + n <= b->cap)
		return 1;
	size_t cap = b->cap ? b->cap : 256;
	while (cap < b->len + n) {
		if (cap > SIZE_MAX / 2) {
			b->oom = 1;
			return 0;
		}
		cap *= 2;
	}
	char *p = realloc(b->ptr, cap);
	if (p == NULL) {
		b->oom = 1;
		return 0;
	}
	b->ptr = p;
	b->cap = cap;
	return 1;
}

CD_API void cd_buf_put(cd_buf *b, const char *s, size_t n)
{
	if (n == 0 || !cd_buf_grow(b, n))
		return;
	memcpy(b->ptr + b->len, s, n);
	b->len += n;
}

CD_API void cd_buf_str(cd_buf *b, cd_str s) { cd_buf_put(b, s.ptr, s.len); }
CD_API void cd_buf_lit(cd_buf *b, const char *s) { cd_buf_put(b, s, strlen(s)); }
CD_API void cd_buf_byte(cd_buf *b, char c) { cd_buf_put(b, &c, 1); }

CD_API void cd_buf_int(cd_buf *b, int64_t v)
{
	char tmp[24];
	size_t i = sizeof tmp;
	uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
	do {
		tmp[--i] = (char)('0' + u % 10);
		u /= 10;
	} while (u != 0);
	if (v < 0)
		tmp[--i] = '-';
	cd_buf_put(b, tmp + i, sizeof tmp - i);
}

/* cd_buf_json_string writes s as a JSON string: quotes, backslashes and
 * control characters are escaped; other bytes (UTF-8 included) are copied
 * as they are. */
CD_API void cd_buf_json_string(cd_buf *b, cd_str s)
{
	static const char hex[] = "0123456789abcdef";
	cd_buf_byte(b, '"');
	size_t start = 0;
	for (size_t i = 0; i < s.len; i++) {
		unsigned char c = (unsigned char)s.ptr[i];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		cd_buf_put(b, s.ptr + start, i - start);
		start = i + 1;
		switch (c) {
		case '"': cd_buf_lit(b, "\\\""); break;
		case '\\': cd_buf_lit(b, "\\\\"); break;
		case '\n': cd_buf_lit(b, "\\n"); break;
		case '\r': cd_buf_lit(b, "\\r"); break;
		case '\t': cd_buf_lit(b, "\\t"); break;
		default: {
			char esc[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
			cd_buf_put(b, esc, 6);
		}
		}
	}
	cd_buf_put(b, s.ptr + start, s.len - start);
	cd_buf_byte(b, '"');
}

/* ---- The request --------------------------------------------------------- */

enum { CD_CONTENT_NULL = 0, CD_CONTENT_TEXT = 1, CD_CONTENT_JSON = 2 };

typedef struct {
	cd_str id, type, name, arguments;
} cd_tool_call;

typedef struct {
	cd_str role;         /* "system", "developer", "user", "assistant", "tool" */
	uint32_t tokens;     /* the host's count for the whole message */
	int content_kind;    /* CD_CONTENT_NULL, _TEXT (content is the text) or _JSON (content parts, as JSON) */
	cd_str content;
	cd_str name;         /* empty when absent */
	cd_str tool_call_id; /* empty when absent */
	size_t n_tool_calls;
	cd_tool_call *tool_calls;
} cd_message;

typedef struct {
	cd_str config;          /* the resolved config object, JSON */
	cd_str model, encoding; /* context.model, context.encoding */
	uint32_t context_window, total_tokens;
	cd_str conversation_id;
	cd_str state; /* context.state as JSON; empty when absent */
	/* context.compact (ABI 1.1): the host has decided to compact. When
	 * has_decision is set the policy compacts now, whatever its own
	 * thresholds say, to fit target_tokens (0: no target given) as well
	 * as it can. On the fast path the host sends it only to a plugin whose
	 * describe says "decision": true. */
	int has_decision;
	cd_str decision_reason; /* usage, preflight, trigger_tokens, overflow, prepare, manual */
	uint32_t target_tokens;
	size_t n_messages;
	cd_message *messages;
} cd_request;

CD_API int cd_is_system(const cd_message *m)
{
	return cd_str_eq(m->role, "system") || cd_str_eq(m->role, "developer");
}

CD_API int cd_is_role(const cd_message *m, const char *role) { return cd_str_eq(m->role, role); }

/* cd_leading_system returns how many messages at the start are system or
 * developer messages: results must keep them first, as refs. */
CD_API size_t cd_leading_system(const cd_request *req)
{
	size_t n = 0;
	while (n < req->n_messages && cd_is_system(&req->messages[n]))
		n++;
	return n;
}

/* A unit is the messages [start, end) that must be kept or dropped
 * together: a message that is not a tool result and the tool results
 * after it (an assistant's calls and their results). */
typedef struct {
	size_t start, end;
} cd_unit;

/* cd_units splits messages [from, n_messages) into units. It returns a
 * malloc'd array (free it) and its length in *count, or NULL when out of
 * memory or when there is nothing to split. */
CD_API cd_unit *cd_units(const cd_request *req, size_t from, size_t *count)
{
	*count = 0;
	if (from >= req->n_messages)
		return NULL;
	cd_unit *u = malloc((req->n_messages - from) * sizeof *u);
	if (u == NULL)
		return NULL;
	size_t n = 0;
	for (size_t i = from; i < req->n_messages; i++) {
		if (n > 0 && cd_is_role(&req->messages[i], "tool")) {
			u[n - 1].end = i + 1;
			continue;
		}
		u[n].start = i;
		u[n].end = i + 1;
		n++;
	}
	*count = n;
	return u;
}

/* ---- Errors -------------------------------------------------------------- */

#define CD_INVALID_REQUEST "invalid_request"
#define CD_INVALID_CONFIG "invalid_config"
#define CD_LLM_UNAVAILABLE "llm_unavailable"
#define CD_INTERNAL "internal"

typedef struct {
	const char *code;
	char message[512];
} cd_error;

/* cd_fail records an error (code is one of CD_INVALID_*, CD_LLM_UNAVAILABLE,
 * CD_INTERNAL) and returns 1, so a policy can `return cd_fail(...)`. The
 * message is copied (cut at 511 bytes); it is escaped when sent. */
CD_API int cd_fail(cd_error *err, const char *code, const char *message)
{
	err->code = code;
	size_t n = strlen(message);
	if (n >= sizeof err->message)
		n = sizeof err->message - 1;
	memcpy(err->message, message, n);
	err->message[n] = '\0';
	return 1;
}

CD_API void cd_error_body(cd_buf *b, const cd_error *err)
{
	cd_buf_lit(b, "{\"code\":");
	cd_buf_json_string(b, cd_cstr(err->code ? err->code : CD_INTERNAL));
	cd_buf_lit(b, ",\"message\":");
	cd_buf_json_string(b, cd_cstr(err->message));
	cd_buf_byte(b, '}');
}

/* ---- JSON reading --------------------------------------------------------
 *
 * A validating reader over a JSON text. cd_json_get finds a key of an
 * object, cd_json_index an element of an array; the value comes back as a
 * cd_str slice of the text, which cd_json_int / cd_json_bool /
 * cd_json_string interpret. Nesting is walked iteratively (no recursion),
 * so hostile depth cannot overflow the stack.
 */

typedef struct {
	const char *s;
	size_t n, i;
	int bad;
} cd__scan;

CD_API void cd__ws(cd__scan *sc)
{
	while (sc->i < sc->n) {
		char c = sc->s[sc->i];
		if (c != ' ' && c != '\t' && c != '\n' && c != '\r')
			break;
		sc->i++;
	}
}

CD_API int cd__peek(cd__scan *sc) { return sc->i < sc->n ? (unsigned char)sc->s[sc->i] : -1; }

CD_API int cd__hex(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* cd__skip_string scans a string at sc->i; *escaped says whether it has escapes. */
CD_API int cd__skip_string(cd__scan *sc, int *escaped)
{
	if (cd__peek(sc) != '"')
		return 0;
	sc->i++;
	if (escaped)
		*escaped = 0;
	while (sc->i < sc->n) {
		unsigned char c = (unsigned char)sc->s[sc->i++];
		if (c == '"')
			return 1;
		if (c < 0x20)
			return 0;
		if (c == '\\') {
			if (escaped)
				*escaped = 1;
			int e = cd__peek(sc);
			sc->i++;
			if (e == 'u') {
				for (int k = 0; k < 4; k++, sc->i++)
					if (cd__hex(cd__peek(sc)) < 0)
						return 0;
			} else if (e < 0 || !strchr("\"\\/bfnrt", e)) {
				return 0;
			}
		}
	}
	return 0;
}

CD_API int cd__skip_scalar(cd__scan *sc)
{
	int c = cd__peek(sc);
	if (c == '"')
		return cd__skip_string(sc, NULL);
	const char *lits[] = {"true", "false", "null"};
	for (int k = 0; k < 3; k++) {
		size_t n = strlen(lits[k]);
		if (c == lits[k][0]) {
			if (sc->n - sc->i < n || memcmp(sc->s + sc->i, lits[k], n) != 0)
				return 0;
			sc->i += n;
			return 1;
		}
	}
	if (c != '-' && (c < '0' || c > '9'))
		return 0;
	if (c == '-')
		sc->i++;
	if (cd__peek(sc) == '0') {
		sc->i++;
	} else {
		if (cd__peek(sc) < '1' || cd__peek(sc) > '9')
			return 0;
		while (cd__peek(sc) >= '0' && cd__peek(sc) <= '9')
			sc->i++;
	}
	if (cd__peek(sc) == '.') {
		sc->i++;
		if (cd__peek(sc) < '0' || cd__peek(sc) > '9')
			return 0;
		while (cd__peek(sc) >= '0' && cd__peek(sc) <= '9')
			sc->i++;
	}
	if (cd__peek(sc) == 'e' || cd__peek(sc) == 'E') {
		sc->i++;
		if (cd__peek(sc) == '+' || cd__peek(sc) == '-')
			sc->i++;
		if (cd__peek(sc) < '0' || cd__peek(sc) > '9')
			return 0;
		while (cd__peek(sc) >= '0' && cd__peek(sc) <= '9')
			sc->i++;
	}
	return 1;
}

/* cd__skip_value scans one value of any kind. Containers are tracked with
 * a depth counter and a bit stack (1 = object), up to 4096 levels. */
CD_API int cd__skip_value(cd__scan *sc)
{
	enum { MAXD = 4096 };
	unsigned char kinds[MAXD / 8] = {0};
	size_t depth = 0;
	for (;;) {
		cd__ws(sc);
		int c = cd__peek(sc);
		if (c == '{' || c == '[') {
			if (depth == MAXD)
				return 0;
			if (c == '{')
				kinds[depth / 8] |= (unsigned char)(1u << (depth % 8));
			else
				kinds[depth / 8] &= (unsigned char)~(1u << (depth % 8));
			depth++;
			sc->i++;
			cd__ws(sc);
			if (cd__peek(sc) == (c == '{' ? '}' : ']')) {
				sc->i++;
				depth--;
			} else {
				if (c == '{') {
					if (!cd__skip_string(sc, NULL))
						return 0;
					cd__ws(sc);
					if (cd__peek(sc) != ':')
						return 0;
					sc->i++;
				}
				continue;
			}
		} else if (!cd__skip_scalar(sc)) {
			return 0;
		}
		for (;;) {
			if (depth == 0)
				return 1;
			int obj = (kinds[(depth - 1) / 8] >> ((depth - 1) % 8)) & 1;
			cd__ws(sc);
			c = cd__peek(sc);
			if (c == ',') {
				sc->i++;
				if (obj) {
					cd__ws(sc);
					if (!cd__skip_string(sc, NULL))
						return 0;
					cd__ws(sc);
					if (cd__peek(sc) != ':')
						return 0;
					sc->i++;
				}
				break;
			}
			if (c == (obj ? '}' : ']')) {
				sc->i++;
				depth--;
				continue;
			}
			return 0;
		}
	}
}

/* cd_json_valid reports whether text is exactly one JSON value. */
CD_API int cd_json_valid(cd_str text)
{
	cd__scan sc = {text.ptr, text.len, 0, 0};
	if (!cd__skip_value(&sc))
		return 0;
	cd__ws(&sc);
	return sc.i == sc.n;
}

/* cd_json_unescape decodes the JSON string token tok (with its quotes) into
 * out (a UTF-8 buffer). \u escapes, surrogate pairs included, become UTF-8;
 * a lone surrogate becomes U+FFFD. */
CD_API void cd_json_unescape(cd_buf *out, cd_str tok)
{
	size_t i = 1, end = tok.len ? tok.len - 1 : 0, start = 1;
	while (i < end) {
		if (tok.ptr[i] != '\\') {
			i++;
			continue;
		}
		cd_buf_put(out, tok.ptr + start, i - start);
		char e = tok.ptr[i + 1];
		i += 2;
		switch (e) {
		case 'b': cd_buf_byte(out, '\b'); break;
		case 'f': cd_buf_byte(out, '\f'); break;
		case 'n': cd_buf_byte(out, '\n'); break;
		case 'r': cd_buf_byte(out, '\r'); break;
		case 't': cd_buf_byte(out, '\t'); break;
		case 'u': {
			uint32_t cp = 0;
			for (int k = 0; k < 4; k++)
				cp = cp * 16 + (uint32_t)cd__hex((unsigned char)tok.ptr[i + k]);
			i += 4;
			if (cp >= 0xD800 && cp < 0xDC00 && i + 6 <= end && tok.ptr[i] == '\\' && tok.ptr[i + 1] == 'u') {
				uint32_t lo = 0;
				for (int k = 0; k < 4; k++)
					lo = lo * 16 + (uint32_t)cd__hex((unsigned char)tok.ptr[i + 2 + k]);
				if (lo >= 0xDC00 && lo < 0xE000) {
					cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
					i += 6;
				}
			}
			if (cp >= 0xD800 && cp < 0xE000)
				cp = 0xFFFD;
			char u[4];
			size_t n;
			if (cp < 0x80) {
				u[0] = (char)cp, n = 1;
			} else if (cp < 0x800) {
				u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 63)), n = 2;
			} else if (cp < 0x10000) {
				u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 63)), u[2] = (char)(0x80 | (cp & 63)), n = 3;
			} else {
				u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | (cp >> 12 & 63)), u[2] = (char)(0x80 | (cp >> 6 & 63)), u[3] = (char)(0x80 | (cp & 63)), n = 4;
			}
			cd_buf_put(out, u, n);
			break;
		}
		default: cd_buf_byte(out, e); /* " \ / */
		}
		start = i;
	}
	cd_buf_put(out, tok.ptr + start, end > start ? end - start : 0);
}

/* cd_json_get finds key in the JSON object obj (the last one wins if a key
 * repeats) and sets *value to its JSON text. It returns 1 if found, 0 if
 * not, and -1 if obj is not a valid object. */
CD_API int cd_json_get(cd_str obj, const char *key, cd_str *value)
{
	cd__scan sc = {obj.ptr, obj.len, 0, 0};
	cd__ws(&sc);
	if (cd__peek(&sc) != '{')
		return -1;
	sc.i++;
	cd__ws(&sc);
	int found = 0;
	if (cd__peek(&sc) == '}') {
		sc.i++;
	} else {
		cd_buf tmp = {0};
		for (;;) {
			cd__ws(&sc);
			size_t ks = sc.i;
			int escaped;
			if (!cd__skip_string(&sc, &escaped)) {
				cd_buf_free(&tmp);
				return -1;
			}
			cd_str k = {obj.ptr + ks + 1, sc.i - ks - 2};
			if (escaped) {
				tmp.len = 0;
				cd_json_unescape(&tmp, (cd_str){obj.ptr + ks, sc.i - ks});
				k = (cd_str){tmp.ptr, tmp.len};
			}
			int match = cd_str_eq(k, key);
			cd__ws(&sc);
			if (cd__peek(&sc) != ':') {
				cd_buf_free(&tmp);
				return -1;
			}
			sc.i++;
			cd__ws(&sc);
			size_t vs = sc.i;
			if (!cd__skip_value(&sc)) {
				cd_buf_free(&tmp);
				return -1;
			}
			if (match) {
				*value = (cd_str){obj.ptr + vs, sc.i - vs};
				found = 1;
			}
			cd__ws(&sc);
			int c = cd__peek(&sc);
			sc.i++;
			if (c == '}')
				break;
			if (c != ',') {
				cd_buf_free(&tmp);
				return -1;
			}
		}
		cd_buf_free(&tmp);
	}
	cd__ws(&sc);
	return sc.i == sc.n ? found : -1;
}

/* cd_json_index sets *value to element i of the JSON array arr. It returns
 * 1 if there is one, 0 if the array is shorter, -1 if arr is not valid. */
CD_API int cd_json_index(cd_str arr, size_t i, cd_str *value)
{
	cd__scan sc = {arr.ptr, arr.len, 0, 0};
	cd__ws(&sc);
	if (cd__peek(&sc) != '[')
		return -1;
	sc.i++;
	cd__ws(&sc);
	if (cd__peek(&sc) == ']')
		return 0;
	for (size_t k = 0;; k++) {
		cd__ws(&sc);
		size_t vs = sc.i;
		if (!cd__skip_value(&sc))
			return -1;
		if (k == i) {
			*value = (cd_str){arr.ptr + vs, sc.i - vs};
			return 1;
		}
		cd__ws(&sc);
		int c = cd__peek(&sc);
		sc.i++;
		if (c == ']')
			return 0;
		if (c != ',')
			return -1;
	}
}

/* cd_json_int reads an integer (JSON Schema's sense: 8, 8.0 and 0.8e1 are
 * integers) into *out. It returns 1, or 0 if the value is not an integer,
 * or -1 if it is an integer too large for an int64_t (then *out is
 * INT64_MAX or INT64_MIN, for callers that clamp). */
CD_API int cd_json_int(cd_str v, int64_t *out)
{
	cd__scan sc = {v.ptr, v.len, 0, 0};
	cd__ws(&sc);
	size_t start = sc.i;
	int c = cd__peek(&sc);
	if (c != '-' && (c < '0' || c > '9'))
		return 0;
	if (!cd__skip_scalar(&sc))
		return 0;
	size_t end = sc.i;
	cd__ws(&sc);
	if (sc.i != sc.n)
		return 0;
	/* digits (int ++ frac) and a decimal exponent */
	int neg = v.ptr[start] == '-';
	size_t i = start + (size_t)neg;
	char digits[40];
	size_t nd = 0;
	int64_t exp = 0;
	int overflow = 0;
	for (; i < end && v.ptr[i] >= '0' && v.ptr[i] <= '9'; i++) {
		if (nd < sizeof digits)
			digits[nd++] = v.ptr[i];
		else
			overflow = 1, exp++;
	}
	if (i < end && v.ptr[i] == '.') {
		for (i++; i < end && v.ptr[i] >= '0' && v.ptr[i] <= '9'; i++) {
			if (nd < sizeof digits)
				digits[nd++] = v.ptr[i], exp--;
		}
	}
	if (i < end && (v.ptr[i] == 'e' || v.ptr[i] == 'E')) {
		i++;
		int eneg = 0;
		if (v.ptr[i] == '+' || v.ptr[i] == '-')
			eneg = v.ptr[i++] == '-';
		int64_t e = 0;
		for (; i < end; i++)
			if (e < 100000)
				e = e * 10 + (v.ptr[i] - '0');
		exp += eneg ? -e : e;
	}
	(void)overflow;
	/* drop trailing zeros into the exponent, leading zeros altogether */
	while (nd > 0 && digits[nd - 1] == '0')
		nd--, exp++;
	size_t first = 0;
	while (first < nd && digits[first] == '0')
		first++;
	if (first == nd) {
		*out = 0;
		return 1;
	}
	if (exp < 0)
		return 0;
	if ((int64_t)(nd - first) + exp > 19) {
		*out = neg ? INT64_MIN : INT64_MAX;
		return -1;
	}
	uint64_t u = 0;
	for (size_t k = first; k < nd; k++)
		u = u * 10 + (uint64_t)(digits[k] - '0');
	for (int64_t k = 0; k < exp; k++) {
		if (u > UINT64_MAX / 10) {
			*out = neg ? INT64_MIN : INT64_MAX;
			return -1;
		}
		u *= 10;
	}
	if (u > (uint64_t)INT64_MAX + (uint64_t)neg) {
		*out = neg ? INT64_MIN : INT64_MAX;
		return -1;
	}
	*out = neg ? (int64_t)(0 - u) : (int64_t)u;
	return 1;
}

/* cd_json_bool reads true or false into *out; 0 if v is neither. */
CD_API int cd_json_bool(cd_str v, int *out)
{
	cd__scan sc = {v.ptr, v.len, 0, 0};
	cd__ws(&sc);
	if (sc.n - sc.i >= 4 && memcmp(v.ptr + sc.i, "true", 4) == 0)
		*out = 1, sc.i += 4;
	else if (sc.n - sc.i >= 5 && memcmp(v.ptr + sc.i, "false", 5) == 0)
		*out = 0, sc.i += 5;
	else
		return 0;
	cd__ws(&sc);
	return sc.i == sc.n;
}

/* cd_json_string decodes the JSON string v into out (appended); 0 if v is
 * not a string. */
CD_API int cd_json_string(cd_str v, cd_buf *out)
{
	cd__scan sc = {v.ptr, v.len, 0, 0};
	cd__ws(&sc);
	size_t start = sc.i;
	if (!cd__skip_string(&sc, NULL))
		return 0;
	cd_str tok = {v.ptr + start, sc.i - start};
	cd__ws(&sc);
	if (sc.i != sc.n)
		return 0;
	cd_json_unescape(out, tok);
	return 1;
}

/* cd_config_int reads the integer config key into *out, which keeps its
 * value when the key is absent. Out-of-range values (below min or above
 * max) and non-integers fail with invalid_config. */
CD_API int cd_config_int(const cd_request *req, const char *key, int64_t min, int64_t max, int64_t *out, cd_error *err)
{
	cd_str v;
	int r = req->config.len ? cd_json_get(req->config, key, &v) : 0;
	if (r < 0)
		return cd_fail(err, CD_INVALID_CONFIG, "config is not a JSON object");
	if (r == 0)
		return 0;
	char msg[160];
	int64_t n;
	int r2 = cd_json_int(v, &n);
	if (r2 == 0) {
		snprintf(msg, sizeof msg, "config: %s must be an integer", key);
		return cd_fail(err, CD_INVALID_CONFIG, msg);
	}
	if (r2 < 0 || n < min || n > max) {
		snprintf(msg, sizeof msg, "config: %s must be between %lld and %lld", key, (long long)min, (long long)max);
		return cd_fail(err, CD_INVALID_CONFIG, msg);
	}
	*out = n;
	return 0;
}

/* cd_config_bool reads a boolean config key into *out (kept when absent). */
CD_API int cd_config_bool(const cd_request *req, const char *key, int *out, cd_error *err)
{
	cd_str v;
	int r = req->config.len ? cd_json_get(req->config, key, &v) : 0;
	if (r < 0)
		return cd_fail(err, CD_INVALID_CONFIG, "config is not a JSON object");
	if (r == 1 && !cd_json_bool(v, out)) {
		char msg[160];
		snprintf(msg, sizeof msg, "config: %s must be true or false", key);
		return cd_fail(err, CD_INVALID_CONFIG, msg);
	}
	return 0;
}

/* ---- The result ---------------------------------------------------------- */

/* cd_result builds a CompactResult. Add items in output order with
 * cd_keep (a ref to an input message) and cd_add_message (a new message). */
typedef struct {
	cd_buf items, rewritten, warnings, summary, state;
	size_t n_items, n_rewritten, n_warnings;
	int compacted;
	int64_t entries_summarized;
	int has_state;
	/* marks (ABI 1.1): output positions marked as prompt-cache
	 * breakpoints; see cd_mark. */
	int64_t marks[3];
	size_t n_marks;
} cd_result;

CD_API void cd_result_free(cd_result *r)
{
	cd_buf_free(&r->items);
	cd_buf_free(&r->rewritten);
	cd_buf_free(&r->warnings);
	cd_buf_free(&r->summary);
	cd_buf_free(&r->state);
	memset(r, 0, sizeof *r);
}

/* cd_keep appends {"ref": i}: input message i, byte for byte. */
CD_API void cd_keep(cd_result *r, size_t i)
{
	cd_buf_lit(&r->items, r->n_items++ ? ",{\"ref\":" : "{\"ref\":");
	cd_buf_int(&r->items, (int64_t)i);
	cd_buf_byte(&r->items, '}');
}

/* cd_keep_all keeps every input message (an unchanged result). */
CD_API void cd_keep_all(cd_result *r, const cd_request *req)
{
	for (size_t i = 0; i < req->n_messages; i++)
		cd_keep(r, i);
}

/* cd_add_message appends a new message with text content. tool_call_id
 * and name may be empty. A tool message must stay where its call is. */
CD_API void cd_add_message(cd_result *r, const char *role, cd_str content, cd_str tool_call_id, cd_str name)
{
	cd_buf *b = &r->items;
	cd_buf_lit(b, r->n_items++ ? ",{\"role\":" : "{\"role\":");
	cd_buf_json_string(b, cd_cstr(role));
	cd_buf_lit(b, ",\"content\":");
	cd_buf_json_string(b, content);
	if (tool_call_id.len) {
		cd_buf_lit(b, ",\"tool_call_id\":");
		cd_buf_json_string(b, tool_call_id);
	}
	if (name.len) {
		cd_buf_lit(b, ",\"name\":");
		cd_buf_json_string(b, name);
	}
	cd_buf_byte(b, '}');
}

/* cd_rewrote records that input message i was replaced by a new message. */
CD_API void cd_rewrote(cd_result *r, size_t i)
{
	if (r->n_rewritten++)
		cd_buf_byte(&r->rewritten, ',');
	cd_buf_int(&r->rewritten, (int64_t)i);
}

CD_API void cd_warn(cd_result *r, cd_str warning)
{
	if (r->n_warnings++)
		cd_buf_byte(&r->warnings, ',');
	cd_buf_json_string(&r->warnings, warning);
}

/* cd_set_state makes json (a JSON value) the conversation's new state. */
CD_API void cd_set_state(cd_result *r, cd_str json)
{
	r->state.len = 0;
	cd_buf_str(&r->state, json);
	r->has_state = 1;
}

/* cd_mark marks output position i (0-based, in the order of cd_keep and
 * cd_add_message) as a prompt-cache breakpoint (ABI 1.1, abi/README.md
 * "Cache breakpoints"): the end of a part of the result that stays
 * byte-stable between requests. It returns 0, or -1 when i is already
 * marked or 3 positions are (the ABI's limit); the host checks that i is
 * in range. */
CD_API int cd_mark(cd_result *r, size_t i)
{
	for (size_t k = 0; k < r->n_marks; k++)
		if (r->marks[k] == (int64_t)i)
			return -1;
	if (r->n_marks == sizeof r->marks / sizeof r->marks[0])
		return -1;
	r->marks[r->n_marks++] = (int64_t)i;
	return 0;
}

CD_API void cd_result_json(cd_buf *b, const cd_result *r)
{
	cd_buf_lit(b, "{\"messages\":[");
	cd_buf_put(b, r->items.ptr, r->items.len);
	cd_buf_lit(b, r->compacted ? "],\"compacted\":true" : "],\"compacted\":false");
	cd_buf_lit(b, ",\"summary\":");
	cd_buf_json_string(b, (cd_str){r->summary.ptr, r->summary.len});
	cd_buf_lit(b, ",\"entries_summarized\":");
	cd_buf_int(b, r->entries_summarized);
	if (r->n_rewritten) {
		cd_buf_lit(b, ",\"rewritten\":[");
		cd_buf_put(b, r->rewritten.ptr, r->rewritten.len);
		cd_buf_byte(b, ']');
	}
	if (r->n_warnings) {
		cd_buf_lit(b, ",\"warnings\":[");
		cd_buf_put(b, r->warnings.ptr, r->warnings.len);
		cd_buf_byte(b, ']');
	}
	if (r->has_state) {
		cd_buf_lit(b, ",\"state\":");
		cd_buf_put(b, r->state.ptr, r->state.len);
	}
	if (r->n_marks) {
		cd_buf_lit(b, ",\"cache_breakpoints\":[");
		for (size_t k = 0; k < r->n_marks; k++) {
			if (k)
				cd_buf_byte(b, ',');
			cd_buf_int(b, r->marks[k]);
		}
		cd_buf_byte(b, ']');
	}
	cd_buf_byte(b, '}');
}

/* ---- Decoding requests --------------------------------------------------- */

/* cd_arena keeps what a request decoded from JSON owns (unescaped
 * strings, message arrays); freed after the call. */
typedef struct {
	void **ptrs;
	size_t n, cap;
} cd_arena;

CD_API void *cd__keep(cd_arena *a, void *p)
{
	if (p == NULL)
		return NULL;
	if (a->n == a->cap) {
		size_t cap = a->cap ? a->cap * 2 : 64;
		void **np = realloc(a->ptrs, cap * sizeof *np);
		if (np == NULL) {
			free(p);
			return NULL;
		}
		a->ptrs = np;
		a->cap = cap;
	}
	a->ptrs[a->n++] = p;
	return p;
}

CD_API void cd_arena_free(cd_arena *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->ptrs[i]);
	free(a->ptrs);
	memset(a, 0, sizeof *a);
}

/* cd_decode_fast decodes the fast path's binary request (abi/fastwire.go).
 * Strings point into in, which must outlive the request. */
CD_API int cd_decode_fast(const char *in, size_t n, cd_request *req, cd_arena *arena, cd_error *err)
{
	size_t off = 4;
	memset(req, 0, sizeof *req);
	if (n < 4 || memcmp(in, "CDF1", 4) != 0)
		return cd_fail(err, CD_INVALID_REQUEST, "fast request: bad magic");
	int bad = 0;
#define CD__U32(dst)                                   \
	do {                                               \
		if (n - off < 4) {                             \
			bad = 1;                                   \
			(dst) = 0;                                 \
		} else {                                       \
			uint32_t v_;                               \
			memcpy(&v_, in + off, 4);                  \
			(dst) = v_;                                \
			off += 4;                                  \
		}                                              \
	} while (0)
#define CD__STR(dst)                                   \
	do {                                               \
		uint32_t l_;                                   \
		CD__U32(l_);                                   \
		if (bad || n - off < l_) {                     \
			bad = 1;                                   \
			(dst) = (cd_str){NULL, 0};                 \
		} else {                                       \
			(dst) = (cd_str){in + off, l_};            \
			off += l_;                                 \
		}                                              \
	} while (0)
	CD__STR(req->config);
	CD__STR(req->model);
	CD__STR(req->encoding);
	CD__U32(req->context_window);
	CD__U32(req->total_tokens);
	CD__STR(req->conversation_id);
	CD__STR(req->state);
	uint32_t count;
	CD__U32(count);
	if (bad || count > (n - off) / 25 + 1)
		return cd_fail(err, CD_INVALID_REQUEST, "fast request: truncated");
	req->messages = cd__keep(arena, calloc(count ? count : 1, sizeof *req->messages));
	if (req->messages == NULL)
		return cd_fail(err, CD_INTERNAL, "out of memory");
	req->n_messages = count;
	for (uint32_t i = 0; i < count && !bad; i++) {
		cd_message *m = &req->messages[i];
		CD__STR(m->role);
		CD__U32(m->tokens);
		if (n - off < 1) {
			bad = 1;
			break;
		}
		m->content_kind = (unsigned char)in[off++];
		if (m->content_kind > CD_CONTENT_JSON)
			bad = 1;
		CD__STR(m->content);
		CD__STR(m->name);
		CD__STR(m->tool_call_id);
		uint32_t calls;
		CD__U32(calls);
		if (bad || calls > (n - off) / 16 + 1) {
			bad = 1;
			break;
		}
		if (calls) {
			m->tool_calls = cd__keep(arena, calloc(calls, sizeof *m->tool_calls));
			if (m->tool_calls == NULL)
				return cd_fail(err, CD_INTERNAL, "out of memory");
			m->n_tool_calls = calls;
			for (uint32_t k = 0; k < calls; k++) {
				CD__STR(m->tool_calls[k].id);
				CD__STR(m->tool_calls[k].type);
				CD__STR(m->tool_calls[k].name);
				CD__STR(m->tool_calls[k].arguments);
			}
		}
	}
	/* The host's decision, after the messages (ABI 1.1). */
	if (!bad && off < n && in[off] == 1) {
		off++;
		CD__STR(req->decision_reason);
		CD__U32(req->target_tokens);
		req->has_decision = !bad;
	}
#undef CD__STR
#undef CD__U32
	if (bad || off != n)
		return cd_fail(err, CD_INVALID_REQUEST, "fast request: malformed");
	return 0;
}

/* cd_encode_fast appends the fast path's binary form of req to out: what
 * the host sends (tests use it to check both paths give one result). */
CD_API void cd_encode_fast(const cd_request *req, cd_buf *out)
{
#define CD__PUT32(v)                      \
	do {                                  \
		uint32_t v_ = (uint32_t)(v);      \
		cd_buf_put(out, (char *)&v_, 4);  \
	} while (0)
#define CD__PUTS(s)                       \
	do {                                  \
		CD__PUT32((s).len);               \
		cd_buf_str(out, (s));             \
	} while (0)
	cd_buf_lit(out, "CDF1");
	CD__PUTS(req->config);
	CD__PUTS(req->model);
	CD__PUTS(req->encoding);
	CD__PUT32(req->context_window);
	CD__PUT32(req->total_tokens);
	CD__PUTS(req->conversation_id);
	CD__PUTS(req->state);
	CD__PUT32(req->n_messages);
	for (size_t i = 0; i < req->n_messages; i++) {
		const cd_message *m = &req->messages[i];
		CD__PUTS(m->role);
		CD__PUT32(m->tokens);
		cd_buf_byte(out, (char)m->content_kind);
		CD__PUTS(m->content);
		CD__PUTS(m->name);
		CD__PUTS(m->tool_call_id);
		CD__PUT32(m->n_tool_calls);
		for (size_t k = 0; k < m->n_tool_calls; k++) {
			CD__PUTS(m->tool_calls[k].id);
			CD__PUTS(m->tool_calls[k].type);
			CD__PUTS(m->tool_calls[k].name);
			CD__PUTS(m->tool_calls[k].arguments);
		}
	}
	if (req->has_decision) {
		cd_buf_byte(out, 1);
		CD__PUTS(req->decision_reason);
		CD__PUT32(req->target_tokens);
	}
#undef CD__PUTS
#undef CD__PUT32
}

/* cd__jstr decodes the JSON string token v into an arena-owned cd_str. */
CD_API int cd__jstr(cd_str v, cd_str *out, cd_arena *arena)
{
	cd_buf b = {0};
	if (!cd_json_string(v, &b))
		return 0;
	if (b.oom || (b.len && cd__keep(arena, b.ptr) == NULL))
		return -1;
	*out = (cd_str){b.ptr, b.len};
	return 1;
}

/* cd_json_iter walks the members of a JSON object or the elements of an
 * array, once, in order: cd_json_next returns 1 with the next key token
 * (with its quotes; empty for arrays) and value, 0 at the end, -1 when the
 * container is not valid JSON. */
typedef struct {
	cd__scan sc;
	int object, started, done;
} cd_json_iter;

CD_API int cd_json_iter_init(cd_json_iter *it, cd_str container)
{
	memset(it, 0, sizeof *it);
	it->sc = (cd__scan){container.ptr, container.len, 0, 0};
	cd__ws(&it->sc);
	int c = cd__peek(&it->sc);
	if (c != '{' && c != '[')
		return -1;
	it->object = c == '{';
	it->sc.i++;
	return 0;
}

CD_API int cd_json_next(cd_json_iter *it, cd_str *key, cd_str *value)
{
	cd__scan *sc = &it->sc;
	if (it->done)
		return 0;
	cd__ws(sc);
	int c = cd__peek(sc);
	if (c == (it->object ? '}' : ']')) {
		sc->i++;
		it->done = 1;
		return 0;
	}
	if (it->started) {
		if (c != ',')
			return -1;
		sc->i++;
		cd__ws(sc);
	}
	it->started = 1;
	*key = (cd_str){sc->s + sc->i, 0};
	if (it->object) {
		size_t ks = sc->i;
		if (!cd__skip_string(sc, NULL))
			return -1;
		*key = (cd_str){sc->s + ks, sc->i - ks};
		cd__ws(sc);
		if (cd__peek(sc) != ':')
			return -1;
		sc->i++;
		cd__ws(sc);
	}
	size_t vs = sc->i;
	if (!cd__skip_value(sc))
		return -1;
	*value = (cd_str){sc->s + vs, sc->i - vs};
	return 1;
}

/* cd_json_key_is reports whether the key token (with quotes) decodes to lit. */
CD_API int cd_json_key_is(cd_str tok, const char *lit)
{
	if (tok.len < 2)
		return 0;
	if (memchr(tok.ptr, '\\', tok.len) == NULL)
		return cd_str_eq((cd_str){tok.ptr + 1, tok.len - 2}, lit);
	cd_buf b = {0};
	cd_json_unescape(&b, tok);
	int eq = !b.oom && cd_str_eq((cd_str){b.ptr, b.len}, lit);
	cd_buf_free(&b);
	return eq;
}

CD_API int cd__is_null(cd_str v) { return v.len == 4 && memcmp(v.ptr, "null", 4) == 0; }

/* cd__decode_call reads one tool call object. */
CD_API int cd__decode_call(cd_str obj, cd_tool_call *c, cd_arena *arena)
{
	cd_json_iter it, fit;
	cd_str k, v, fk, fv;
	int r;
	if (cd_json_iter_init(&it, obj) < 0 || !it.object)
		return 0;
	while ((r = cd_json_next(&it, &k, &v)) == 1) {
		if (cd_json_key_is(k, "id")) {
			if (cd__jstr(v, &c->id, arena) < 0)
				return -1;
		} else if (cd_json_key_is(k, "type")) {
			if (cd__jstr(v, &c->type, arena) < 0)
				return -1;
		} else if (cd_json_key_is(k, "function") && cd_json_iter_init(&fit, v) == 0 && fit.object) {
			while (cd_json_next(&fit, &fk, &fv) == 1) {
				if (cd_json_key_is(fk, "name") && cd__jstr(fv, &c->name, arena) < 0)
					return -1;
				if (cd_json_key_is(fk, "arguments") && cd__jstr(fv, &c->arguments, arena) < 0)
					return -1;
			}
		}
	}
	return r == 0;
}

/* cd__decode_message reads one message object: 1, 0 (invalid), -1 (oom). */
CD_API int cd__decode_message(cd_str obj, cd_message *m, cd_arena *arena)
{
	cd_json_iter it;
	cd_str k, v;
	int r, has_role = 0;
	int64_t num;
	if (cd_json_iter_init(&it, obj) < 0 || !it.object)
		return 0;
	while ((r = cd_json_next(&it, &k, &v)) == 1) {
		if (cd_json_key_is(k, "role")) {
			int got = cd__jstr(v, &m->role, arena);
			if (got < 0)
				return -1;
			has_role = got == 1 && m->role.len > 0;
		} else if (cd_json_key_is(k, "tokens")) {
			if (cd_json_int(v, &num) == 1 && num >= 0 && num <= UINT32_MAX)
				m->tokens = (uint32_t)num;
		} else if (cd_json_key_is(k, "content")) {
			m->content_kind = CD_CONTENT_NULL;
			m->content = (cd_str){NULL, 0};
			if (v.len && v.ptr[0] == '"') {
				m->content_kind = CD_CONTENT_TEXT;
				if (cd__jstr(v, &m->content, arena) < 0)
					return -1;
			} else if (!cd__is_null(v)) {
				m->content_kind = CD_CONTENT_JSON;
				m->content = v;
			}
		} else if (cd_json_key_is(k, "name")) {
			if (cd__jstr(v, &m->name, arena) < 0)
				return -1;
		} else if (cd_json_key_is(k, "tool_call_id")) {
			if (cd__jstr(v, &m->tool_call_id, arena) < 0)
				return -1;
		} else if (cd_json_key_is(k, "tool_calls") && !cd__is_null(v)) {
			cd_json_iter ci;
			cd_str ck, cv;
			size_t n = 0;
			if (cd_json_iter_init(&ci, v) < 0 || ci.object)
				return 0;
			while (cd_json_next(&ci, &ck, &cv) == 1)
				n++;
			m->n_tool_calls = 0;
			if (n == 0)
				continue;
			m->tool_calls = cd__keep(arena, calloc(n, sizeof *m->tool_calls));
			if (m->tool_calls == NULL)
				return -1;
			cd_json_iter_init(&ci, v);
			while (cd_json_next(&ci, &ck, &cv) == 1) {
				int cr = cd__decode_call(cv, &m->tool_calls[m->n_tool_calls++], arena);
				if (cr <= 0)
					return cr;
			}
		}
	}
	return r == 0 && has_role;
}

/* cd_decode_json decodes the Extism path's JSON CompactRequest, in one
 * pass over the text. Strings are unescaped into the arena. */
CD_API int cd_decode_json(const char *in, size_t n, cd_request *req, cd_arena *arena, cd_error *err)
{
	cd_str doc = {in, n}, k, v, msgs = {NULL, 0};
	cd_json_iter it;
	int r;
	memset(req, 0, sizeof *req);
#define CD__FAIL(msg) return cd_fail(err, CD_INVALID_REQUEST, msg)
#define CD__OOM() return cd_fail(err, CD_INTERNAL, "out of memory")
	if (!cd_json_valid(doc))
		CD__FAIL("the request is not valid JSON");
	if (cd_json_iter_init(&it, doc) < 0 || !it.object)
		CD__FAIL("the request is not a JSON object");
	while ((r = cd_json_next(&it, &k, &v)) == 1) {
		if (cd_json_key_is(k, "config")) {
			req->config = cd__is_null(v) ? (cd_str){NULL, 0} : v;
		} else if (cd_json_key_is(k, "messages")) {
			msgs = v;
		} else if (cd_json_key_is(k, "context") && !cd__is_null(v)) {
			cd_json_iter ct;
			cd_str ck, cv;
			int64_t num;
			if (cd_json_iter_init(&ct, v) < 0 || !ct.object)
				CD__FAIL("context is not an object");
			while (cd_json_next(&ct, &ck, &cv) == 1) {
				int got = 1;
				if (cd_json_key_is(ck, "model"))
					got = cd__jstr(cv, &req->model, arena);
				else if (cd_json_key_is(ck, "encoding"))
					got = cd__jstr(cv, &req->encoding, arena);
				else if (cd_json_key_is(ck, "conversation_id"))
					got = cd__jstr(cv, &req->conversation_id, arena);
				else if (cd_json_key_is(ck, "context_window") && cd_json_int(cv, &num) == 1 && num >= 0 && num <= UINT32_MAX)
					req->context_window = (uint32_t)num;
				else if (cd_json_key_is(ck, "total_tokens") && cd_json_int(cv, &num) == 1 && num >= 0 && num <= UINT32_MAX)
					req->total_tokens = (uint32_t)num;
				else if (cd_json_key_is(ck, "state"))
					req->state = cd__is_null(cv) ? (cd_str){NULL, 0} : cv;
				else if (cd_json_key_is(ck, "compact") && !cd__is_null(cv)) {
					cd_json_iter dt;
					cd_str dk, dv;
					if (cd_json_iter_init(&dt, cv) < 0 || !dt.object)
						CD__FAIL("context.compact is not an object");
					req->has_decision = 1;
					while (cd_json_next(&dt, &dk, &dv) == 1) {
						if (cd_json_key_is(dk, "reason"))
							got = cd__jstr(dv, &req->decision_reason, arena);
						else if (cd_json_key_is(dk, "target_tokens") && cd_json_int(dv, &num) == 1 && num >= 0 && num <= UINT32_MAX)
							req->target_tokens = (uint32_t)num;
						if (got < 0)
							CD__OOM();
					}
				}
				if (got < 0)
					CD__OOM();
			}
		}
	}
	if (r < 0)
		CD__FAIL("the request is not valid JSON");
	if (msgs.ptr == NULL || cd_json_iter_init(&it, msgs) < 0 || it.object)
		CD__FAIL("the request has no messages array");
	size_t cap = 0;
	while ((r = cd_json_next(&it, &k, &v)) == 1) {
		if (req->n_messages == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			cd_message *nm = realloc(req->messages, ncap * sizeof *nm);
			if (nm == NULL) {
				free(req->messages);
				req->messages = NULL;
				CD__OOM();
			}
			req->messages = nm;
			cap = ncap;
		}
		cd_message *m = &req->messages[req->n_messages++];
		memset(m, 0, sizeof *m);
		int mr = cd__decode_message(v, m, arena);
		if (mr < 0) {
			cd__keep(arena, req->messages);
			CD__OOM();
		}
		if (mr == 0) {
			cd__keep(arena, req->messages);
			CD__FAIL("a message is not an object with a role");
		}
	}
	if (req->messages && cd__keep(arena, req->messages) == NULL)
		CD__OOM();
#undef CD__FAIL
#undef CD__OOM
	return 0;
}

/* ---- Host functions ------------------------------------------------------ */

#ifdef __wasm__
#define CD__IMPORT(mod, name) __attribute__((import_module(mod), import_name(name)))
CD__IMPORT("extism:host/env", "input_length") extern uint64_t cd__input_length(void);
CD__IMPORT("extism:host/env", "input_load_u64") extern uint64_t cd__input_load_u64(uint64_t);
CD__IMPORT("extism:host/env", "input_load_u8") extern uint32_t cd__input_load_u8(uint64_t);
CD__IMPORT("extism:host/env", "alloc") extern uint64_t cd__alloc(uint64_t);
CD__IMPORT("extism:host/env", "free") extern void cd__free(uint64_t);
CD__IMPORT("extism:host/env", "length") extern uint64_t cd__length(uint64_t);
CD__IMPORT("extism:host/env", "load_u64") extern uint64_t cd__load_u64(uint64_t);
CD__IMPORT("extism:host/env", "load_u8") extern uint32_t cd__load_u8(uint64_t);
CD__IMPORT("extism:host/env", "store_u64") extern void cd__store_u64(uint64_t, uint64_t);
CD__IMPORT("extism:host/env", "store_u8") extern void cd__store_u8(uint64_t, uint32_t);
CD__IMPORT("extism:host/env", "output_set") extern void cd__output_set(uint64_t, uint64_t);
CD__IMPORT("extism:host/env", "error_set") extern void cd__error_set(uint64_t);
CD__IMPORT("extism:host/env", "log_debug") extern void cd__log_debug(uint64_t);
CD__IMPORT("extism:host/env", "log_info") extern void cd__log_info(uint64_t);
CD__IMPORT("extism:host/env", "log_warn") extern void cd__log_warn(uint64_t);
CD__IMPORT("extism:host/env", "log_error") extern void cd__log_error(uint64_t);
CD__IMPORT("extism:host/user", "count_tokens") extern uint64_t cd__count_tokens(uint64_t);
CD__IMPORT("extism:host/user", "llm_complete") extern uint64_t cd__llm_complete(uint64_t);

/* cd__to_kernel copies bytes into a new kernel block (0 if alloc failed). */
CD_API uint64_t cd__to_kernel(const char *p, size_t n)
{
	uint64_t off = cd__alloc(n);
	if (off == 0)
		return 0;
	size_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w;
		memcpy(&w, p + i, 8);
		cd__store_u64(off + i, w);
	}
	for (; i < n; i++)
		cd__store_u8(off + i, (uint8_t)p[i]);
	return off;
}

CD_API void cd__from_kernel(uint64_t off, cd_buf *out)
{
	uint64_t n = cd__length(off);
	if (!cd_buf_grow(out, (size_t)n))
		return;
	uint64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w = cd__load_u64(off + i);
		memcpy(out->ptr + out->len + i, &w, 8);
	}
	for (; i < n; i++)
		out->ptr[out->len + i] = (char)cd__load_u8(off + i);
	out->len += (size_t)n;
}

/* cd_count_tokens returns text's token count with the request's tokenizer. */
CD_API int64_t cd_count_tokens(cd_str text)
{
	if (text.len == 0)
		return 0;
	uint64_t off = cd__to_kernel(text.ptr, text.len);
	if (off == 0)
		return (int64_t)(text.len + 3) / 4;
	uint64_t n = cd__count_tokens(off);
	cd__free(off);
	return (int64_t)n;
}

/* cd_llm_complete sends request_json (an LLMRequest) to the host's LLM
 * provider and appends the LLMResponse JSON to out. A failed call is an
 * answer with an "error" object (read it with cd_json_get). */
CD_API void cd_llm_complete(cd_str request_json, cd_buf *out)
{
	uint64_t in = cd__to_kernel(request_json.ptr, request_json.len);
	uint64_t res = cd__llm_complete(in);
	cd__free(in);
	if (res == 0) {
		cd_buf_lit(out, "{\"error\":{\"code\":\"provider_error\",\"message\":\"llm_complete returned nothing\"}}");
		return;
	}
	cd__from_kernel(res, out);
	cd__free(res);
}

enum { CD_LOG_DEBUG, CD_LOG_INFO, CD_LOG_WARN, CD_LOG_ERROR };

/* cd_log writes msg to the plugin's log on the host. */
CD_API void cd_log(int level, cd_str msg)
{
	uint64_t off = cd__to_kernel(msg.ptr, msg.len);
	if (off == 0)
		return;
	switch (level) { /* the host frees the block */
	case CD_LOG_DEBUG: cd__log_debug(off); break;
	case CD_LOG_WARN: cd__log_warn(off); break;
	case CD_LOG_ERROR: cd__log_error(off); break;
	default: cd__log_info(off);
	}
}

#else /* native builds: unit tests */

enum { CD_LOG_DEBUG, CD_LOG_INFO, CD_LOG_WARN, CD_LOG_ERROR };

/* cd_test_host serves the host functions in native tests. Its zero value
 * counts a token per four bytes (rounded up), has no LLM provider and
 * drops logs. */
typedef struct {
	int64_t (*count_tokens)(cd_str text);
	/* llm appends an LLMResponse JSON for request_json to out. */
	void (*llm)(cd_str request_json, cd_buf *out);
	void (*log)(int level, cd_str msg);
} cd_test_host_t;

static cd_test_host_t cd_test_host;

CD_API int64_t cd_count_tokens(cd_str text)
{
	if (cd_test_host.count_tokens)
		return cd_test_host.count_tokens(text);
	return (int64_t)(text.len + 3) / 4;
}

CD_API void cd_llm_complete(cd_str request_json, cd_buf *out)
{
	if (cd_test_host.llm) {
		cd_test_host.llm(request_json, out);
		return;
	}
	cd_buf_lit(out, "{\"error\":{\"code\":\"no_provider\",\"message\":\"no LLM provider configured\"},\"usage\":{\"input_tokens\":0,\"output_tokens\":0}}");
}

CD_API void cd_log(int level, cd_str msg)
{
	if (cd_test_host.log)
		cd_test_host.log(level, msg);
}
#endif

/* ---- Running a call ------------------------------------------------------ */

typedef int (*cd_compact_fn)(const cd_request *req, cd_result *res, cd_error *err);

enum { CD_FN_PING = 0, CD_FN_DESCRIBE = 1, CD_FN_COMPACT = 2, CD_FN_SHOULD_COMPACT = 3 };

/* cd_run runs function fn on input (binary if fast, else JSON) and appends
 * its JSON output, or its JSON error body, to out. It returns 0 or 1. */
CD_API int cd_run(const char *describe, cd_compact_fn compact, int fn, const char *in, size_t n, int fast, cd_buf *out)
{
	cd_error err = {0};
	size_t base = out->len; /* the fast path's status byte comes first */
	if (fn == CD_FN_DESCRIBE) {
		cd_buf_lit(out, describe);
		return 0;
	}
	if (fn != CD_FN_COMPACT) {
		cd_fail(&err, CD_INVALID_REQUEST, "unknown function");
		cd_error_body(out, &err);
		return 1;
	}
	cd_request req;
	cd_arena arena = {0};
	int rc = fast ? cd_decode_fast(in, n, &req, &arena, &err) : cd_decode_json(in, n, &req, &arena, &err);
	if (rc == 0 && req.n_messages == 0)
		rc = cd_fail(&err, CD_INVALID_REQUEST, "the request has no messages");
	cd_result res = {0};
	if (rc == 0)
		rc = compact(&req, &res, &err);
	if (rc == 0) {
		cd_result_json(out, &res);
		if (out->oom || res.items.oom || res.summary.oom || res.rewritten.oom || res.warnings.oom || res.state.oom) {
			out->len = base;
			out->oom = 0;
			rc = cd_fail(&err, CD_INTERNAL, "out of memory writing the result");
		}
	}
	if (rc != 0) {
		if (err.code == NULL)
			cd_fail(&err, CD_INTERNAL, "the policy failed without an error");
		out->len = base;
		cd_error_body(out, &err);
	}
	cd_result_free(&res);
	cd_arena_free(&arena);
	return rc != 0;
}

#ifdef __wasm__

/* The fast path's buffers live until the next call (the host reads the
 * output after the call returns). */
static char *cd__fast_in;
static size_t cd__fast_cap;
static cd_buf cd__fast_out;

CD_API uint32_t cd__fast_alloc(uint32_t size)
{
	size_t need = size ? size : 1;
	if (need > cd__fast_cap || (cd__fast_cap > (4u << 20) && need < cd__fast_cap / 4)) {
		free(cd__fast_in);
		cd__fast_in = malloc(need);
		cd__fast_cap = cd__fast_in ? need : 0;
	}
	return (uint32_t)(uintptr_t)cd__fast_in;
}

CD_API uint64_t cd__fast_call(const char *describe, cd_compact_fn compact, uint32_t fn, uint32_t ptr, uint32_t size)
{
	cd__fast_out.len = 0;
	cd__fast_out.oom = 0;
	if (cd__fast_out.cap > (4u << 20))
		cd_buf_free(&cd__fast_out);
	cd_buf_byte(&cd__fast_out, 0);
	int rc = 0;
	if (fn != CD_FN_PING) {
		if (cd__fast_in == NULL || ptr != (uint32_t)(uintptr_t)cd__fast_in || size > cd__fast_cap) {
			cd_error err;
			cd_fail(&err, CD_INVALID_REQUEST, "fast-path input is not the buffer compactd_fast_v1_alloc returned");
			cd_error_body(&cd__fast_out, &err);
			rc = 1;
		} else {
			rc = cd_run(describe, compact, (int)fn, cd__fast_in, size, 1, &cd__fast_out);
		}
	}
	if (cd__fast_out.oom)
		return 0; /* an empty output: the host reports it */
	cd__fast_out.ptr[0] = (char)rc;
	return (uint64_t)(uintptr_t)cd__fast_out.ptr << 32 | cd__fast_out.len;
}

CD_API int32_t cd__extism_call(const char *describe, cd_compact_fn compact, int fn)
{
	uint64_t n = fn == CD_FN_DESCRIBE ? 0 : cd__input_length();
	char *in = malloc(n ? (size_t)n : 1);
	cd_buf out = {0};
	int rc;
	if (in == NULL) {
		cd_error err;
		cd_fail(&err, CD_INTERNAL, "out of memory reading the input");
		cd_error_body(&out, &err);
		rc = 1;
	} else {
		uint64_t i = 0;
		for (; i + 8 <= n; i += 8) {
			uint64_t w = cd__input_load_u64(i);
			memcpy(in + i, &w, 8);
		}
		for (; i < n; i++)
			in[i] = (char)cd__input_load_u8(i);
		rc = cd_run(describe, compact, fn, in, (size_t)n, 0, &out);
		free(in);
	}
	uint64_t off = out.oom ? 0 : cd__to_kernel(out.ptr, out.len);
	if (off != 0) {
		if (rc)
			cd__error_set(off);
		else
			cd__output_set(off, out.len);
	}
	cd_buf_free(&out);
	return off == 0 ? 1 : rc;
}

/* COMPACTD_POLICY defines the plugin's exports for a description (a JSON
 * string literal) and a compact function. */
#define COMPACTD_POLICY(DESCRIBE, COMPACT)                                                          \
	__attribute__((export_name("describe"))) int32_t cd_export_describe(void)                       \
	{                                                                                               \
		return cd__extism_call(DESCRIBE, COMPACT, CD_FN_DESCRIBE);                                  \
	}                                                                                               \
	__attribute__((export_name("compact"))) int32_t cd_export_compact(void)                         \
	{                                                                                               \
		return cd__extism_call(DESCRIBE, COMPACT, CD_FN_COMPACT);                                   \
	}                                                                                               \
	__attribute__((export_name("compactd_fast_v1_alloc"))) uint32_t cd_export_fast_alloc(uint32_t s) \
	{                                                                                               \
		return cd__fast_alloc(s);                                                                   \
	}                                                                                               \
	__attribute__((export_name("compactd_fast_v1_call"))) uint64_t cd_export_fast_call(             \
		uint32_t fn, uint32_t ptr, uint32_t size)                                                   \
	{                                                                                               \
		return cd__fast_call(DESCRIBE, COMPACT, fn, ptr, size);                                     \
	}                                                                                               \
	struct cd__policy_defined

#else /* native builds */

static const char *cd__describe;
static cd_compact_fn cd__compact;

/* cd_call_json runs an export (CD_FN_DESCRIBE or CD_FN_COMPACT) on a JSON
 * request, as the Extism path does, and appends the output to out. It
 * returns 0 on success, 1 when out holds an error body. */
CD_API int cd_call_json(int fn, cd_str input, cd_buf *out)
{
	return cd_run(cd__describe, cd__compact, fn, input.ptr, input.len, 0, out);
}

/* cd_call_fast is cd_call_json for a binary fast-path request. */
CD_API int cd_call_fast(int fn, cd_str input, cd_buf *out)
{
	return cd_run(cd__describe, cd__compact, fn, input.ptr, input.len, 1, out);
}

#define COMPACTD_POLICY(DESCRIBE, COMPACT)                \
	__attribute__((constructor)) static void cd__register(void) \
	{                                                     \
		cd__describe = (DESCRIBE);                        \
		cd__compact = (COMPACT);                          \
	}                                                     \
	struct cd__policy_defined
#endif

#endif /* COMPACTD_H */
