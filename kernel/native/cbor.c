/* Canonical CBOR in C: the encoder (air.cbor.dumps) and the strict decoder (air.cbor.loads).
 *
 * Both are one-sided by construction: they handle exactly the value model of air/cbor.py for
 * exact built-in types and answer N_NOT_OURS for anything else (a subclass, an int past 64
 * bits, a lone surrogate, any byte string that is not canonical CBOR of the model). The caller
 * then runs the pure-Python reference, which decides and raises the precise CborError. So the
 * one property that matters is: whatever is accepted here is accepted there and gives the same
 * bytes or the same value. tests/kernel/native/test_native_fuzz.py holds the two to that on random and mutated
 * inputs. */
#include "native.h"

#include <string.h>

PyObject *native_tag_type = NULL;

/* --- buffer ----------------------------------------------------------------------------- */

void nbuf_init(nbuf_t *b) {
    b->data = b->inline_data;
    b->len = 0;
    b->cap = sizeof(b->inline_data);
}

void nbuf_free(nbuf_t *b) {
    if (b->data != b->inline_data) PyMem_Free(b->data);
    nbuf_init(b);
}

int nbuf_reserve(nbuf_t *b, size_t extra) {
    if (b->len + extra <= b->cap) return 0;
    size_t cap = b->cap * 2;
    while (cap < b->len + extra) cap *= 2;
    uint8_t *grown;
    if (b->data == b->inline_data) {
        grown = PyMem_Malloc(cap);
        if (grown != NULL) memcpy(grown, b->data, b->len);
    } else {
        grown = PyMem_Realloc(b->data, cap);
    }
    if (grown == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = grown;
    b->cap = cap;
    return 0;
}

int nbuf_put(nbuf_t *b, const void *src, size_t n) {
    if (nbuf_reserve(b, n) < 0) return -1;
    memcpy(b->data + b->len, src, n);
    b->len += n;
    return 0;
}

int nbuf_head(nbuf_t *b, unsigned major, uint64_t value) {
    if (nbuf_reserve(b, 9) < 0) return -1;
    uint8_t *p = b->data + b->len;
    uint8_t top = (uint8_t)(major << 5);
    size_t n;
    if (value < 24) {
        p[0] = top | (uint8_t)value;
        n = 1;
    } else if (value <= 0xFF) {
        p[0] = top | 24;
        p[1] = (uint8_t)value;
        n = 2;
    } else if (value <= 0xFFFF) {
        p[0] = top | 25;
        p[1] = (uint8_t)(value >> 8);
        p[2] = (uint8_t)value;
        n = 3;
    } else if (value <= 0xFFFFFFFFu) {
        p[0] = top | 26;
        for (int i = 0; i < 4; i++) p[1 + i] = (uint8_t)(value >> (24 - 8 * i));
        n = 5;
    } else {
        p[0] = top | 27;
        for (int i = 0; i < 8; i++) p[1 + i] = (uint8_t)(value >> (56 - 8 * i));
        n = 9;
    }
    b->len += n;
    return 0;
}

/* --- encoder ---------------------------------------------------------------------------- */

static int encode_int(nbuf_t *b, PyObject *obj) {
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (v == -1 && PyErr_Occurred()) return N_ERROR;
    if (!overflow) {
        if (v >= 0) return nbuf_head(b, 0, (uint64_t)v) < 0 ? N_ERROR : N_OK;
        return nbuf_head(b, 1, (uint64_t)(-(v + 1))) < 0 ? N_ERROR : N_OK;
    }
    /* Past 63 bits: major type 0 up to 2**64-1, major type 1 down to -2**64 (as ~obj). */
    PyObject *magnitude = overflow > 0 ? Py_NewRef(obj) : PyNumber_Invert(obj);
    if (magnitude == NULL) return N_ERROR;
    unsigned long long u = PyLong_AsUnsignedLongLong(magnitude);
    Py_DECREF(magnitude);
    if (u == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) return N_ERROR;
        PyErr_Clear();
        return N_NOT_OURS; /* outside major types 0/1: the reference raises int.range */
    }
    return nbuf_head(b, overflow > 0 ? 0 : 1, u) < 0 ? N_ERROR : N_OK;
}

static int encode_text(nbuf_t *b, PyObject *obj) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(obj, &n);
    if (s == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) return N_ERROR;
        PyErr_Clear();
        return N_NOT_OURS; /* a lone surrogate: text.not_unicode */
    }
    if (nbuf_head(b, 3, (uint64_t)n) < 0 || nbuf_put(b, s, (size_t)n) < 0) return N_ERROR;
    return N_OK;
}

static int encode_tag(nbuf_t *b, PyObject *obj) {
    PyObject *tag = PyObject_GetAttrString(obj, "tag");
    if (tag == NULL) return N_ERROR;
    PyObject *value = PyObject_GetAttrString(obj, "value");
    if (value == NULL) {
        Py_DECREF(tag);
        return N_ERROR;
    }
    int ok = PyLong_CheckExact(tag) && PyLong_AsLong(tag) == 2000 && PyBytes_CheckExact(value) &&
             PyBytes_GET_SIZE(value) == 16;
    int result = N_NOT_OURS;
    if (ok) {
        static const uint8_t head[] = {0xd9, 0x07, 0xd0, 0x50};
        result = (nbuf_put(b, head, 4) < 0 || nbuf_put(b, PyBytes_AS_STRING(value), 16) < 0)
                     ? N_ERROR
                     : N_OK;
    }
    if (PyErr_Occurred() && result != N_ERROR) result = N_ERROR;
    Py_DECREF(tag);
    Py_DECREF(value);
    return result;
}

typedef struct {
    size_t start, len;
    PyObject *value;
} keyslot_t;

static const uint8_t *key_base; /* qsort has no context argument; the GIL serialises callers */

static int compare_keys(const void *pa, const void *pb) {
    const keyslot_t *a = pa, *b = pb;
    size_t n = a->len < b->len ? a->len : b->len;
    int c = memcmp(key_base + a->start, key_base + b->start, n);
    if (c != 0) return c;
    return (a->len > b->len) - (a->len < b->len);
}

static int is_key_type(PyObject *key) {
    return PyUnicode_CheckExact(key) || PyBytes_CheckExact(key) || PyLong_CheckExact(key);
}

static int encode_map(nbuf_t *b, PyObject *obj, int depth) {
    Py_ssize_t count = PyDict_GET_SIZE(obj);
    keyslot_t small[16];
    keyslot_t *slots = count <= 16 ? small : PyMem_Malloc(sizeof(keyslot_t) * (size_t)count);
    if (slots == NULL) {
        PyErr_NoMemory();
        return N_ERROR;
    }
    nbuf_t keys;
    nbuf_init(&keys);
    int result = N_OK;
    Py_ssize_t pos = 0, i = 0;
    PyObject *key, *value;
    while (PyDict_Next(obj, &pos, &key, &value)) {
        if (!is_key_type(key)) {
            result = N_NOT_OURS;
            break;
        }
        slots[i].start = keys.len;
        result = native_encode(&keys, key, depth);
        if (result != N_OK) break;
        slots[i].len = keys.len - slots[i].start;
        slots[i].value = value;
        i++;
    }
    if (result == N_OK && i != count) result = N_NOT_OURS; /* changed while walking */
    if (result == N_OK) {
        /* Sort and check before encoding any value: a nested map reuses key_base. */
        key_base = keys.data;
        qsort(slots, (size_t)count, sizeof(keyslot_t), compare_keys);
        for (i = 1; i < count; i++)
            if (compare_keys(&slots[i - 1], &slots[i]) == 0)
                result = N_NOT_OURS; /* two keys with one encoding: let the reference decide */
        if (result == N_OK && nbuf_head(b, 5, (uint64_t)count) < 0) result = N_ERROR;
        for (i = 0; result == N_OK && i < count; i++) {
            if (nbuf_put(b, keys.data + slots[i].start, slots[i].len) < 0) {
                result = N_ERROR;
                break;
            }
            result = native_encode(b, slots[i].value, depth);
        }
    }
    nbuf_free(&keys);
    if (slots != small) PyMem_Free(slots);
    return result;
}

int native_encode(nbuf_t *b, PyObject *obj, int depth) {
    if (obj == Py_None) return nbuf_put(b, "\xf6", 1) < 0 ? N_ERROR : N_OK;
    if (obj == Py_True) return nbuf_put(b, "\xf5", 1) < 0 ? N_ERROR : N_OK;
    if (obj == Py_False) return nbuf_put(b, "\xf4", 1) < 0 ? N_ERROR : N_OK;
    if (PyUnicode_CheckExact(obj)) return encode_text(b, obj);
    if (PyBytes_CheckExact(obj)) {
        Py_ssize_t n = PyBytes_GET_SIZE(obj);
        if (nbuf_head(b, 2, (uint64_t)n) < 0 || nbuf_put(b, PyBytes_AS_STRING(obj), (size_t)n) < 0)
            return N_ERROR;
        return N_OK;
    }
    if (PyLong_CheckExact(obj)) return encode_int(b, obj);
    if (PyList_CheckExact(obj) || PyTuple_CheckExact(obj)) {
        if (depth >= NATIVE_CBOR_DEPTH_MAX) return N_NOT_OURS;
        PyObject **items = PySequence_Fast_ITEMS(obj);
        Py_ssize_t n = PySequence_Fast_GET_SIZE(obj);
        if (nbuf_head(b, 4, (uint64_t)n) < 0) return N_ERROR;
        for (Py_ssize_t i = 0; i < n; i++) {
            int r = native_encode(b, items[i], depth + 1);
            if (r != N_OK) return r;
            if (PySequence_Fast_GET_SIZE(obj) != n) return N_NOT_OURS; /* mutated under us */
        }
        return N_OK;
    }
    if (PyDict_CheckExact(obj)) {
        if (depth >= NATIVE_CBOR_DEPTH_MAX) return N_NOT_OURS;
        return encode_map(b, obj, depth + 1);
    }
    if (native_tag_type != NULL && Py_IS_TYPE(obj, (PyTypeObject *)native_tag_type))
        return encode_tag(b, obj);
    return N_NOT_OURS;
}

PyObject *native_py_dumps(PyObject *self, PyObject *obj) {
    (void)self;
    nbuf_t b;
    nbuf_init(&b);
    int r = native_encode(&b, obj, 0);
    PyObject *out = NULL;
    if (r == N_OK)
        out = PyBytes_FromStringAndSize((const char *)b.data, (Py_ssize_t)b.len);
    else if (r == N_NOT_OURS)
        out = Py_NewRef(Py_None);
    nbuf_free(&b);
    return out;
}

/* --- decoder ---------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *p, *end;
    int build; /* 0: only check canonical form, build no objects */
} dec_t;

/* Reads one head. Returns 0 ok, -1 not canonical/malformed. ``ai`` is the additional info. */
static int read_head(dec_t *d, unsigned *major, unsigned *ai, uint64_t *value) {
    if (d->p >= d->end) return -1;
    uint8_t first = *d->p++;
    *major = first >> 5;
    *ai = first & 31;
    if (*ai < 24) {
        *value = *ai;
        return 0;
    }
    if (*ai > 27) return -1; /* reserved, or indefinite length (never canonical) */
    size_t n = (size_t)1 << (*ai - 24);
    if ((size_t)(d->end - d->p) < n) return -1;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) v = (v << 8) | d->p[i];
    d->p += n;
    static const uint64_t least[4] = {24, 0x100, 0x10000, 0x100000000ull};
    if (v < least[*ai - 24]) return -1; /* not the shortest head */
    *value = v;
    return 0;
}

static int decode_item(dec_t *d, int depth, PyObject **out);

static int key_order_ok(const uint8_t *prev, size_t prev_len, const uint8_t *key, size_t len) {
    size_t n = prev_len < len ? prev_len : len;
    int c = memcmp(prev, key, n);
    return c < 0 || (c == 0 && prev_len < len);
}

static int decode_map(dec_t *d, uint64_t count, int depth, PyObject **out) {
    if (count > (uint64_t)(d->end - d->p) / 2) return N_NOT_OURS;
    PyObject *dict = d->build ? PyDict_New() : NULL;
    if (d->build && dict == NULL) return N_ERROR;
    const uint8_t *prev = NULL;
    size_t prev_len = 0;
    for (uint64_t i = 0; i < count; i++) {
        const uint8_t *start = d->p;
        if (d->p >= d->end || (*d->p >> 5) > 3) goto not_ours; /* keys: int, bytes, text */
        PyObject *key = NULL, *value = NULL;
        int r = decode_item(d, depth, &key);
        if (r != N_OK) {
            Py_XDECREF(dict);
            return r;
        }
        size_t len = (size_t)(d->p - start);
        if (prev != NULL && !key_order_ok(prev, prev_len, start, len)) {
            Py_XDECREF(key);
            goto not_ours; /* unsorted or duplicate keys */
        }
        prev = start;
        prev_len = len;
        r = decode_item(d, depth, &value);
        if (r != N_OK) {
            Py_XDECREF(key);
            Py_XDECREF(dict);
            return r;
        }
        if (d->build) {
            int failed = PyDict_SetItem(dict, key, value) < 0;
            Py_DECREF(key);
            Py_DECREF(value);
            if (failed) {
                Py_DECREF(dict);
                return N_ERROR;
            }
        }
    }
    *out = dict;
    return N_OK;
not_ours:
    Py_XDECREF(dict);
    return N_NOT_OURS;
}

static int decode_array(dec_t *d, uint64_t count, int depth, PyObject **out) {
    if (count > (uint64_t)(d->end - d->p)) return N_NOT_OURS;
    PyObject *list = d->build ? PyList_New((Py_ssize_t)count) : NULL;
    if (d->build && list == NULL) return N_ERROR;
    for (uint64_t i = 0; i < count; i++) {
        PyObject *item = NULL;
        int r = decode_item(d, depth, &item);
        if (r != N_OK) {
            Py_XDECREF(list);
            return r;
        }
        if (d->build) PyList_SET_ITEM(list, (Py_ssize_t)i, item);
    }
    *out = list;
    return N_OK;
}

static int decode_negative(uint64_t v, PyObject **out) {
    if (v <= (uint64_t)INT64_MAX) {
        *out = PyLong_FromLongLong(-1 - (long long)v);
        return *out == NULL ? N_ERROR : N_OK;
    }
    PyObject *magnitude = PyLong_FromUnsignedLongLong(v);
    if (magnitude == NULL) return N_ERROR;
    *out = PyNumber_Invert(magnitude); /* ~v == -1 - v */
    Py_DECREF(magnitude);
    return *out == NULL ? N_ERROR : N_OK;
}

static int decode_text(dec_t *d, uint64_t n, PyObject **out) {
    if (n > (uint64_t)(d->end - d->p)) return N_NOT_OURS;
    const char *s = (const char *)d->p;
    d->p += n;
    PyObject *text = PyUnicode_DecodeUTF8(s, (Py_ssize_t)n, NULL);
    if (text == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) return N_ERROR;
        PyErr_Clear();
        return N_NOT_OURS; /* text.not_unicode */
    }
    if (d->build)
        *out = text;
    else
        Py_DECREF(text);
    return N_OK;
}

static int decode_tag(dec_t *d, uint64_t tag, PyObject **out) {
    /* Only dec128: tag 2000 (head d9 07 d0) over exactly 16 bytes (head 50). */
    if (tag != 2000 || d->end - d->p < 17 || d->p[0] != 0x50) return N_NOT_OURS;
    const uint8_t *raw = d->p + 1;
    d->p += 17;
    if (!d->build) return N_OK;
    PyObject *value = PyBytes_FromStringAndSize((const char *)raw, 16);
    if (value == NULL) return N_ERROR;
    *out = PyObject_CallFunction(native_tag_type, "iN", 2000, value);
    return *out == NULL ? N_ERROR : N_OK;
}

static int decode_item(dec_t *d, int depth, PyObject **out) {
    *out = NULL;
    if (d->p >= d->end) return N_NOT_OURS;
    uint8_t first = *d->p;
    if ((first >> 5) == 7) {
        d->p++;
        PyObject *simple = first == 0xf4 ? Py_False : first == 0xf5 ? Py_True
                                                    : first == 0xf6 ? Py_None
                                                                    : NULL;
        if (simple == NULL) return N_NOT_OURS; /* floats, undefined, other simple values */
        if (d->build) *out = Py_NewRef(simple);
        return N_OK;
    }
    unsigned major, ai;
    uint64_t v;
    if (read_head(d, &major, &ai, &v) < 0) return N_NOT_OURS;
    switch (major) {
    case 0:
        if (!d->build) return N_OK;
        *out = PyLong_FromUnsignedLongLong(v);
        return *out == NULL ? N_ERROR : N_OK;
    case 1:
        return d->build ? decode_negative(v, out) : N_OK;
    case 2:
        if (v > (uint64_t)(d->end - d->p)) return N_NOT_OURS;
        if (d->build) {
            *out = PyBytes_FromStringAndSize((const char *)d->p, (Py_ssize_t)v);
            if (*out == NULL) return N_ERROR;
        }
        d->p += v;
        return N_OK;
    case 3:
        return decode_text(d, v, out);
    case 4:
        if (depth >= NATIVE_CBOR_DEPTH_MAX) return N_NOT_OURS;
        return decode_array(d, v, depth + 1, out);
    case 5:
        if (depth >= NATIVE_CBOR_DEPTH_MAX) return N_NOT_OURS;
        return decode_map(d, v, depth + 1, out);
    default: /* 6: tags */
        return decode_tag(d, v, out);
    }
}

int native_decode(const uint8_t *data, size_t len, PyObject **out) {
    dec_t d = {data, data + len, 1};
    int r = decode_item(&d, 0, out);
    if (r == N_OK && d.p != d.end) r = N_NOT_OURS; /* trailing bytes */
    if (r != N_OK) Py_CLEAR(*out);
    return r;
}

int native_is_canonical(const uint8_t *data, size_t len) {
    dec_t d = {data, data + len, 0};
    PyObject *unused = NULL;
    int r = decode_item(&d, 0, &unused);
    if (r == N_ERROR) PyErr_Clear(); /* only a MemoryError: answer "not sure" */
    return r == N_OK && d.p == d.end;
}

PyObject *native_py_loads(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyBytes_CheckExact(arg)) {
        PyErr_SetString(PyExc_TypeError, "loads takes bytes");
        return NULL;
    }
    PyObject *out = NULL;
    int r = native_decode((const uint8_t *)PyBytes_AS_STRING(arg), (size_t)PyBytes_GET_SIZE(arg),
                          &out);
    if (r == N_ERROR) return NULL;
    if (r == N_NOT_OURS) {
        PyErr_SetString(PyExc_ValueError, "not canonical");
        return NULL;
    }
    return out;
}
