/*
 * hostile: misbehaving compactd plugins for the host's tests.
 *
 * One source, one module per behaviour: compile with exactly one of
 *   -DHOSTILE_LOOP -DHOSTILE_ALLOC -DHOSTILE_HUGE -DHOSTILE_BADJSON
 *   -DHOSTILE_BADREF -DHOSTILE_SPLIT -DHOSTILE_TRAP -DHOSTILE_ERRSET
 *   -DHOSTILE_NOERR
 * e.g.
 *   clang --target=wasm32-wasi --sysroot=/usr -O2 -mexec-model=reactor \
 *     -Wall -Werror -Wl,--export=describe -Wl,--export=compact \
 *     -DHOSTILE_LOOP -o hostile_loop.wasm hostile.c
 *
 * Every variant has a valid `describe` (name "hostile-<mode>", abi "1.0",
 * version "0.0.1"); `compact` misbehaves. See README.md for what the host
 * must report for each.
 */

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(HOSTILE_LOOP) + defined(HOSTILE_ALLOC) + defined(HOSTILE_HUGE) + \
	defined(HOSTILE_BADJSON) + defined(HOSTILE_BADREF) + defined(HOSTILE_SPLIT) + \
	defined(HOSTILE_TRAP) + defined(HOSTILE_ERRSET) + defined(HOSTILE_NOERR) != 1
#error "define exactly one HOSTILE_<MODE>"
#endif

#if defined(HOSTILE_LOOP)
#define MODE "loop"
#define WHAT "compact never returns"
#elif defined(HOSTILE_ALLOC)
#define MODE "alloc"
#define WHAT "compact allocates memory without bound"
#elif defined(HOSTILE_HUGE)
#define MODE "huge"
#define WHAT "compact returns a valid result larger than 64 MiB"
#elif defined(HOSTILE_BADJSON)
#define MODE "badjson"
#define WHAT "compact returns bytes that are not JSON"
#elif defined(HOSTILE_BADREF)
#define MODE "badref"
#define WHAT "compact returns a ref out of range"
#elif defined(HOSTILE_SPLIT)
#define MODE "split"
#define WHAT "compact returns a tool result without its call"
#elif defined(HOSTILE_TRAP)
#define MODE "trap"
#define WHAT "compact traps"
#elif defined(HOSTILE_ERRSET)
#define MODE "errset"
#define WHAT "compact fails with an error body"
#elif defined(HOSTILE_NOERR)
#define MODE "noerr"
#define WHAT "compact returns status 7 without an error"
#endif

/* ---- Extism kernel imports ----------------------------------------------- */

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

/* to_kernel copies n bytes into a new kernel block; traps if alloc fails. */
static uint64_t to_kernel(const char *p, size_t n)
{
	uint64_t off = extism_alloc(n);
	if (off == 0)
		__builtin_trap();
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

static int32_t output_str(const char *s)
{
	size_t n = strlen(s);
	extism_output_set(to_kernel(s, n), n);
	return 0;
}

__attribute__((export_name("describe"))) int32_t describe(void)
{
	return output_str("{\"abi\":\"1.0\",\"name\":\"hostile-" MODE "\",\"version\":\"0.0.1\","
	                  "\"description\":\"hostile test plugin: " WHAT "\"}");
}

#if defined(HOSTILE_HUGE) || defined(HOSTILE_SPLIT)

/* ---- Just enough request parsing: the roles of "messages" ---------------
 * The host only sends valid requests; on anything unexpected these
 * variants trap rather than report an error (they are hostile anyway). */

static char *read_input(size_t *len_out)
{
	uint64_t n = extism_input_length();
	char *buf = malloc((size_t)n + 1);
	if (buf == NULL)
		__builtin_trap();
	uint64_t i = 0;
	for (; i + 8 <= n; i += 8) {
		uint64_t w = extism_input_load_u64(i);
		memcpy(buf + i, &w, 8);
	}
	for (; i < n; i++)
		buf[i] = (char)extism_input_load_u8(i);
	buf[n] = '\0';
	*len_out = (size_t)n;
	return buf;
}

typedef struct {
	const char *s;
	size_t n, i;
} scan_t;

#define BAD() __builtin_trap()

static void ws(scan_t *sc)
{
	while (sc->i < sc->n && (sc->s[sc->i] == ' ' || sc->s[sc->i] == '\t' ||
	                         sc->s[sc->i] == '\n' || sc->s[sc->i] == '\r'))
		sc->i++;
}

static int peek(scan_t *sc) { return sc->i < sc->n ? (unsigned char)sc->s[sc->i] : -1; }

static void expect(scan_t *sc, char c)
{
	ws(sc);
	if (peek(sc) != (unsigned char)c)
		BAD();
	sc->i++;
}

/* scan_string returns the raw bytes between the quotes (escapes kept). */
static void scan_string(scan_t *sc, size_t *start, size_t *end)
{
	ws(sc);
	if (peek(sc) != '"')
		BAD();
	*start = ++sc->i;
	for (;;) {
		int c = peek(sc);
		if (c < 0)
			BAD();
		if (c == '"')
			break;
		sc->i += c == '\\' ? 2 : 1;
	}
	*end = sc->i++;
}

/* skip_value skips one value: strings with escapes, nested containers,
 * numbers and literals. Brackets inside strings are skipped as strings. */
static void skip_value(scan_t *sc)
{
	size_t depth = 0, a, b;
	do {
		ws(sc);
		int c = peek(sc);
		if (c == '"') {
			scan_string(sc, &a, &b);
		} else if (c == '{' || c == '[') {
			depth++;
			sc->i++;
		} else if (c == '}' || c == ']') {
			if (depth == 0)
				BAD();
			depth--;
			sc->i++;
		} else if (c == ',' || c == ':') {
			if (depth == 0)
				BAD();
			sc->i++;
		} else if (c == '-' || c == '+' || c == '.' || (c >= '0' && c <= '9') ||
		           (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
			while ((c = peek(sc)) == '-' || c == '+' || c == '.' || (c >= '0' && c <= '9') ||
			       (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
				sc->i++;
		} else {
			BAD();
		}
	} while (depth > 0);
}

static int key_is(scan_t *sc, size_t a, size_t b, const char *lit)
{
	return strlen(lit) == b - a && memcmp(sc->s + a, lit, b - a) == 0;
}

/* roles_of returns one byte per message: 's' system/developer, 't' tool,
 * 'o' anything else. */
static char *roles_of(size_t *count)
{
	size_t len;
	char *in = read_input(&len);
	scan_t sc = {in, len, 0};
	char *roles = NULL;
	size_t nroles = 0, cap = 0;
	int found = 0;
	expect(&sc, '{');
	ws(&sc);
	while (peek(&sc) != '}') {
		size_t a, b;
		scan_string(&sc, &a, &b);
		expect(&sc, ':');
		if (key_is(&sc, a, b, "messages")) {
			found = 1;
			expect(&sc, '[');
			ws(&sc);
			while (peek(&sc) != ']') {
				char role = 'o';
				expect(&sc, '{');
				ws(&sc);
				while (peek(&sc) != '}') {
					scan_string(&sc, &a, &b);
					expect(&sc, ':');
					if (key_is(&sc, a, b, "role")) {
						scan_string(&sc, &a, &b);
						if (key_is(&sc, a, b, "system") || key_is(&sc, a, b, "developer"))
							role = 's';
						else if (key_is(&sc, a, b, "tool"))
							role = 't';
					} else {
						skip_value(&sc);
					}
					ws(&sc);
					if (peek(&sc) == ',')
						sc.i++;
					ws(&sc);
				}
				sc.i++;
				if (nroles == cap) {
					cap = cap ? cap * 2 : 64;
					roles = realloc(roles, cap);
					if (roles == NULL)
						BAD();
				}
				roles[nroles++] = role;
				ws(&sc);
				if (peek(&sc) == ',')
					sc.i++;
				ws(&sc);
			}
			sc.i++;
		} else {
			skip_value(&sc);
		}
		ws(&sc);
		if (peek(&sc) == ',')
			sc.i++;
		ws(&sc);
	}
	free(in);
	if (!found || nroles == 0)
		BAD();
	*count = nroles;
	return roles;
}

/* ---- A small JSON text builder -------------------------------------------- */

typedef struct {
	char *p;
	size_t len, cap;
} buf_t;

static void buf_str(buf_t *b, const char *s)
{
	size_t n = strlen(s);
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 256;
		while (cap < b->len + n)
			cap *= 2;
		b->p = realloc(b->p, cap);
		if (b->p == NULL)
			BAD();
		b->cap = cap;
	}
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

static void buf_ref(buf_t *b, size_t ref, int first)
{
	char tmp[32];
	size_t i = sizeof tmp;
	tmp[--i] = '\0';
	tmp[--i] = '}';
	do {
		tmp[--i] = (char)('0' + ref % 10);
		ref /= 10;
	} while (ref != 0);
	buf_str(b, first ? "{\"ref\":" : ",{\"ref\":");
	buf_str(b, tmp + i);
}

#endif /* HOSTILE_HUGE || HOSTILE_SPLIT */

#if defined(HOSTILE_HUGE)

/* Streams bytes into a kernel block through an 8-byte staging word, so the
 * whole output never has to fit in linear memory. */
typedef struct {
	uint64_t base, pos, word;
	unsigned fill;
} kwriter_t;

static void kw_byte(kwriter_t *w, uint8_t c)
{
	w->word |= (uint64_t)c << (8 * w->fill);
	if (++w->fill == 8) {
		extism_store_u64(w->base + w->pos, w->word);
		w->pos += 8;
		w->word = 0;
		w->fill = 0;
	}
}

static void kw_bytes(kwriter_t *w, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		kw_byte(w, (uint8_t)s[i]);
}

static void kw_flush(kwriter_t *w)
{
	for (unsigned i = 0; i < w->fill; i++)
		extism_store_u8(w->base + w->pos + i, (uint8_t)(w->word >> (8 * i)));
	w->pos += w->fill;
	w->fill = 0;
	w->word = 0;
}

/* 65 MiB of 'x'; -DHUGE_MIB=N makes it N MiB. */
#ifndef HUGE_MIB
#define HUGE_MIB 65
#endif
#define HUGE_SUMMARY ((uint64_t)(HUGE_MIB) << 20)

__attribute__((export_name("compact"))) int32_t compact(void)
{
	size_t count;
	char *roles = roles_of(&count);
	free(roles);

	buf_t head = {0};
	buf_str(&head, "{\"messages\":[");
	for (size_t i = 0; i < count; i++)
		buf_ref(&head, i, i == 0);
	buf_str(&head, "],\"compacted\":false,\"summary\":\"");
	static const char tail[] = "\",\"entries_summarized\":0}";

	uint64_t total = head.len + HUGE_SUMMARY + (sizeof tail - 1);
	kwriter_t w = {.base = extism_alloc(total)};
	if (w.base == 0)
		__builtin_trap(); /* the kernel could not grow its memory */
	kw_bytes(&w, head.p, head.len);
	free(head.p);
	uint64_t left = HUGE_SUMMARY;
	while (left > 0 && w.fill != 0) {
		kw_byte(&w, 'x');
		left--;
	}
	for (; left >= 8; left -= 8) {
		extism_store_u64(w.base + w.pos, 0x7878787878787878ull);
		w.pos += 8;
	}
	for (; left > 0; left--)
		kw_byte(&w, 'x');
	kw_bytes(&w, tail, sizeof tail - 1);
	kw_flush(&w);
	extism_output_set(w.base, total);
	return 0;
}

#elif defined(HOSTILE_SPLIT)

/* Keeps the leading system messages, then a tool message whose assistant
 * call is dropped, then the last message. Without a tool message in the
 * input it invents one answering a call that does not exist. */
__attribute__((export_name("compact"))) int32_t compact(void)
{
	size_t count;
	char *roles = roles_of(&count);
	size_t lead = 0;
	while (lead < count && roles[lead] == 's')
		lead++;
	size_t tool = count;
	for (size_t i = lead; i < count; i++) {
		if (roles[i] == 't') {
			tool = i;
			break;
		}
	}
	free(roles);

	buf_t b = {0};
	int first = 1;
	buf_str(&b, "{\"messages\":[");
	size_t last = count - 1;
	size_t keep_lead = lead < count ? lead : count - 1; /* the last ref stays last */
	for (size_t i = 0; i < keep_lead; i++, first = 0)
		buf_ref(&b, i, first);
	if (tool < count) {
		/* tool > lead: a valid input never starts its tail with a tool
		 * message, so the assistant message before it is dropped. */
		buf_ref(&b, tool, first);
		first = 0;
	} else {
		buf_str(&b, first ? "" : ",");
		buf_str(&b, "{\"role\":\"tool\",\"tool_call_id\":\"ghost\",\"content\":\"x\"}");
		first = 0;
	}
	if (tool != last)
		buf_ref(&b, last, first);
	buf_str(&b, "],\"compacted\":true,\"summary\":\"hostile: split a tool call from its result\","
	             "\"entries_summarized\":1}");
	uint64_t off = to_kernel(b.p, b.len);
	extism_output_set(off, b.len);
	free(b.p);
	return 0;
}

#elif defined(HOSTILE_LOOP)

__attribute__((export_name("compact"))) int32_t compact(void)
{
	volatile uint64_t counter = 0;
	for (;;)
		counter++;
}

#elif defined(HOSTILE_ALLOC)

/* Leaks 1 MiB blocks, touching every page so they are really used, until
 * malloc fails; then keeps growing memory directly. Only the host's memory
 * limit stops it: at the limit memory.grow fails and the module traps. */
__attribute__((export_name("compact"))) int32_t compact(void)
{
	for (;;) {
		volatile uint8_t *p = malloc(1 << 20);
		if (p == NULL)
			break;
		for (size_t k = 0; k < (1 << 20); k += 4096)
			p[k] = (uint8_t)(k >> 12) | 1;
	}
	/* malloc gave up (it may stop a little short of the limit): grow page
	 * by page until memory.grow fails, i.e. memory is exactly at the limit. */
	for (;;) {
		if (__builtin_wasm_memory_grow(0, 1) == (size_t)-1)
			__builtin_trap();
	}
}

#elif defined(HOSTILE_BADJSON)

__attribute__((export_name("compact"))) int32_t compact(void)
{
	return output_str("this is not JSON {\"messages\": [");
}

#elif defined(HOSTILE_BADREF)

__attribute__((export_name("compact"))) int32_t compact(void)
{
	return output_str("{\"messages\":[{\"ref\":0},{\"ref\":999999}],\"compacted\":true}");
}

#elif defined(HOSTILE_TRAP)

__attribute__((export_name("compact"))) int32_t compact(void)
{
	__builtin_trap();
}

#elif defined(HOSTILE_ERRSET)

__attribute__((export_name("compact"))) int32_t compact(void)
{
	static const char body[] = "{\"code\":\"invalid_config\",\"message\":\"hostile: refusing\"}";
	extism_error_set(to_kernel(body, sizeof body - 1));
	return 1;
}

#elif defined(HOSTILE_NOERR)

__attribute__((export_name("compact"))) int32_t compact(void)
{
	return 7;
}

#endif
