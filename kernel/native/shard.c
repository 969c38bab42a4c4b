/* The packed index shard's merge in C: world.cellstore._flush's merge + build + logical bytes,
 * and the entry encoding and sorting of its dirty cells, for a checkpoint that rewrites every
 * shard of a big world (each clean record was ~0.7 us of Python: three slices, list inserts,
 * joins, its end offsets; each dirty cell ~2.5 us: its sort, kernel.cells.encode_entry, the
 * tuple of its op, the look for its old record).
 *
 * shard_splice(keys, entries, entry_ends, states, state_ends, cells, inline_bytes_max) takes a
 * packed shard (world.cellstore._shards.PackedShard's five byte fields, 4-byte end offsets) and
 * cells: a dict {key hash: (CellEntry, state bytes) or None}, None deleting the key, a cell
 * putting its record in its place with its state inline when it is at most inline_bytes_max
 * bytes, else an empty state slot. It returns (keys, entries, entry_ends, states, state_ends,
 * logical, olds, adds): the merged shard's fields, its logical shard bytes
 * (kernel.cells.logical_shard_bytes), the (key hash, old entry bytes) of every key it replaced
 * or deleted whose stored state slot was empty (maybe out of line), in key order, and the
 * (key hash, state hash, state) of every cell whose state goes out of line, in the dict's order.
 *
 * One-sided like the rest (see kernel/native/__init__.py): for anything it does not expect (a field of
 * the wrong size, ends that do not describe their data, a key hash that is not 32 bytes, a cell
 * that is not a pair of an entry with exact bytes and ints and bytes, an entry whose attribute
 * raises, a number past 64 bits, a field past 4 GiB) it returns None and the caller runs the
 * Python merge, which raises its own error where there is one. Reads only its
 * arguments; no file, clock or environment. */
#include "native.h"

#include <string.h>

#define KH 32

static uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void put_be32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

/* Whether ``ends`` (n 4-byte big-endian offsets) ascend and end at ``total``. */
static int ends_ok(const uint8_t *ends, Py_ssize_t n, Py_ssize_t total) {
    uint32_t last = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t end = be32(ends + 4 * i);
        if (end < last) return 0;
        last = end;
    }
    return (Py_ssize_t)last == total;
}

typedef struct {
    const uint8_t *keys, *entries, *entry_ends, *states, *state_ends;
    Py_ssize_t n;
} base_t;

/* One dirty cell: its key hash, and for a put its encoded entry (a span of the arena) and
 * its state slot (the state, or NULL for an empty slot). */
typedef struct {
    const uint8_t *kh; /* the dict key's bytes, borrowed */
    PyObject *slot;    /* borrowed; NULL for an empty slot */
    Py_ssize_t entry_at, entry_len; /* entry_len -1 for a deletion */
} op_t;

static uint32_t start_of(const uint8_t *ends, Py_ssize_t i) { return i ? be32(ends + 4 * (i - 1)) : 0; }

/* The output, or (out == NULL) only its sizes. */
typedef struct {
    uint8_t *keys, *entries, *entry_ends, *states, *state_ends, *logical;
    Py_ssize_t count, keys_len, entries_len, states_len, logical_len;
} out_t;

static void emit(out_t *o, int fill, const uint8_t *kh, const uint8_t *entry, Py_ssize_t entry_len,
                 const uint8_t *slot, Py_ssize_t slot_len) {
    if (fill) {
        memcpy(o->keys + o->keys_len, kh, KH);
        memcpy(o->entries + o->entries_len, entry, (size_t)entry_len);
        if (slot_len) memcpy(o->states + o->states_len, slot, (size_t)slot_len);
        put_be32(o->entry_ends + 4 * o->count, (uint32_t)(o->entries_len + entry_len));
        put_be32(o->state_ends + 4 * o->count, (uint32_t)(o->states_len + slot_len));
        uint8_t *at = o->logical + o->logical_len;
        at[0] = 0x58;
        at[1] = 0x20;
        memcpy(at + 2, kh, KH);
        memcpy(at + 2 + KH, entry, (size_t)entry_len);
    }
    o->keys_len += KH;
    o->entries_len += entry_len;
    o->states_len += slot_len;
    o->logical_len += 2 + KH + entry_len;
    o->count++;
}

/* One walk of the merge: sizes (fill 0) or bytes (fill 1); olds is appended to on the sizing
 * walk. */
static int walk(const base_t *b, const op_t *ops, Py_ssize_t m, const uint8_t *arena, out_t *o,
                int fill, PyObject *olds) {
    Py_ssize_t i = 0, j = 0;
    while (i < b->n || j < m) {
        int cmp;
        if (j == m)
            cmp = -1;
        else if (i == b->n)
            cmp = 1;
        else
            cmp = memcmp(b->keys + KH * i, ops[j].kh, KH);
        if (cmp < 0) {
            uint32_t es = start_of(b->entry_ends, i), ss = start_of(b->state_ends, i);
            emit(o, fill, b->keys + KH * i, b->entries + es, be32(b->entry_ends + 4 * i) - es,
                 b->states + ss, be32(b->state_ends + 4 * i) - ss);
            i++;
            continue;
        }
        if (cmp == 0) {
            uint32_t ss = start_of(b->state_ends, i);
            if (!fill && be32(b->state_ends + 4 * i) == ss) {
                uint32_t es = start_of(b->entry_ends, i);
                PyObject *old = Py_BuildValue("(y#y#)", (const char *)ops[j].kh, (Py_ssize_t)KH,
                                              (const char *)b->entries + es,
                                              (Py_ssize_t)(be32(b->entry_ends + 4 * i) - es));
                if (old == NULL) return -1;
                int failed = PyList_Append(olds, old);
                Py_DECREF(old);
                if (failed) return -1;
            }
            i++;
        }
        if (ops[j].entry_len >= 0) {
            PyObject *slot = ops[j].slot;
            emit(o, fill, ops[j].kh, arena + ops[j].entry_at, ops[j].entry_len,
                 slot ? (const uint8_t *)PyBytes_AS_STRING(slot) : NULL,
                 slot ? PyBytes_GET_SIZE(slot) : 0);
        }
        j++;
    }
    return 0;
}

static int by_key(const void *a, const void *b) {
    return memcmp(((const op_t *)a)->kh, ((const op_t *)b)->kh, KH);
}

/* The field names of kernel.cells.CellEntry, interned once. */
enum { F_KEY, F_SIZE, F_STATE_HASH, F_LAST_ACTIVE, F_MANIFEST_HASH, F_COUNT };
static PyObject *field_names[F_COUNT];

static int intern_fields(void) {
    static const char *names[F_COUNT] = {"key_cbor", "size", "state_hash", "last_active",
                                         "manifest_hash"};
    for (int k = 0; k < F_COUNT; k++)
        if (field_names[k] == NULL && (field_names[k] = PyUnicode_InternFromString(names[k])) == NULL)
            return -1;
    return 0;
}

/* The entry's text keys and fixed parts, in canonical order (kernel.cells._ENTRY_FORMAT). */
#define PUT_LIT(b, lit) nbuf_put((b), (lit), sizeof(lit) - 1)

/* Append kernel.cells.encode_entry(entry) to the arena and set *state_hash (a new reference):
 * N_OK, N_NOT_OURS (a field that is not an exact bytes or int of the expected range) or
 * N_ERROR. */
static int encode_entry(nbuf_t *arena, PyObject *entry, PyObject **state_hash) {
    PyObject *f[F_COUNT] = {NULL};
    int rc = N_NOT_OURS;
    for (int k = 0; k < F_COUNT; k++) {
        f[k] = PyObject_GetAttr(entry, field_names[k]);
        if (f[k] == NULL) {
            /* An entry whose attribute fails is not ours: Python's merge meets it in its own
             * order (after a damaged record, say) and raises what it raises. Only what is not
             * an Exception (KeyboardInterrupt, SystemExit) goes up from here. */
            if (!PyErr_ExceptionMatches(PyExc_Exception)) {
                rc = N_ERROR;
                goto done;
            }
            PyErr_Clear();
            goto done;
        }
    }
    if (!PyBytes_CheckExact(f[F_KEY]) || !PyBytes_CheckExact(f[F_STATE_HASH]) ||
        PyBytes_GET_SIZE(f[F_STATE_HASH]) != KH || !PyBytes_CheckExact(f[F_MANIFEST_HASH]) ||
        PyBytes_GET_SIZE(f[F_MANIFEST_HASH]) != KH || !PyLong_CheckExact(f[F_SIZE]) ||
        !PyLong_CheckExact(f[F_LAST_ACTIVE]))
        goto done;
    unsigned long long size = PyLong_AsUnsignedLongLong(f[F_SIZE]), last = 0;
    if (!PyErr_Occurred()) last = PyLong_AsUnsignedLongLong(f[F_LAST_ACTIVE]);
    if (PyErr_Occurred()) { /* negative or past 64 bits: Python says what is wrong */
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            rc = N_ERROR;
            goto done;
        }
        PyErr_Clear();
        goto done;
    }
    rc = N_ERROR;
    Py_ssize_t key_len = PyBytes_GET_SIZE(f[F_KEY]);
    if (PUT_LIT(arena, "\xa5\x63key") < 0 || nbuf_head(arena, 2, (uint64_t)key_len) < 0 ||
        nbuf_put(arena, PyBytes_AS_STRING(f[F_KEY]), (size_t)key_len) < 0 ||
        PUT_LIT(arena, "\x64size") < 0 || nbuf_head(arena, 0, size) < 0 ||
        PUT_LIT(arena, "\x6astate_hash\x58\x20") < 0 ||
        nbuf_put(arena, PyBytes_AS_STRING(f[F_STATE_HASH]), KH) < 0 ||
        PUT_LIT(arena, "\x6blast_active") < 0 || nbuf_head(arena, 0, last) < 0 ||
        PUT_LIT(arena, "\x6dmanifest_hash\x58\x20") < 0 ||
        nbuf_put(arena, PyBytes_AS_STRING(f[F_MANIFEST_HASH]), KH) < 0)
        goto done;
    rc = N_OK;
    *state_hash = Py_NewRef(f[F_STATE_HASH]);
done:
    for (int k = 0; k < F_COUNT; k++) Py_XDECREF(f[k]);
    return rc;
}

/* The cells ((key hash, cell) pairs: the dict's items, held, so that nothing an entry's
 * attribute runs can free them) as ops sorted by key, their entries encoded into ``arena`` and
 * the out-of-line states appended to ``adds``: N_OK, N_NOT_OURS or N_ERROR. */
static int parse_cells(PyObject *items, Py_ssize_t inline_max, op_t *ops, nbuf_t *arena,
                       PyObject *adds) {
    Py_ssize_t m = PyList_GET_SIZE(items);
    for (Py_ssize_t j = 0; j < m; j++) {
        PyObject *item = PyList_GET_ITEM(items, j);
        PyObject *kh = PyTuple_GET_ITEM(item, 0), *cell = PyTuple_GET_ITEM(item, 1);
        if (!PyBytes_CheckExact(kh) || PyBytes_GET_SIZE(kh) != KH) return N_NOT_OURS;
        op_t *op = &ops[j];
        op->kh = (const uint8_t *)PyBytes_AS_STRING(kh);
        op->slot = NULL;
        op->entry_len = -1;
        if (cell == Py_None) continue;
        if (!PyTuple_CheckExact(cell) || PyTuple_GET_SIZE(cell) != 2) return N_NOT_OURS;
        PyObject *state = PyTuple_GET_ITEM(cell, 1), *hash = NULL;
        if (!PyBytes_CheckExact(state)) return N_NOT_OURS;
        op->entry_at = (Py_ssize_t)arena->len;
        int rc = encode_entry(arena, PyTuple_GET_ITEM(cell, 0), &hash);
        if (rc != N_OK) return rc;
        op->entry_len = (Py_ssize_t)arena->len - op->entry_at;
        if (PyBytes_GET_SIZE(state) <= inline_max) {
            Py_DECREF(hash);
            op->slot = state;
            continue;
        }
        PyObject *add = PyTuple_Pack(3, kh, hash, state);
        Py_DECREF(hash);
        if (add == NULL) return N_ERROR;
        int failed = PyList_Append(adds, add);
        Py_DECREF(add);
        if (failed) return N_ERROR;
    }
    qsort(ops, (size_t)m, sizeof(op_t), by_key);
    return N_OK;
}

PyObject *native_py_shard_splice(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 7 || !PyDict_CheckExact(args[5]) || !PyLong_CheckExact(args[6])) Py_RETURN_NONE;
    for (int k = 0; k < 5; k++)
        if (!PyBytes_CheckExact(args[k])) Py_RETURN_NONE;
    Py_ssize_t inline_max = PyLong_AsSsize_t(args[6]);
    if (inline_max < 0) {
        if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_OverflowError)) return NULL;
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    base_t b;
    Py_ssize_t keys_len = PyBytes_GET_SIZE(args[0]);
    b.n = keys_len / KH;
    if (keys_len % KH || PyBytes_GET_SIZE(args[2]) != 4 * b.n ||
        PyBytes_GET_SIZE(args[4]) != 4 * b.n)
        Py_RETURN_NONE;
    b.keys = (const uint8_t *)PyBytes_AS_STRING(args[0]);
    b.entries = (const uint8_t *)PyBytes_AS_STRING(args[1]);
    b.entry_ends = (const uint8_t *)PyBytes_AS_STRING(args[2]);
    b.states = (const uint8_t *)PyBytes_AS_STRING(args[3]);
    b.state_ends = (const uint8_t *)PyBytes_AS_STRING(args[4]);
    if (!ends_ok(b.entry_ends, b.n, PyBytes_GET_SIZE(args[1])) ||
        !ends_ok(b.state_ends, b.n, PyBytes_GET_SIZE(args[3])))
        Py_RETURN_NONE;
    for (Py_ssize_t i = 1; i < b.n; i++) /* strictly ascending, as a stored shard's keys are */
        if (memcmp(b.keys + KH * (i - 1), b.keys + KH * i, KH) >= 0) Py_RETURN_NONE;
    if (intern_fields() < 0) return NULL;
    PyObject *items = PyDict_Items(args[5]);
    if (items == NULL) return NULL;
    Py_ssize_t m = PyList_GET_SIZE(items);
    PyObject *result = NULL, *olds = PyList_New(0), *adds = PyList_New(0), *fields[6] = {NULL};
    op_t *ops = PyMem_Malloc(sizeof(op_t) * (size_t)(m ? m : 1));
    out_t o, w;
    nbuf_t head, arena;
    memset(&o, 0, sizeof o);
    memset(&w, 0, sizeof w);
    nbuf_init(&head);
    nbuf_init(&arena);
    if (olds == NULL || adds == NULL) goto done;
    if (ops == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    int rc = parse_cells(items, inline_max, ops, &arena, adds);
    if (rc == N_ERROR) goto done;
    if (rc == N_NOT_OURS) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (walk(&b, ops, m, arena.data, &o, 0, olds) < 0) goto done;
    if (o.entries_len > (Py_ssize_t)UINT32_MAX || o.states_len > (Py_ssize_t)UINT32_MAX) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (nbuf_head(&head, 5, (uint64_t)o.count) < 0) goto done;
    Py_ssize_t sizes[6] = {o.keys_len,      o.entries_len, 4 * o.count,
                           o.states_len,    4 * o.count,   (Py_ssize_t)head.len + o.logical_len};
    for (int k = 0; k < 6; k++)
        if ((fields[k] = PyBytes_FromStringAndSize(NULL, sizes[k])) == NULL) goto done;
    w.keys = (uint8_t *)PyBytes_AS_STRING(fields[0]);
    w.entries = (uint8_t *)PyBytes_AS_STRING(fields[1]);
    w.entry_ends = (uint8_t *)PyBytes_AS_STRING(fields[2]);
    w.states = (uint8_t *)PyBytes_AS_STRING(fields[3]);
    w.state_ends = (uint8_t *)PyBytes_AS_STRING(fields[4]);
    memcpy(PyBytes_AS_STRING(fields[5]), head.data, head.len);
    w.logical = (uint8_t *)PyBytes_AS_STRING(fields[5]) + head.len;
    walk(&b, ops, m, arena.data, &w, 1, NULL); /* cannot fail: it only copies */
    result = PyTuple_Pack(8, fields[0], fields[1], fields[2], fields[3], fields[4], fields[5], olds,
                          adds);
done:
    nbuf_free(&head);
    nbuf_free(&arena);
    for (int k = 0; k < 6; k++) Py_XDECREF(fields[k]);
    PyMem_Free(ops);
    Py_DECREF(items);
    Py_XDECREF(olds);
    Py_XDECREF(adds);
    return result;
}

/* find_key(keys, key_hash): the index of key_hash in keys (32-byte key hashes, concatenated,
 * strictly ascending: world.cellstore._shards checks that when it loads a shard), or -1; by
 * bisection, so a lookup reads ~8 keys instead of scanning them all (a shard of a million-cell
 * world is ~250 keys, 8 KB, mostly not in the CPU's cache). None if not bytes of those sizes. */
PyObject *native_py_find_key(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 2 || !PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[1]) ||
        PyBytes_GET_SIZE(args[1]) != KH || PyBytes_GET_SIZE(args[0]) % KH)
        Py_RETURN_NONE;
    const uint8_t *keys = (const uint8_t *)PyBytes_AS_STRING(args[0]);
    const uint8_t *wanted = (const uint8_t *)PyBytes_AS_STRING(args[1]);
    Py_ssize_t lo = 0, hi = PyBytes_GET_SIZE(args[0]) / KH;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        int cmp = memcmp(keys + KH * mid, wanted, KH);
        if (cmp == 0) return PyLong_FromSsize_t(mid);
        if (cmp < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return PyLong_FromLong(-1);
}

/* keys_ascend(keys): whether keys (32-byte key hashes, concatenated) strictly ascend; None if
 * not bytes of whole hashes. */
PyObject *native_py_keys_ascend(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyBytes_CheckExact(arg) || PyBytes_GET_SIZE(arg) % KH) Py_RETURN_NONE;
    const uint8_t *keys = (const uint8_t *)PyBytes_AS_STRING(arg);
    Py_ssize_t n = PyBytes_GET_SIZE(arg) / KH;
    for (Py_ssize_t i = 1; i < n; i++)
        if (memcmp(keys + KH * (i - 1), keys + KH * i, KH) >= 0) Py_RETURN_FALSE;
    Py_RETURN_TRUE;
}
