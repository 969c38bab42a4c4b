/* The packed index shard's merge in C: world._cellstore_flush's columns + merge + build +
 * logical bytes, for a checkpoint that rewrites every shard of a big world (each clean record
 * was ~0.7 us of Python: three slices, list inserts, joins, its end offsets).
 *
 * shard_splice(keys, entries, entry_ends, states, state_ends, ops) takes a packed shard
 * (world._cellstore_format.PackedShard's five byte fields, 4-byte end offsets) and ops: a list
 * of (key hash, entry bytes or None, state slot) in strictly ascending key order; None deletes
 * the key, anything else puts the record (entry bytes, state slot) in its place. It returns
 * (keys, entries, entry_ends, states, state_ends, logical, olds): the merged shard's fields,
 * its logical shard bytes (kernel.cells.logical_shard_bytes), and per op the old record's entry
 * bytes where the key was stored with an empty state slot (maybe out of line), else None.
 *
 * One-sided like the rest (see kernel/native.py): for anything it does not expect (a field of
 * the wrong size, ends that do not describe their data, ops not sorted or not of that shape, a
 * field past 4 GiB) it returns None and the caller runs the Python merge. Reads only its
 * arguments; no file, clock or environment. */
#include "_native.h"

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

typedef struct {
    PyObject *kh, *entry, *slot; /* borrowed; entry NULL for a deletion */
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
        memcpy(o->states + o->states_len, slot, (size_t)slot_len);
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

/* One walk of the merge: sizes (fill 0) or bytes (fill 1); olds is set on the sizing walk. */
static int walk(const base_t *b, const op_t *ops, Py_ssize_t m, out_t *o, int fill, PyObject *olds) {
    Py_ssize_t i = 0, j = 0;
    while (i < b->n || j < m) {
        int cmp;
        if (j == m)
            cmp = -1;
        else if (i == b->n)
            cmp = 1;
        else
            cmp = memcmp(b->keys + KH * i, PyBytes_AS_STRING(ops[j].kh), KH);
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
                PyObject *old = PyBytes_FromStringAndSize((const char *)b->entries + es,
                                                          be32(b->entry_ends + 4 * i) - es);
                if (old == NULL) return -1;
                PyObject *none = PyList_GET_ITEM(olds, j);
                PyList_SET_ITEM(olds, j, old);
                Py_DECREF(none);
            }
            i++;
        }
        if (ops[j].entry != NULL)
            emit(o, fill, (const uint8_t *)PyBytes_AS_STRING(ops[j].kh),
                 (const uint8_t *)PyBytes_AS_STRING(ops[j].entry), PyBytes_GET_SIZE(ops[j].entry),
                 (const uint8_t *)PyBytes_AS_STRING(ops[j].slot), PyBytes_GET_SIZE(ops[j].slot));
        j++;
    }
    return 0;
}

/* The ops as op_t, or NULL (no exception) if they are not ours; *m gets their count. */
static op_t *parse_ops(PyObject *list, Py_ssize_t *m) {
    if (!PyList_CheckExact(list)) return NULL;
    Py_ssize_t count = PyList_GET_SIZE(list);
    op_t *ops = PyMem_Malloc(sizeof(op_t) * (size_t)(count ? count : 1));
    if (ops == NULL) return NULL;
    for (Py_ssize_t j = 0; j < count; j++) {
        PyObject *item = PyList_GET_ITEM(list, j);
        if (!PyTuple_CheckExact(item) || PyTuple_GET_SIZE(item) != 3) goto no;
        PyObject *kh = PyTuple_GET_ITEM(item, 0), *entry = PyTuple_GET_ITEM(item, 1),
                 *slot = PyTuple_GET_ITEM(item, 2);
        if (!PyBytes_CheckExact(kh) || PyBytes_GET_SIZE(kh) != KH) goto no;
        if (j && memcmp(PyBytes_AS_STRING(ops[j - 1].kh), PyBytes_AS_STRING(kh), KH) >= 0) goto no;
        ops[j].kh = kh;
        if (entry == Py_None) {
            ops[j].entry = ops[j].slot = NULL;
        } else if (PyBytes_CheckExact(entry) && PyBytes_CheckExact(slot)) {
            ops[j].entry = entry;
            ops[j].slot = slot;
        } else {
            goto no;
        }
    }
    *m = count;
    return ops;
no:
    PyMem_Free(ops);
    return NULL;
}

PyObject *native_py_shard_splice(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    (void)self;
    if (nargs != 6) Py_RETURN_NONE;
    for (int k = 0; k < 5; k++)
        if (!PyBytes_CheckExact(args[k])) Py_RETURN_NONE;
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
    Py_ssize_t m = 0;
    op_t *ops = parse_ops(args[5], &m);
    if (ops == NULL) {
        if (PyErr_Occurred()) return NULL;
        Py_RETURN_NONE;
    }
    PyObject *result = NULL, *olds = PyList_New(m), *fields[6] = {NULL};
    out_t o, w;
    nbuf_t head;
    memset(&o, 0, sizeof o);
    memset(&w, 0, sizeof w);
    nbuf_init(&head);
    if (olds == NULL) goto done;
    for (Py_ssize_t j = 0; j < m; j++) PyList_SET_ITEM(olds, j, Py_NewRef(Py_None));
    if (walk(&b, ops, m, &o, 0, olds) < 0) goto done;
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
    walk(&b, ops, m, &w, 1, NULL); /* cannot fail: it only copies */
    result = PyTuple_Pack(7, fields[0], fields[1], fields[2], fields[3], fields[4], fields[5], olds);
done:
    nbuf_free(&head);
    for (int k = 0; k < 6; k++) Py_XDECREF(fields[k]);
    PyMem_Free(ops);
    Py_XDECREF(olds);
    return result;
}
