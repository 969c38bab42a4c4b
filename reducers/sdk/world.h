/*
 * world.h -- the C SDK for world kernel reducers (wasm32, freestanding, single header).
 *
 * A reducer is one C file that includes this header and ends with one of two macros:
 *
 *   WORLD_CELL_REDUCER(step_cell, key_of_event)   per-cell logic, works in cell mode and in v1
 *                                                 (map<key, substate>) mode; see "Wrapper" below.
 *   WORLD_CELL_REDUCER_UPGRADABLE(step_cell, key_of_event, upgrade_cell)
 *                                                 the same, plus a hook for the kernel's
 *                                                 sys/StateUpgrade@1 event (see "State upgrades").
 *   WORLD_REDUCER(step_fn)                        whole-envelope logic, for non-keyed reducers.
 *
 * The macro defines the two ABI exports (SPEC section 5): `alloc(len) -> ptr` and
 * `step(retptr, ptr, len)`, the C-ABI form that writes (out_ptr, out_len) as two little-endian
 * i32 at retptr. Rejected alternative: the multi-value `step(ptr, len) -> (i32, i32)` needs
 * clang's `-target-abi experimental-mv`, an explicitly experimental ABI switch; the retptr form
 * is the plain C ABI and the host accepts both.
 *
 * Everything here is `static inline`: a reducer is a single translation unit, so there is no
 * implementation macro to define and no symbol can clash between reducers.
 *
 * Invariants and behaviour:
 * - Memory: a bump allocator from `__heap_base` up, growing linear memory with
 *   `memory.grow`. Nothing is ever freed: the host instantiates a fresh module for every step,
 *   so the heap lives exactly one step.
 * - Reading: the whole input envelope, and each CBOR document nested in it as a byte string
 *   (state, event value, ctx.key), is validated once by `cbor_validate` before the author sees
 *   it: definite lengths only, shortest heads, major types 0-5, tag 2000 over 16 bytes, simple
 *   values false/true/null only, valid UTF-8 text, map keys of major type 0-3 in strictly
 *   increasing bytewise order (so no duplicates), nesting at most WORLD_CBOR_MAX_DEPTH. That is
 *   the same set of inputs `air.cbor.loads` accepts. Iterators and lookups then skip items with
 *   bounds checks only (no re-validation); every reader bounds-checks, so even a span that did
 *   not come from a validated document cannot make the SDK read out of bounds.
 * - Writing: canonical by construction for scalars; maps go through `cbor_map` or
 *   `cbor_put_map_entries`, which sort entries by the bytewise order of their encoded keys.
 *   Every payload the author produced (state, event values, effect params, ann) is validated
 *   again before the output is encoded, so a reducer cannot return non-canonical bytes.
 * - Failure: readers return negative WORLD_E* codes. Anything else that goes wrong -- malformed
 *   input, an author function returning < 0, out of memory, a duplicate map key, invalid author
 *   output, a second effect -- ends the step with a trap (`unreachable`). A trap is the clean
 *   failure the kernel expects: it reports the step as failed and commits nothing. The reducer
 *   never returns a partial or guessed output.
 * - Refusal: `return world_refuse(out, "reason");` declines the event on purpose. The output is
 *   then `{"error": reason}` alone (anything set on `out` is ignored): the kernel journals a
 *   failed step with code `refused` and the reason, keeps the state, and dead-letters the
 *   event, which an operator can retry later (`world dead-letters`). For a reason built from
 *   values, `world_refusal(out)` gives the text buffer (see `world_text_uint`).
 *
 * Stack: build with `-Wl,-z,stack-size=65536` (tools/build_reducers.py does). zig cc's default
 * is 1 MiB, which would make every module's initial memory 17 pages that the host allocates and
 * zeroes on every step. The SDK keeps large data on the heap and its only recursion
 * (`cbor__check`) is bounded by WORLD_CBOR_MAX_DEPTH frames of well under 100 bytes, so 64 KiB
 * leaves ample room for author code. The stack sits below the data (`--stack-first`), so an
 * overflow runs below address 0 and traps instead of overwriting globals.
 *
 * Does not: use libc, floats, or any import; provide free(); decode indefinite lengths.
 */
#ifndef WORLD_H
#define WORLD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------------------------ */
/* Limits and error codes                                                                     */
/* ------------------------------------------------------------------------------------------ */

#ifndef WORLD_CBOR_MAX_DEPTH
#define WORLD_CBOR_MAX_DEPTH 64 /* nesting of arrays/maps accepted by the reader */
#endif
#ifndef WORLD_MAX_DOMAIN_EVENTS
#define WORLD_MAX_DOMAIN_EVENTS 64 /* domain events one step may emit; more traps */
#define WORLD_REFUSAL_MAX 512 /* bytes of a refusal's reason (kernel.abi.REFUSAL_REASON_MAX);
                                 a longer one is cut at a character boundary */
#endif

enum {
    WORLD_OK = 0,
    WORLD_ENOTFOUND = -1, /* map key / record field absent */
    WORLD_EMALFORMED = -2, /* bytes are not one well-formed canonical CBOR item */
    WORLD_ETYPE = -3, /* item has another major type than asked for */
    WORLD_ERANGE = -4, /* number does not fit, or arithmetic would overflow */
    WORLD_EINVAL = -5, /* well-formed but not acceptable (unknown schema, tag, ...) */
};

/* The SDK's larger routines stay out of line: inlined into every caller at -O2 they doubled the
   module size (30 KB -> 14 KB for the counter) for no measurable speed in a one-shot step. */
#define WORLD__NOINLINE __attribute__((noinline))

/* Propagate a negative code from `expr` out of the enclosing int-returning function. */
#define WORLD_TRY(expr)                                                                        \
    do {                                                                                       \
        int world__rc = (expr);                                                                \
        if (world__rc < 0) return world__rc;                                                   \
    } while (0)

static inline _Noreturn void world_trap(void) { __builtin_trap(); }

/* ------------------------------------------------------------------------------------------ */
/* Memory: byte helpers and the bump allocator                                                */
/* ------------------------------------------------------------------------------------------ */

/* With -mcpu=lime1 (bulk-memory-opt) these lower to memory.copy / memory.fill, so no libc. */
static inline void world_memcpy(void *dst, const void *src, uint32_t n) {
    if (n) __builtin_memcpy(dst, src, n);
}

/* A plain loop: __builtin_memcmp would become a call to an undefined `memcmp`. */
static inline int world_memcmp(const void *a, const void *b, uint32_t n) {
    const uint8_t *x = (const uint8_t *)a, *y = (const uint8_t *)b;
    for (uint32_t i = 0; i < n; i++) {
        if (x[i] != y[i]) return x[i] < y[i] ? -1 : 1;
    }
    return 0;
}

static inline uint32_t world_strlen(const char *s) {
    uint32_t n = 0;
    while (s[n]) n++;
    return n;
}

extern unsigned char __heap_base; /* provided by wasm-ld: first byte after data and stack */

static uintptr_t world__heap_top; /* 0 until the first allocation */

/* Make sure linear memory covers [0, end); false if memory.grow refuses. */
static inline bool world__ensure_memory(uint64_t end) {
    uint64_t have = (uint64_t)__builtin_wasm_memory_size(0) << 16;
    if (end <= have) return true;
    uint64_t pages = (end - have + 0xFFFFu) >> 16;
    return __builtin_wasm_memory_grow(0, (size_t)pages) != (size_t)-1;
}

/* Allocate `len` bytes aligned to 8; NULL when memory cannot grow. Memory is zeroed (fresh). */
static inline void *world_alloc_or_null(uint32_t len) {
    if (world__heap_top == 0) world__heap_top = (uintptr_t)&__heap_base;
    uint64_t start = ((uint64_t)world__heap_top + 7u) & ~(uint64_t)7u;
    uint64_t end = start + len;
    if (end > 0xFFFFFFF0u || !world__ensure_memory(end)) return NULL;
    world__heap_top = (uintptr_t)end;
    return (void *)(uintptr_t)start;
}

/* Allocate or trap. */
static inline void *world_alloc(uint32_t len) {
    void *p = world_alloc_or_null(len);
    if (!p) world_trap();
    return p;
}

/* Grow an allocation: in place when it is the newest one, else by copying. Traps on OOM. */
static inline void *world_realloc(void *p, uint32_t old_len, uint32_t new_len) {
    if (p && (uintptr_t)p + old_len == world__heap_top) {
        uint64_t end = (uint64_t)(uintptr_t)p + new_len;
        if (end <= 0xFFFFFFF0u && world__ensure_memory(end)) {
            world__heap_top = (uintptr_t)end;
            return p;
        }
        world_trap();
    }
    void *q = world_alloc(new_len);
    world_memcpy(q, p, old_len);
    return q;
}

/* ------------------------------------------------------------------------------------------ */
/* Spans and byte buffers                                                                     */
/* ------------------------------------------------------------------------------------------ */

/* A read-only byte range: either one encoded CBOR item, or the content of a text/bytes item. */
typedef struct {
    const uint8_t *ptr;
    uint32_t len;
} cbor_span;

/* Bytewise order of two encoded items (memcmp, then shorter first): RFC 8949 4.2.1 key order. */
static inline int cbor_span_cmp(cbor_span a, cbor_span b) {
    int c = world_memcmp(a.ptr, b.ptr, a.len < b.len ? a.len : b.len);
    if (c) return c;
    return a.len < b.len ? -1 : (a.len > b.len ? 1 : 0);
}

static inline bool cbor_span_eq(cbor_span a, cbor_span b) {
    return a.len == b.len && world_memcmp(a.ptr, b.ptr, a.len) == 0;
}

/* Is the text/bytes content `s` equal to the NUL-terminated string `cstr`? */
static inline bool world_str_eq(cbor_span s, const char *cstr) {
    uint32_t n = world_strlen(cstr);
    return s.len == n && world_memcmp(s.ptr, cstr, n) == 0;
}

/* A growable output buffer on the bump heap. Zero-initialise it (`world_buf b = {0};`). */
typedef struct {
    uint8_t *ptr;
    uint32_t len;
    uint32_t cap;
} world_buf;

static inline void world_buf_reserve(world_buf *b, uint32_t extra) {
    if (extra > 0x7FFFFFFFu - b->len) world_trap();
    uint32_t need = b->len + extra;
    if (need <= b->cap) return;
    uint32_t cap = b->cap ? b->cap : 64;
    while (cap < need) cap *= 2;
    b->ptr = (uint8_t *)world_realloc(b->ptr, b->cap, cap);
    b->cap = cap;
}

static inline void world_buf_append(world_buf *b, const void *src, uint32_t n) {
    world_buf_reserve(b, n);
    world_memcpy(b->ptr + b->len, src, n);
    b->len += n;
}

static inline cbor_span world_buf_span(const world_buf *b) {
    cbor_span s = {b->ptr, b->len};
    return s;
}

/* ------------------------------------------------------------------------------------------ */
/* CBOR reader (strict)                                                                       */
/* ------------------------------------------------------------------------------------------ */

enum { CBOR_UINT = 0, CBOR_NINT = 1, CBOR_BYTES = 2, CBOR_TEXT = 3, CBOR_ARRAY = 4,
       CBOR_MAP = 5, CBOR_TAG = 6, CBOR_SIMPLE = 7 };

#define CBOR_DEC128_TAG 2000u

/*
 * Decode one head at p[*off]: major type and argument. Rejects what canonical CBOR never
 * contains: reserved and indefinite lengths (additional info 28-31), non-shortest arguments,
 * and major-7 items other than false (20), true (21), null (22) -- floats included.
 */
static inline int cbor__head(const uint8_t *p, uint32_t len, uint32_t *off, uint8_t *major,
                             uint64_t *arg) {
    static const uint64_t shortest_min[4] = {24u, 0x100u, 0x10000u, 0x100000000u};
    if (*off >= len) return WORLD_EMALFORMED;
    uint8_t ib = p[(*off)++];
    uint8_t info = ib & 31u;
    *major = ib >> 5;
    if (*major == CBOR_SIMPLE) {
        if (info < 20 || info > 22) return WORLD_EMALFORMED;
        *arg = info;
        return WORLD_OK;
    }
    if (info < 24) {
        *arg = info;
        return WORLD_OK;
    }
    if (info > 27) return WORLD_EMALFORMED;
    uint32_t n = 1u << (info - 24);
    if (n > len - *off) return WORLD_EMALFORMED;
    uint64_t v = 0;
    for (uint32_t i = 0; i < n; i++) v = (v << 8) | p[*off + i];
    *off += n;
    if (v < shortest_min[info - 24]) return WORLD_EMALFORMED;
    *arg = v;
    return WORLD_OK;
}

/* Strict UTF-8: no overlongs, no surrogates, nothing above U+10FFFF (as Python decodes). */
static inline bool cbor__utf8_ok(const uint8_t *s, uint32_t n) {
    uint32_t i = 0;
    while (i < n) {
        if (n - i >= 8) { /* ASCII fast path, 8 bytes per step: keys and names are ASCII */
            uint64_t w;
            __builtin_memcpy(&w, s + i, 8);
            if (!(w & 0x8080808080808080ull)) {
                i += 8;
                continue;
            }
        }
        uint8_t c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        uint32_t more, cp, min;
        if ((c & 0xE0) == 0xC0) { more = 1; cp = c & 0x1Fu; min = 0x80; }
        else if ((c & 0xF0) == 0xE0) { more = 2; cp = c & 0x0Fu; min = 0x800; }
        else if ((c & 0xF8) == 0xF0) { more = 3; cp = c & 0x07u; min = 0x10000; }
        else return false;
        if (more > n - i - 1) return false;
        for (uint32_t k = 1; k <= more; k++) {
            uint8_t d = s[i + k];
            if ((d & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (d & 0x3Fu);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
        i += more + 1;
    }
    return true;
}

/* Check (and skip) one item at p[*off]; see the header comment for what "strict" means. */
WORLD__NOINLINE static inline int cbor__check(const uint8_t *p, uint32_t len, uint32_t *off,
                                              uint32_t depth) {
    uint8_t major;
    uint64_t arg;
    WORLD_TRY(cbor__head(p, len, off, &major, &arg));
    switch (major) {
    case CBOR_UINT:
    case CBOR_NINT:
    case CBOR_SIMPLE:
        return WORLD_OK;
    case CBOR_BYTES:
    case CBOR_TEXT:
        if (arg > len - *off) return WORLD_EMALFORMED;
        if (major == CBOR_TEXT && !cbor__utf8_ok(p + *off, (uint32_t)arg)) return WORLD_EMALFORMED;
        *off += (uint32_t)arg;
        return WORLD_OK;
    case CBOR_TAG: {
        uint8_t inner;
        uint64_t n;
        if (arg != CBOR_DEC128_TAG) return WORLD_EMALFORMED;
        WORLD_TRY(cbor__head(p, len, off, &inner, &n));
        if (inner != CBOR_BYTES || n != 16 || 16 > len - *off) return WORLD_EMALFORMED;
        *off += 16;
        return WORLD_OK;
    }
    default: /* CBOR_ARRAY, CBOR_MAP */
        break;
    }
    if (depth >= WORLD_CBOR_MAX_DEPTH) return WORLD_EMALFORMED;
    /* Every item takes at least one byte: refuse counts the input cannot hold before looping. */
    if (arg > len - *off) return WORLD_EMALFORMED;
    cbor_span prev_key = {0, 0};
    for (uint64_t i = 0; i < arg; i++) {
        if (major == CBOR_MAP) {
            uint32_t key_start = *off;
            WORLD_TRY(cbor__check(p, len, off, depth + 1));
            cbor_span key = {p + key_start, *off - key_start};
            if ((key.ptr[0] >> 5) > CBOR_TEXT) return WORLD_EMALFORMED; /* int/bytes/text keys */
            if (i > 0 && cbor_span_cmp(prev_key, key) >= 0) return WORLD_EMALFORMED;
            prev_key = key;
        }
        WORLD_TRY(cbor__check(p, len, off, depth + 1));
    }
    return WORLD_OK;
}

/*
 * Skip one item at p[*off] without re-checking canonical form: bounds only, no recursion.
 * Iterators use it over documents cbor_validate has already accepted, which makes a lookup in
 * a large v1 state map a few times cheaper in fuel than re-validating every entry it passes.
 */
static inline int cbor__skip(const uint8_t *p, uint32_t len, uint32_t *off) {
    uint64_t pending = 1; /* items still to skip; bounded by len, so it cannot overflow */
    while (pending) {
        uint8_t major;
        uint64_t arg;
        WORLD_TRY(cbor__head(p, len, off, &major, &arg));
        pending--;
        if (major == CBOR_BYTES || major == CBOR_TEXT) {
            if (arg > len - *off) return WORLD_EMALFORMED;
            *off += (uint32_t)arg;
        } else if (major == CBOR_ARRAY || major == CBOR_MAP) {
            if (arg > len - *off) return WORLD_EMALFORMED; /* each item needs >= 1 byte */
            pending += major == CBOR_MAP ? 2 * arg : arg;
        } else if (major == CBOR_TAG) {
            pending++;
        }
    }
    return WORLD_OK;
}

/* Is [p, p+len) exactly one strict canonical CBOR item (no trailing bytes)? */
static inline int cbor_validate(const uint8_t *p, uint32_t len) {
    uint32_t off = 0;
    WORLD_TRY(cbor__check(p, len, &off, 0));
    return off == len ? WORLD_OK : WORLD_EMALFORMED;
}

/* Head of a span that must hold exactly one item; `off` is left after the head. */
static inline int cbor__span_head(cbor_span v, uint32_t *off, uint8_t *major, uint64_t *arg) {
    *off = 0;
    return cbor__head(v.ptr, v.len, off, major, arg);
}

static inline bool cbor_is_null(cbor_span v) { return v.len == 1 && v.ptr[0] == 0xF6; }

static inline int cbor_read_bool(cbor_span v, bool *out) {
    if (v.len != 1 || (v.ptr[0] != 0xF4 && v.ptr[0] != 0xF5)) return WORLD_ETYPE;
    *out = v.ptr[0] == 0xF5;
    return WORLD_OK;
}

/* nat: major type 0. */
static inline int cbor_read_uint(cbor_span v, uint64_t *out) {
    uint32_t off;
    uint8_t major;
    uint64_t arg;
    WORLD_TRY(cbor__span_head(v, &off, &major, &arg));
    if (major != CBOR_UINT) return WORLD_ETYPE;
    if (off != v.len) return WORLD_EMALFORMED;
    *out = arg;
    return WORLD_OK;
}

/* int: major type 0 or 1, within int64_t. */
static inline int cbor_read_int(cbor_span v, int64_t *out) {
    uint32_t off;
    uint8_t major;
    uint64_t arg;
    WORLD_TRY(cbor__span_head(v, &off, &major, &arg));
    if (major != CBOR_UINT && major != CBOR_NINT) return WORLD_ETYPE;
    if (off != v.len) return WORLD_EMALFORMED;
    if (arg > (uint64_t)INT64_MAX) return WORLD_ERANGE;
    *out = major == CBOR_UINT ? (int64_t)arg : -1 - (int64_t)arg;
    return WORLD_OK;
}

static inline int cbor__read_string(cbor_span v, uint8_t want, cbor_span *content) {
    uint32_t off;
    uint8_t major;
    uint64_t arg;
    WORLD_TRY(cbor__span_head(v, &off, &major, &arg));
    if (major != want) return WORLD_ETYPE;
    if (arg != v.len - off) return WORLD_EMALFORMED;
    content->ptr = v.ptr + off;
    content->len = (uint32_t)arg;
    return WORLD_OK;
}

/* text: `content` is the UTF-8 bytes, not NUL-terminated. */
static inline int cbor_read_text(cbor_span v, cbor_span *content) {
    return cbor__read_string(v, CBOR_TEXT, content);
}

/* bytes (also hash and uuid values): `content` is the raw bytes. */
static inline int cbor_read_bytes(cbor_span v, cbor_span *content) {
    return cbor__read_string(v, CBOR_BYTES, content);
}

/* dec128: tag 2000 over 16 bytes (IEEE 754 decimal128, BID, big-endian), copied to `out`. */
static inline int cbor_read_dec128(cbor_span v, uint8_t out[16]) {
    if (v.len != 20 || v.ptr[0] != 0xD9 || v.ptr[1] != 0x07 || v.ptr[2] != 0xD0 ||
        v.ptr[3] != 0x50)
        return WORLD_ETYPE;
    world_memcpy(out, v.ptr + 4, 16);
    return WORLD_OK;
}

/* Is `v` the text item whose content equals `cstr`? */
static inline bool cbor_is_text(cbor_span v, const char *cstr) {
    cbor_span s;
    return cbor_read_text(v, &s) == WORLD_OK && world_str_eq(s, cstr);
}

/* Iteration over an array's items or a map's entries. */
typedef struct {
    const uint8_t *ptr;
    uint32_t len;
    uint32_t off;
    uint64_t left; /* items (array) or entries (map) not yet returned */
} cbor_iter;

static inline int cbor__begin(cbor_span v, uint8_t want, cbor_iter *it) {
    uint8_t major;
    WORLD_TRY(cbor__span_head(v, &it->off, &major, &it->left));
    if (major != want) return WORLD_ETYPE;
    it->ptr = v.ptr;
    it->len = v.len;
    return WORLD_OK;
}

static inline int cbor_array_begin(cbor_span v, cbor_iter *it) {
    return cbor__begin(v, CBOR_ARRAY, it);
}

static inline int cbor_map_begin(cbor_span v, cbor_iter *it) {
    return cbor__begin(v, CBOR_MAP, it);
}

/* Number of items (array) or entries (map) the iterator started with / has left. */
static inline uint64_t cbor_iter_left(const cbor_iter *it) { return it->left; }

static inline int cbor__next_item(cbor_iter *it, cbor_span *item) {
    uint32_t start = it->off;
    WORLD_TRY(cbor__skip(it->ptr, it->len, &it->off));
    item->ptr = it->ptr + start;
    item->len = it->off - start;
    return WORLD_OK;
}

/* Next array item: returns 1 with `item` set, 0 at the end, < 0 on malformed input. */
static inline int cbor_next(cbor_iter *it, cbor_span *item) {
    if (it->left == 0) return 0;
    WORLD_TRY(cbor__next_item(it, item));
    it->left--;
    return 1;
}

/* Next map entry (key and value as encoded items): 1, 0 at the end, < 0 on error. */
static inline int cbor_next_entry(cbor_iter *it, cbor_span *key, cbor_span *val) {
    if (it->left == 0) return 0;
    WORLD_TRY(cbor__next_item(it, key));
    WORLD_TRY(cbor__next_item(it, val));
    it->left--;
    return 1;
}

/* Find the value of the entry whose encoded key equals `key_cbor` (any key type). */
static inline int cbor_map_get_raw(cbor_span map, cbor_span key_cbor, cbor_span *val) {
    cbor_iter it;
    cbor_span k, v;
    int rc;
    WORLD_TRY(cbor_map_begin(map, &it));
    while ((rc = cbor_next_entry(&it, &k, &v)) > 0) {
        if (cbor_span_eq(k, key_cbor)) {
            *val = v;
            return WORLD_OK;
        }
    }
    return rc < 0 ? rc : WORLD_ENOTFOUND;
}

/* Find the value for the text key `name`: a record field, or a map<text, _> entry. */
WORLD__NOINLINE static inline int cbor_map_get(cbor_span map, const char *name,
                                               cbor_span *val) {
    cbor_iter it;
    cbor_span k, v;
    int rc;
    WORLD_TRY(cbor_map_begin(map, &it));
    while ((rc = cbor_next_entry(&it, &k, &v)) > 0) {
        if (cbor_is_text(k, name)) {
            *val = v;
            return WORLD_OK;
        }
    }
    return rc < 0 ? rc : WORLD_ENOTFOUND;
}

/* ------------------------------------------------------------------------------------------ */
/* CBOR writer (canonical)                                                                    */
/* ------------------------------------------------------------------------------------------ */

/* Shortest head for (major, arg): RFC 8949 4.2.1 preferred serialization of lengths/ints. */
WORLD__NOINLINE static inline void cbor_put_head(world_buf *b, uint8_t major, uint64_t arg) {
    uint8_t h[9];
    uint32_t n;
    uint8_t m = (uint8_t)(major << 5);
    if (arg < 24) { h[0] = (uint8_t)(m | arg); n = 1; }
    else if (arg <= 0xFF) { h[0] = m | 24; n = 2; }
    else if (arg <= 0xFFFF) { h[0] = m | 25; n = 3; }
    else if (arg <= 0xFFFFFFFFu) { h[0] = m | 26; n = 5; }
    else { h[0] = m | 27; n = 9; }
    for (uint32_t i = 1; i < n; i++) h[i] = (uint8_t)(arg >> (8 * (n - 1 - i)));
    world_buf_append(b, h, n);
}

static inline void cbor_put_uint(world_buf *b, uint64_t v) { cbor_put_head(b, CBOR_UINT, v); }

static inline void cbor_put_int(world_buf *b, int64_t v) {
    /* ~(uint64_t)v == -1 - v for negative v, computed without signed overflow. */
    if (v < 0) cbor_put_head(b, CBOR_NINT, ~(uint64_t)v);
    else cbor_put_head(b, CBOR_UINT, (uint64_t)v);
}

static inline void cbor_put_bool(world_buf *b, bool v) {
    uint8_t x = v ? 0xF5 : 0xF4;
    world_buf_append(b, &x, 1);
}

static inline void cbor_put_null(world_buf *b) {
    uint8_t x = 0xF6;
    world_buf_append(b, &x, 1);
}

/* Text from `n` UTF-8 bytes. The bytes are not re-checked here; output validation catches
   invalid UTF-8 before anything leaves the module. */
static inline void cbor_put_text(world_buf *b, const void *s, uint32_t n) {
    cbor_put_head(b, CBOR_TEXT, n);
    world_buf_append(b, s, n);
}

static inline void cbor_put_str(world_buf *b, const char *cstr) {
    cbor_put_text(b, cstr, world_strlen(cstr));
}

static inline void cbor_put_bytes(world_buf *b, const void *p, uint32_t n) {
    cbor_put_head(b, CBOR_BYTES, n);
    world_buf_append(b, p, n);
}

static inline void cbor_put_dec128(world_buf *b, const uint8_t v[16]) {
    cbor_put_head(b, CBOR_TAG, CBOR_DEC128_TAG);
    cbor_put_bytes(b, v, 16);
}

/* Array head: follow with exactly `n` items. */
static inline void cbor_put_array(world_buf *b, uint32_t n) { cbor_put_head(b, CBOR_ARRAY, n); }

/* Map head: follow with `n` key/value pairs already in canonical key order (else use cbor_map). */
static inline void cbor_put_map_head(world_buf *b, uint32_t n) { cbor_put_head(b, CBOR_MAP, n); }

/* Append one already-encoded canonical item verbatim (e.g. a value read from the input). */
static inline void cbor_put_raw(world_buf *b, cbor_span item) {
    world_buf_append(b, item.ptr, item.len);
}

/* One map entry as encoded key and encoded value. */
typedef struct {
    cbor_span key;
    cbor_span val;
} cbor_entry;

/* Sort entries by the bytewise order of their encoded keys (stable bottom-up merge sort). */
static inline void cbor_sort_entries(cbor_entry *e, uint32_t n) {
    if (n < 2) return;
    if (n > 0x7FFFFFFFu / sizeof(cbor_entry)) world_trap(); /* also keeps 2 * width in range */
    cbor_entry *tmp = (cbor_entry *)world_alloc(n * (uint32_t)sizeof(cbor_entry));
    cbor_entry *src = e, *dst = tmp;
    for (uint32_t width = 1; width < n; width *= 2) {
        for (uint32_t lo = 0; lo < n; lo += 2 * width) {
            uint32_t mid = lo + width < n ? lo + width : n;
            uint32_t hi = mid + width < n ? mid + width : n;
            uint32_t i = lo, j = mid, k = lo;
            while (i < mid && j < hi)
                dst[k++] = cbor_span_cmp(src[j].key, src[i].key) < 0 ? src[j++] : src[i++];
            while (i < mid) dst[k++] = src[i++];
            while (j < hi) dst[k++] = src[j++];
        }
        cbor_entry *t = src;
        src = dst;
        dst = t;
    }
    if (src != e) world_memcpy(e, src, n * (uint32_t)sizeof(cbor_entry));
}

/* Write a canonical map from entries in any order; traps on a duplicate key. */
static inline void cbor_put_map_entries(world_buf *b, cbor_entry *e, uint32_t n) {
    cbor_sort_entries(e, n);
    cbor_put_map_head(b, n);
    for (uint32_t i = 0; i < n; i++) {
        if (i > 0 && cbor_span_eq(e[i - 1].key, e[i].key)) world_trap();
        cbor_put_raw(b, e[i].key);
        cbor_put_raw(b, e[i].val);
    }
}

/*
 * Map builder: add entries in any order, each value written into the buffer the key call
 * returns (exactly one item), then cbor_put_map() writes them sorted. Offsets, not pointers,
 * are recorded because the data buffer may move while it grows.
 *
 *     cbor_map m; cbor_map_init(&m);
 *     cbor_put_uint(cbor_map_key(&m, "count"), 3);
 *     cbor_put_uint(cbor_map_key(&m, "events"), 1);
 *     cbor_put_map(out_buf, &m);
 */
typedef struct {
    uint32_t key_off, val_off, end;
} cbor__entry_at;

typedef struct {
    world_buf data; /* keys and values, encoded back to back */
    cbor__entry_at *at;
    uint32_t count, cap;
} cbor_map;

static inline void cbor_map_init(cbor_map *m) {
    world_buf empty = {0};
    m->data = empty;
    m->at = NULL;
    m->count = m->cap = 0;
}

static inline void cbor__map_close(cbor_map *m) {
    if (m->count) m->at[m->count - 1].end = m->data.len;
}

static inline world_buf *cbor__map_open(cbor_map *m, uint32_t key_off) {
    if (m->count == m->cap) {
        uint32_t cap = m->cap ? m->cap * 2 : 8;
        if (cap > 0x7FFFFFFFu / sizeof(cbor__entry_at)) world_trap();
        m->at = (cbor__entry_at *)world_realloc(m->at, m->cap * (uint32_t)sizeof(cbor__entry_at),
                                                cap * (uint32_t)sizeof(cbor__entry_at));
        m->cap = cap;
    }
    cbor__entry_at *a = &m->at[m->count++];
    a->key_off = key_off;
    a->val_off = m->data.len;
    a->end = m->data.len;
    return &m->data;
}

/* Start an entry with a text key; write its value into the returned buffer. */
static inline world_buf *cbor_map_key(cbor_map *m, const char *name) {
    cbor__map_close(m);
    uint32_t key_off = m->data.len;
    cbor_put_str(&m->data, name);
    return cbor__map_open(m, key_off);
}

/* Start an entry with an already-encoded key (e.g. ctx.key); write its value next. */
static inline world_buf *cbor_map_key_raw(cbor_map *m, cbor_span key_cbor) {
    cbor__map_close(m);
    uint32_t key_off = m->data.len;
    cbor_put_raw(&m->data, key_cbor);
    return cbor__map_open(m, key_off);
}

/* Write the collected entries to `b` as one canonical map. */
WORLD__NOINLINE static inline void cbor_put_map(world_buf *b, cbor_map *m) {
    cbor__map_close(m);
    cbor_entry *e = (cbor_entry *)world_alloc((m->count ? m->count : 1) *
                                              (uint32_t)sizeof(cbor_entry));
    for (uint32_t i = 0; i < m->count; i++) {
        const cbor__entry_at *a = &m->at[i];
        e[i].key.ptr = m->data.ptr + a->key_off;
        e[i].key.len = a->val_off - a->key_off;
        e[i].val.ptr = m->data.ptr + a->val_off;
        e[i].val.len = a->end - a->val_off;
    }
    cbor_put_map_entries(b, e, m->count);
}

/* ------------------------------------------------------------------------------------------ */
/* AIR values: records, variants, options                                                     */
/* ------------------------------------------------------------------------------------------ */

/* A record field's encoded value (records are maps with text keys). */
static inline int world_rec_field(cbor_span rec, const char *name, cbor_span *val) {
    return cbor_map_get(rec, name, val);
}

static inline int world_rec_uint(cbor_span rec, const char *name, uint64_t *out) {
    cbor_span v;
    WORLD_TRY(cbor_map_get(rec, name, &v));
    return cbor_read_uint(v, out);
}

static inline int world_rec_int(cbor_span rec, const char *name, int64_t *out) {
    cbor_span v;
    WORLD_TRY(cbor_map_get(rec, name, &v));
    return cbor_read_int(v, out);
}

static inline int world_rec_text(cbor_span rec, const char *name, cbor_span *content) {
    cbor_span v;
    WORLD_TRY(cbor_map_get(rec, name, &v));
    return cbor_read_text(v, content);
}

static inline int world_rec_bool(cbor_span rec, const char *name, bool *out) {
    cbor_span v;
    WORLD_TRY(cbor_map_get(rec, name, &v));
    return cbor_read_bool(v, out);
}

/* option<nat>: `*present` is false for null. */
static inline int cbor_read_opt_uint(cbor_span v, bool *present, uint64_t *out) {
    *present = !cbor_is_null(v);
    return *present ? cbor_read_uint(v, out) : WORLD_OK;
}

/*
 * Variant {"$tag": T, "$value": V}: `tag` is T's text content, `value` the encoded V (null for a
 * unit case). Exactly those two entries are accepted.
 */
static inline int world_variant_read(cbor_span v, cbor_span *tag, cbor_span *value) {
    cbor_iter it;
    cbor_span k, t;
    WORLD_TRY(cbor_map_begin(v, &it));
    if (cbor_iter_left(&it) != 2) return WORLD_ETYPE;
    if (cbor_next_entry(&it, &k, &t) != 1 || !cbor_is_text(k, "$tag")) return WORLD_ETYPE;
    WORLD_TRY(cbor_read_text(t, tag));
    if (cbor_next_entry(&it, &k, value) != 1 || !cbor_is_text(k, "$value")) return WORLD_ETYPE;
    return WORLD_OK;
}

/* Write {"$tag": tag, "$value": ...}; write the case's value into the returned buffer.
   ("$tag" sorts before "$value": shorter encoded key first.) */
static inline world_buf *world_put_variant(world_buf *b, const char *tag) {
    cbor_put_map_head(b, 2);
    cbor_put_str(b, "$tag");
    cbor_put_str(b, tag);
    cbor_put_str(b, "$value");
    return b;
}

static inline void world_put_unit_variant(world_buf *b, const char *tag) {
    cbor_put_null(world_put_variant(b, tag));
}

/* ------------------------------------------------------------------------------------------ */
/* Envelope: input                                                                            */
/* ------------------------------------------------------------------------------------------ */

typedef struct {
    cbor_span schema; /* the event's schema name, text content, e.g. "demo/CounterEvent@1" */
    cbor_span value;  /* canonical CBOR of the event value (validated) */
} world_event;

static inline bool world_schema_is(const world_event *ev, const char *name) {
    return world_str_eq(ev->schema, name);
}

/* An event value's field, e.g. the routing key: its encoded item is exactly the canonical CBOR
   of that key, so it can be used as a cell key without re-encoding. */
static inline int world_event_field(const world_event *ev, const char *name, cbor_span *val) {
    return cbor_map_get(ev->value, name, val);
}

/*
 * State upgrades. When a world upgrades a reducer whose state schema changed, the kernel steps
 * the NEW module once per cell with this built-in event, in an ordinary envelope whose `state`
 * is the cell's OLD state (old schema's shape) and whose ctx carries the key and cell_mode as
 * usual. The event value is the record
 *   {from_module: text  (the old module's wasm hash, "blake3:<hex>"),
 *    from_schema: text  (the old state schema's name, e.g. "demo/CounterState@1"),
 *    state: bytes       (the old state's canonical CBOR, the same bytes as the envelope state)}
 * The step's output state must be of the NEW state schema; a failing step fails that cell's
 * upgrade and leaves the cell as it was.
 */
#define WORLD_UPGRADE_SCHEMA "sys/StateUpgrade@1"

typedef struct {
    cbor_span from_module; /* text content: the old module's hash, "blake3:<hex>" */
    cbor_span from_schema; /* text content: the old state schema's name */
    cbor_span state;       /* canonical CBOR of the old state (validated) */
} world_upgrade;

/* Is this the kernel's state-upgrade event (`sys/StateUpgrade@1`)? */
static inline bool world_event_is_upgrade(const world_event *ev) {
    return world_schema_is(ev, WORLD_UPGRADE_SCHEMA);
}

/* Read a state-upgrade event; WORLD_EINVAL for any other event. Extra fields are ignored. */
static inline int world_upgrade_read(const world_event *ev, world_upgrade *up) {
    cbor_span v;
    if (!world_event_is_upgrade(ev)) return WORLD_EINVAL;
    WORLD_TRY(world_rec_text(ev->value, "from_module", &up->from_module));
    WORLD_TRY(world_rec_text(ev->value, "from_schema", &up->from_schema));
    WORLD_TRY(world_rec_field(ev->value, "state", &v));
    WORLD_TRY(cbor_read_bytes(v, &up->state));
    return cbor_validate(up->state.ptr, up->state.len);
}

typedef struct {
    uint64_t version;   /* always 1 today */
    bool has_state;     /* false when the input state is null */
    cbor_span state;    /* canonical CBOR of the state when has_state (validated) */
    world_event event;
    bool cell_mode;
    bool has_key;       /* ctx.key present */
    cbor_span key;      /* canonical CBOR of the key when has_key (validated) */
    cbor_span ctx;      /* the whole ctx map, for fields the SDK does not interpret */
} world_input;

/* A byte string field holding a nested CBOR document; validated. `*present` false for null. */
static inline int world__nested(cbor_span map, const char *name, bool nullable, bool *present,
                                cbor_span *doc) {
    cbor_span v;
    WORLD_TRY(cbor_map_get(map, name, &v));
    *present = !cbor_is_null(v);
    if (!*present) return nullable ? WORLD_OK : WORLD_ETYPE;
    WORLD_TRY(cbor_read_bytes(v, doc));
    return cbor_validate(doc->ptr, doc->len);
}

/*
 * Decode {version, state, event{schema, value}, ctx{key?, cell_mode, ...}}. Unknown fields at
 * any level are ignored (SPEC: the kernel may add ctx fields such as logical time).
 */
WORLD__NOINLINE static inline int world_decode_input(const uint8_t *p, uint32_t len,
                                                     world_input *in) {
    cbor_span env = {p, len}, ev, v;
    bool present;
    WORLD_TRY(cbor_validate(p, len));
    WORLD_TRY(world_rec_uint(env, "version", &in->version));
    if (in->version != 1) return WORLD_EINVAL;
    WORLD_TRY(world__nested(env, "state", true, &in->has_state, &in->state));
    WORLD_TRY(cbor_map_get(env, "event", &ev));
    WORLD_TRY(world_rec_text(ev, "schema", &in->event.schema));
    WORLD_TRY(world__nested(ev, "value", false, &present, &in->event.value));
    WORLD_TRY(cbor_map_get(env, "ctx", &in->ctx));
    WORLD_TRY(world_rec_bool(in->ctx, "cell_mode", &in->cell_mode));
    in->has_key = false;
    int rc = cbor_map_get(in->ctx, "key", &v);
    if (rc == WORLD_OK) return world__nested(in->ctx, "key", true, &in->has_key, &in->key);
    return rc == WORLD_ENOTFOUND ? WORLD_OK : rc; /* absent (or null) key: no hint */
}

/* ------------------------------------------------------------------------------------------ */
/* Envelope: output                                                                           */
/* ------------------------------------------------------------------------------------------ */

enum { WORLD__STATE_UNSET = 0, WORLD__STATE_SET = 1, WORLD__STATE_NULL = 2 };

typedef struct {
    const char *schema;
    bool has_key;
    cbor_span key; /* canonical CBOR of the target cell's key */
    world_buf value;
} world__domain_event;

/* What a step produces. Fill it only through the world_* functions below. */
typedef struct {
    int state_mode;
    bool state_trusted; /* set by the v1 wrapper: the map is canonical by construction */
    world_buf state;
    uint32_t n_events;
    world__domain_event events[WORLD_MAX_DOMAIN_EVENTS];
    bool has_effect;
    const char *effect_kind;
    const char *effect_cap_slot; /* NULL: no cap_slot field */
    world_buf effect_params;
    bool has_ann;
    world_buf ann;
} world_out;

/* A refusal (world_refuse) lives beside world_out, in statics only world_refusal writes: a
   reducer that never refuses never stores to them, so the compiler folds them to false and
   drops every refusal path, and its module is byte-for-byte what it was before refusals
   existed. (A fresh instance per step, like the heap: they live one step.) */
static bool world__refused;
static world_buf world__refusal_text;

/* The new state: write exactly one item into the returned buffer (calling again restarts). */
static inline world_buf *world_set_state(world_out *out) {
    out->state_mode = WORLD__STATE_SET;
    out->state_trusted = false;
    out->state.len = 0;
    return &out->state;
}

/* State null: in cell mode this deletes the cell; via the wrapper in v1 mode, the map entry. */
static inline void world_delete_state(world_out *out) {
    out->state_mode = WORLD__STATE_NULL;
    out->state_trusted = false;
    out->state.len = 0;
}

/* Leave the state as it came in (NULL: stays null). */
static inline void world_keep_state(world_out *out, const cbor_span *state_or_null) {
    if (!state_or_null) world_delete_state(out);
    else cbor_put_raw(world_set_state(out), *state_or_null);
}

static inline world__domain_event *world__new_event(world_out *out, const char *schema) {
    if (out->n_events >= WORLD_MAX_DOMAIN_EVENTS) world_trap();
    world__domain_event *e = &out->events[out->n_events++];
    e->schema = schema;
    e->has_key = false;
    return e;
}

/* Emit a domain event of `schema`; write its value (one item) into the returned buffer. */
static inline world_buf *world_emit(world_out *out, const char *schema) {
    return &world__new_event(out, schema)->value;
}

/* Same, addressed to the cell `key_cbor` (canonical CBOR of the key) of a keyed reducer. */
static inline world_buf *world_emit_keyed(world_out *out, const char *schema, cbor_span key_cbor) {
    world__domain_event *e = world__new_event(out, schema);
    e->has_key = true;
    e->key = key_cbor;
    return &e->value;
}

/* Request the step's one micro-effect (e.g. "timer.set"); write params into the returned
   buffer. `cap_slot` may be NULL. A second effect in one step traps (SPEC: at most one). */
static inline world_buf *world_effect(world_out *out, const char *kind, const char *cap_slot) {
    if (out->has_effect) world_trap();
    out->has_effect = true;
    out->effect_kind = kind;
    out->effect_cap_slot = cap_slot;
    return &out->effect_params;
}

/* Refuse the event with a reason (UTF-8 text, not CBOR): the kernel keeps the state, emits
   nothing and dead-letters the event with the reason. Returns WORLD_OK, so a cell function can
   `return world_refuse(out, "overdraft");`. Calling again replaces the reason. */
static inline world_buf *world_refusal(world_out *out) {
    (void)out;
    world__refused = true;
    world__refusal_text.len = 0;
    return &world__refusal_text;
}

static inline int world_refuse(world_out *out, const char *reason) {
    world_buf *b = world_refusal(out);
    world_buf_append(b, reason, world_strlen(reason));
    return WORLD_OK;
}

/* Append text (a C string) or a number in decimal to a text buffer, e.g. world_refusal's. */
static inline void world_text(world_buf *b, const char *cstr) {
    world_buf_append(b, cstr, world_strlen(cstr));
}

static inline void world_text_uint(world_buf *b, uint64_t v) {
    char digits[20];
    uint32_t n = 0;
    do {
        digits[sizeof digits - 1 - n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    world_buf_append(b, digits + sizeof digits - n, n);
}

/* {"error": reason}: the reason cut to WORLD_REFUSAL_MAX bytes at a character boundary, and
   never empty (the kernel takes no empty reason). */
static inline void world__encode_refusal(world_buf *b) {
    const uint8_t *p = world__refusal_text.ptr;
    uint32_t n = world__refusal_text.len;
    if (n > WORLD_REFUSAL_MAX) {
        n = WORLD_REFUSAL_MAX;
        while (n > 0 && (p[n] & 0xC0) == 0x80) n--; /* p[n] continues a character: cut before */
    }
    cbor_put_map_head(b, 1);
    cbor_put_str(b, "error");
    if (n == 0) cbor_put_str(b, "refused");
    else cbor_put_text(b, p, n);
}

/* Annotations (`ann`): write one item into the returned buffer. */
static inline world_buf *world_annotate(world_out *out) {
    out->has_ann = true;
    out->ann.len = 0;
    return &out->ann;
}

/* A payload must be exactly one canonical item before it leaves the module. */
static inline void world__put_payload(world_buf *b, const world_buf *payload) {
    if (cbor_validate(payload->ptr, payload->len) != WORLD_OK) world_trap();
    cbor_put_bytes(b, payload->ptr, payload->len);
}

/*
 * Encode {ann?, state, effects?, domain_events?}. Keys are written in canonical order by hand:
 * bytewise order of the encoded text keys is length first here ("ann" < "state" < "effects" <
 * "domain_events"; entries: "key" < "value" < "schema"; effects: "kind" < "params" < "cap_slot").
 */
WORLD__NOINLINE static inline void world__encode_output(const world_out *o, world_buf *b) {
    if (world__refused) {
        world__encode_refusal(b);
        if (cbor_validate(b->ptr, b->len) != WORLD_OK) world_trap(); /* not UTF-8 */
        return;
    }
    if (o->state_mode == WORLD__STATE_UNSET) world_trap(); /* the author forgot the state */
    cbor_put_map_head(b, 1u + (o->has_ann ? 1u : 0u) + (o->has_effect ? 1u : 0u) +
                             (o->n_events ? 1u : 0u));
    if (o->has_ann) {
        cbor_put_str(b, "ann");
        world__put_payload(b, &o->ann);
    }
    cbor_put_str(b, "state");
    if (o->state_mode == WORLD__STATE_NULL) cbor_put_null(b);
    else if (o->state_trusted) cbor_put_bytes(b, o->state.ptr, o->state.len);
    else world__put_payload(b, &o->state);
    if (o->has_effect) {
        cbor_put_str(b, "effects");
        cbor_put_array(b, 1);
        cbor_put_map_head(b, o->effect_cap_slot ? 3 : 2);
        cbor_put_str(b, "kind");
        cbor_put_str(b, o->effect_kind);
        cbor_put_str(b, "params");
        world__put_payload(b, &o->effect_params);
        if (o->effect_cap_slot) {
            cbor_put_str(b, "cap_slot");
            cbor_put_str(b, o->effect_cap_slot);
        }
    }
    if (o->n_events) {
        cbor_put_str(b, "domain_events");
        cbor_put_array(b, o->n_events);
        for (uint32_t i = 0; i < o->n_events; i++) {
            const world__domain_event *e = &o->events[i];
            cbor_put_map_head(b, e->has_key ? 3 : 2);
            if (e->has_key) {
                if (cbor_validate(e->key.ptr, e->key.len) != WORLD_OK) world_trap();
                cbor_put_str(b, "key");
                cbor_put_bytes(b, e->key.ptr, e->key.len);
            }
            cbor_put_str(b, "value");
            world__put_payload(b, &e->value);
            cbor_put_str(b, "schema");
            cbor_put_str(b, e->schema);
        }
    }
    /* Belt and braces: what leaves must be canonical (author strings are not pre-checked). */
    if (cbor_validate(b->ptr, b->len) != WORLD_OK) world_trap();
}

/* ------------------------------------------------------------------------------------------ */
/* The step export                                                                            */
/* ------------------------------------------------------------------------------------------ */

/* Whole-envelope logic: return WORLD_OK, or < 0 to fail the step (trap). */
typedef int (*world_reducer_fn)(const world_input *in, world_out *out);

static inline uint32_t world__export_alloc_impl(uint32_t len) {
    /* 0 signals failure to the host: address 0 is the bottom of the stack, never heap. */
    return (uint32_t)(uintptr_t)world_alloc_or_null(len);
}

/* `ret_ptr` stays an integer until the memcpy: the host may pass any address, aligned or not. */
static inline void world__export_step_impl(uint32_t ret_ptr, uint32_t ptr, uint32_t len,
                                           world_reducer_fn fn) {
    world_input in;
    if ((uint64_t)ptr + len > 0xFFFFFFFFu) world_trap();
    if (world_decode_input((const uint8_t *)(uintptr_t)ptr, len, &in) != WORLD_OK) world_trap();
    world_out *out = (world_out *)world_alloc((uint32_t)sizeof(world_out));
    __builtin_memset(out, 0, sizeof *out);
    if (fn(&in, out) < 0) world_trap();
    world_buf b = {0};
    world__encode_output(out, &b);
    uint32_t pair[2] = {(uint32_t)(uintptr_t)b.ptr, b.len}; /* little-endian: wasm is LE */
    world_memcpy((void *)(uintptr_t)ret_ptr, pair, sizeof pair);
}

/* Define the ABI exports for a whole-envelope reducer function `fn`. */
#define WORLD_REDUCER(fn)                                                                      \
    __attribute__((export_name("alloc"))) uint32_t world__export_alloc(uint32_t len) {        \
        return world__export_alloc_impl(len);                                                  \
    }                                                                                          \
    __attribute__((export_name("step"))) void world__export_step(uint32_t ret_ptr,            \
                                                                 uint32_t ptr, uint32_t len) { \
        world__export_step_impl(ret_ptr, ptr, len, (fn));                                      \
    }

/* ------------------------------------------------------------------------------------------ */
/* The wrapper: per-cell logic, one binary for cell mode and v1 (map-in-state) mode           */
/* ------------------------------------------------------------------------------------------ */

/*
 * Per-cell logic. `state` is the cell's substate (canonical CBOR) or NULL for a new cell; `key`
 * is the canonical CBOR of the cell's key. Set the new substate with world_set_state() or
 * delete the cell with world_delete_state(); emit domain events and at most one effect.
 * Return WORLD_OK, or < 0 to fail the step.
 */
typedef int (*world_cell_fn)(const cbor_span *state, const world_event *ev, const cbor_span *key,
                             world_out *out);

/* v1 mode without ctx.key: derive the key (canonical CBOR) from the event. */
typedef int (*world_key_fn)(const world_event *ev, cbor_span *key);

/* Rewrite a canonical map with `key` set to the new substate, or removed when `sub` is NULL.
   The input is sorted, so one merge pass keeps the output sorted without a sort. */
WORLD__NOINLINE static inline int world__map_put(cbor_span map, cbor_span key,
                                                 const world_buf *sub, bool had_key,
                                                 world_buf *b) {
    cbor_iter it;
    cbor_span k, v;
    int rc;
    bool placed = false;
    WORLD_TRY(cbor_map_begin(map, &it));
    uint64_t n = cbor_iter_left(&it) - (had_key ? 1u : 0u) + (sub ? 1u : 0u);
    cbor_put_map_head(b, n);
    while ((rc = cbor_next_entry(&it, &k, &v)) > 0) {
        int c = cbor_span_cmp(k, key);
        if (c > 0 && sub && !placed) {
            cbor_put_raw(b, key);
            cbor_put_raw(b, world_buf_span(sub));
            placed = true;
        }
        if (c != 0) {
            cbor_put_raw(b, k);
            cbor_put_raw(b, v);
        }
    }
    if (rc < 0) return rc;
    if (sub && !placed) {
        cbor_put_raw(b, key);
        cbor_put_raw(b, world_buf_span(sub));
    }
    return WORLD_OK;
}

static inline int world_run_cell(const world_input *in, world_out *out, world_cell_fn cell,
                                 world_key_fn key_of_event) {
    if (in->cell_mode) {
        if (!in->has_key) return WORLD_EINVAL; /* SPEC: cell mode always carries ctx.key */
        WORLD_TRY(cell(in->has_state ? &in->state : NULL, &in->event, &in->key, out));
        if (world__refused) return WORLD_OK;
        return out->state_mode == WORLD__STATE_UNSET ? WORLD_EINVAL : WORLD_OK;
    }
    /* v1: the state is map<key, substate>; null means the empty map. */
    static const uint8_t empty_map[1] = {0xA0};
    cbor_span map = {empty_map, 1}, key, sub;
    if (in->has_state) map = in->state;
    if (in->has_key) key = in->key;
    else if (key_of_event) WORLD_TRY(key_of_event(&in->event, &key));
    else return WORLD_EINVAL;
    WORLD_TRY(cbor_validate(key.ptr, key.len)); /* key_of_event is author code */
    if ((key.ptr[0] >> 5) > CBOR_TEXT) return WORLD_ETYPE; /* not a map key type */
    int found = cbor_map_get_raw(map, key, &sub);
    if (found != WORLD_OK && found != WORLD_ENOTFOUND) return found;
    WORLD_TRY(cell(found == WORLD_OK ? &sub : NULL, &in->event, &key, out));
    if (world__refused) return WORLD_OK; /* the map is left as it came in */
    if (out->state_mode == WORLD__STATE_UNSET) return WORLD_EINVAL;
    if (out->state_mode == WORLD__STATE_SET &&
        cbor_validate(out->state.ptr, out->state.len) != WORLD_OK)
        return WORLD_EMALFORMED;
    world_buf next = {0};
    WORLD_TRY(world__map_put(map, key, out->state_mode == WORLD__STATE_SET ? &out->state : NULL,
                             found == WORLD_OK, &next));
    /* The whole map; an empty map stays {} rather than null. It is not validated again on the
       way out: it merges entries of the validated input with the substate validated above,
       in order, so it is canonical by construction -- and re-parsing a large v1 map doubled the
       step's fuel. */
    out->state = next;
    out->state_mode = WORLD__STATE_SET;
    out->state_trusted = true;
    return WORLD_OK;
}

/*
 * Define the ABI exports for per-cell logic `step_cell`. `key_of_event` (a world_key_fn, or
 * NULL) supplies the key in v1 mode when the kernel sends no ctx.key hint.
 */
#define WORLD_CELL_REDUCER(step_cell, key_of_event)                                            \
    static int world__cell_adapter(const world_input *in, world_out *out) {                    \
        return world_run_cell(in, out, (step_cell), (key_of_event));                           \
    }                                                                                          \
    WORLD_REDUCER(world__cell_adapter)

/* ------------------------------------------------------------------------------------------ */
/* The wrapper's upgrade hook: carry a cell's state over to a new state schema                */
/* ------------------------------------------------------------------------------------------ */

/*
 * Upgrade one cell. `old_state` is the cell's state in the OLD schema's shape (never NULL: a
 * cell always has a state); `up` names the old module and schema (`up->state` is the whole
 * old state document as the kernel sent it); `key` is the canonical CBOR of the cell's key.
 * Write the new state with world_set_state() and return WORLD_OK, or return < 0 when this
 * state cannot be carried over: the step fails and the cell stays as it was.
 */
typedef int (*world_upgrade_fn)(const cbor_span *old_state, const world_upgrade *up,
                                const cbor_span *key, world_out *out);

/* An upgrade produces a state and nothing else: no delete, no domain event, no effect. */
static inline int world__upgrade_output_ok(const world_out *out) {
    if (out->state_mode != WORLD__STATE_SET) return WORLD_EINVAL;
    if (out->n_events || out->has_effect) return WORLD_EINVAL;
    return cbor_validate(out->state.ptr, out->state.len);
}

/*
 * Run `upgrade` for a sys/StateUpgrade@1 event. The event's `state` must be the envelope's
 * state, byte for byte (and not null). Cell mode: one call with the cell's state and ctx.key
 * (required). v1 mode: the state is the old map<key, substate>; `upgrade` runs once per entry,
 * in key order, and the map is rewritten with the same keys (ctx.key, if sent, is not used:
 * the whole state is upgraded in this one step). Any entry failing fails the whole step.
 */
WORLD__NOINLINE static inline int world_run_upgrade(const world_input *in, world_out *out,
                                                    world_upgrade_fn upgrade) {
    world_upgrade up;
    WORLD_TRY(world_upgrade_read(&in->event, &up));
    if (!in->has_state || !cbor_span_eq(up.state, in->state)) return WORLD_EINVAL;
    if (in->cell_mode) {
        if (!in->has_key) return WORLD_EINVAL; /* SPEC: cell mode always carries ctx.key */
        WORLD_TRY(upgrade(&in->state, &up, &in->key, out));
        return world__upgrade_output_ok(out);
    }
    cbor_iter it;
    cbor_span k, v;
    int rc;
    world_buf next = {0};
    WORLD_TRY(cbor_map_begin(in->state, &it));
    uint64_t n = cbor_iter_left(&it);
    if (n > 0xFFFFFFFFu) return WORLD_ERANGE;
    cbor_put_map_head(&next, (uint32_t)n);
    while ((rc = cbor_next_entry(&it, &k, &v)) > 0) {
        out->state_mode = WORLD__STATE_UNSET;
        WORLD_TRY(upgrade(&v, &up, &k, out));
        WORLD_TRY(world__upgrade_output_ok(out));
        cbor_put_raw(&next, k);
        cbor_put_raw(&next, world_buf_span(&out->state));
    }
    WORLD_TRY(rc);
    /* Same keys in the same (canonical) order, each substate validated: canonical. */
    out->state = next;
    out->state_mode = WORLD__STATE_SET;
    out->state_trusted = true;
    return WORLD_OK;
}

/*
 * WORLD_CELL_REDUCER plus an upgrade hook `upgrade_cell` (a world_upgrade_fn): a
 * sys/StateUpgrade@1 event goes to `upgrade_cell` (see world_run_upgrade), every other event
 * to `step_cell` exactly as with WORLD_CELL_REDUCER.
 */
#define WORLD_CELL_REDUCER_UPGRADABLE(step_cell, key_of_event, upgrade_cell)                   \
    static int world__cell_adapter(const world_input *in, world_out *out) {                    \
        if (world_event_is_upgrade(&in->event))                                                \
            return world_run_upgrade(in, out, (upgrade_cell));                                 \
        return world_run_cell(in, out, (step_cell), (key_of_event));                           \
    }                                                                                          \
    WORLD_REDUCER(world__cell_adapter)

#endif /* WORLD_H */
