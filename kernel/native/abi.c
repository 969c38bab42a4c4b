/* The reducer envelope and journal records in C: kernel.abi.encode_input, the acceptance of
 * kernel.abi.decode_output, kernel.journal.encode_record's join and decode_record_fast's shape.
 *
 * One-sided like the codec (see cbor.c): each function either does exactly what the
 * pure-Python function does on success, or answers None, and the caller runs the Python one,
 * which raises the precise error (or, if the native code was merely stricter, succeeds). */
#include "native.h"

#include <string.h>

#include "structmember.h"

/* --- result objects --------------------------------------------------------------------- */

/* kernel.abi's frozen slots dataclasses, built here by setting their slots directly: their
 * generated __init__ costs ~0.6 us each (object.__setattr__ per field) and does nothing else
 * (no __post_init__; bind_types checks the slots). Unbound, decode_output returns a tuple. */
enum { T_STEP_OUTPUT, T_OUTPUT_VALUES, T_EVENT_OUT, T_EFFECT_OUT, T_COUNT };
#define FIELDS_MAX 5
static struct {
    PyTypeObject *type;
    Py_ssize_t offsets[FIELDS_MAX];
    Py_ssize_t count;
} shapes[T_COUNT];
static int shapes_bound = 0;

/* bind_types(((cls, (field, ...)), ...)) in the order StepOutput, OutputValues,
 * DomainEventOut, EffectOut. */
PyObject *native_py_bind_types(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyTuple_Check(arg) || PyTuple_GET_SIZE(arg) != T_COUNT) {
        PyErr_SetString(PyExc_TypeError, "bind_types takes 4 (class, fields) pairs");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < T_COUNT; i++) {
        PyObject *cls, *fields;
        if (!PyArg_ParseTuple(PyTuple_GET_ITEM(arg, i), "O!O!", &PyType_Type, &cls, &PyTuple_Type,
                              &fields))
            return NULL;
        Py_ssize_t count = PyTuple_GET_SIZE(fields);
        if (count > FIELDS_MAX || PyObject_HasAttrString(cls, "__post_init__")) {
            PyErr_SetString(PyExc_TypeError, "not a plain slots dataclass");
            return NULL;
        }
        for (Py_ssize_t f = 0; f < count; f++) {
            PyObject *descr = PyObject_GetAttr(cls, PyTuple_GET_ITEM(fields, f));
            if (descr == NULL) return NULL;
            int ok = Py_IS_TYPE(descr, &PyMemberDescr_Type) &&
                     ((PyMemberDescrObject *)descr)->d_member->type == T_OBJECT_EX;
            Py_ssize_t offset = ok ? ((PyMemberDescrObject *)descr)->d_member->offset : 0;
            Py_DECREF(descr);
            if (!ok) {
                PyErr_SetString(PyExc_TypeError, "field is not an object slot");
                return NULL;
            }
            shapes[i].offsets[f] = offset;
        }
        Py_XSETREF(shapes[i].type, (PyTypeObject *)Py_NewRef(cls));
        shapes[i].count = count;
    }
    shapes_bound = 1;
    Py_RETURN_NONE;
}

/* A new instance of shape ``which`` holding ``values`` (borrowed; count must match). */
static PyObject *make(int which, PyObject *const *values) {
    PyTypeObject *type = shapes[which].type;
    PyObject *obj = type->tp_alloc(type, 0);
    if (obj == NULL) return NULL;
    for (Py_ssize_t f = 0; f < shapes[which].count; f++)
        *(PyObject **)((char *)obj + shapes[which].offsets[f]) = Py_NewRef(values[f]);
    return obj;
}

/* --- input envelope --------------------------------------------------------------------- */

int native_encode_input(nbuf_t *b, PyObject *state, PyObject *schema, PyObject *value,
                        PyObject *key, PyObject *cell_mode) {
    if (!(state == Py_None || PyBytes_CheckExact(state)) || !PyUnicode_CheckExact(schema) ||
        !PyBytes_CheckExact(value) || !(key == Py_None || PyBytes_CheckExact(key)) ||
        !PyBool_Check(cell_mode))
        return N_NOT_OURS;
    /* Canonical order, fixed: ctx < event < state < version; key < cell_mode; value < schema. */
    if (nbuf_put(b, "\xa4\x63" "ctx", 5) < 0) return N_ERROR;
    if (key == Py_None) {
        if (nbuf_put(b, "\xa1", 1) < 0) return N_ERROR;
    } else {
        Py_ssize_t n = PyBytes_GET_SIZE(key);
        if (nbuf_put(b, "\xa2\x63" "key", 5) < 0 || nbuf_head(b, 2, (uint64_t)n) < 0 ||
            nbuf_put(b, PyBytes_AS_STRING(key), (size_t)n) < 0)
            return N_ERROR;
    }
    if (nbuf_put(b, "\x69" "cell_mode", 10) < 0 ||
        nbuf_put(b, cell_mode == Py_True ? "\xf5" : "\xf4", 1) < 0)
        return N_ERROR;
    Py_ssize_t vn = PyBytes_GET_SIZE(value);
    if (nbuf_put(b, "\x65" "event" "\xa2\x65" "value", 13) < 0 || nbuf_head(b, 2, (uint64_t)vn) < 0 ||
        nbuf_put(b, PyBytes_AS_STRING(value), (size_t)vn) < 0 || nbuf_put(b, "\x66" "schema", 7) < 0)
        return N_ERROR;
    int r = native_encode(b, schema, 0);
    if (r != N_OK) return r;
    if (nbuf_put(b, "\x65" "state", 6) < 0) return N_ERROR;
    if (state == Py_None) {
        if (nbuf_put(b, "\xf6", 1) < 0) return N_ERROR;
    } else {
        Py_ssize_t n = PyBytes_GET_SIZE(state);
        if (nbuf_head(b, 2, (uint64_t)n) < 0 || nbuf_put(b, PyBytes_AS_STRING(state), (size_t)n) < 0)
            return N_ERROR;
    }
    return nbuf_put(b, "\x67" "version" "\x01", 9) < 0 ? N_ERROR : N_OK;
}

static PyObject *finish(nbuf_t *b, int r) {
    PyObject *out = NULL;
    if (r == N_OK)
        out = PyBytes_FromStringAndSize((const char *)b->data, (Py_ssize_t)b->len);
    else if (r == N_NOT_OURS)
        out = Py_NewRef(Py_None);
    nbuf_free(b);
    return out;
}

PyObject *native_py_encode_input(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    (void)self;
    if (n != 5) {
        PyErr_SetString(PyExc_TypeError, "encode_input takes 5 arguments");
        return NULL;
    }
    nbuf_t b;
    nbuf_init(&b);
    return finish(&b, native_encode_input(&b, args[0], args[1], args[2], args[3], args[4]));
}

/* --- journal records -------------------------------------------------------------------- */

/* encode_record(seq, body, kind_cbor, subject_cbor): the payload bytes, or None. kind_cbor and
 * subject_cbor are the checked, already encoded texts (kernel.subjects caches them). */
PyObject *native_py_encode_record(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    (void)self;
    if (n != 4 || !PyLong_CheckExact(args[0]) || !PyBytes_CheckExact(args[2]) ||
        !PyBytes_CheckExact(args[3])) {
        PyErr_SetString(PyExc_TypeError, "encode_record(seq: int, body, kind: bytes, subject: bytes)");
        return NULL;
    }
    unsigned long long seq = PyLong_AsUnsignedLongLong(args[0]);
    if (seq == (unsigned long long)-1 && PyErr_Occurred()) return NULL;
    nbuf_t b;
    nbuf_init(&b);
    int r = N_ERROR;
    if (nbuf_put(&b, "\xa4\x63" "seq", 5) == 0 && nbuf_head(&b, 0, seq) == 0 &&
        nbuf_put(&b, "\x64" "body", 5) == 0) {
        r = native_encode(&b, args[1], 0);
        if (r == N_OK &&
            (nbuf_put(&b, "\x64" "kind", 5) < 0 ||
             nbuf_put(&b, PyBytes_AS_STRING(args[2]), (size_t)PyBytes_GET_SIZE(args[2])) < 0 ||
             nbuf_put(&b, "\x67" "subject", 8) < 0 ||
             nbuf_put(&b, PyBytes_AS_STRING(args[3]), (size_t)PyBytes_GET_SIZE(args[3])) < 0))
            r = N_ERROR;
    }
    return finish(&b, r);
}

static PyObject *get_key(PyObject *map, const char *name) {
    return PyDict_GetItemString(map, name); /* borrowed; NULL when absent */
}

/* decode_record(payload): (seq, subject, kind, body) for a canonical {seq, body, kind,
 * subject} map with a nat seq and text subject and kind, else None. The subject and kind
 * syntax is checked by the caller (kernel.journal), as for the Python decode. */
PyObject *native_py_decode_record(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyBytes_CheckExact(arg)) {
        PyErr_SetString(PyExc_TypeError, "decode_record takes bytes");
        return NULL;
    }
    PyObject *map = NULL;
    int r = native_decode((const uint8_t *)PyBytes_AS_STRING(arg), (size_t)PyBytes_GET_SIZE(arg),
                          &map);
    if (r == N_ERROR) return NULL;
    if (r == N_NOT_OURS) Py_RETURN_NONE;
    PyObject *result = NULL;
    if (PyDict_CheckExact(map) && PyDict_GET_SIZE(map) == 4) {
        PyObject *seq = get_key(map, "seq"), *subject = get_key(map, "subject");
        PyObject *kind = get_key(map, "kind"), *body = get_key(map, "body");
        if (seq != NULL && subject != NULL && kind != NULL && body != NULL &&
            PyLong_CheckExact(seq) && PyUnicode_CheckExact(subject) && PyUnicode_CheckExact(kind))
            result = PyTuple_Pack(4, seq, subject, kind, body);
        else
            result = Py_NewRef(Py_None);
    } else {
        result = Py_NewRef(Py_None);
    }
    Py_DECREF(map);
    return result;
}

/* --- output envelope -------------------------------------------------------------------- */

/* The decoded payload of a bytes field, or NULL with *ours = 0 when it is not canonical. */
static PyObject *payload(PyObject *raw, int *ours) {
    PyObject *value = NULL;
    int r = native_decode((const uint8_t *)PyBytes_AS_STRING(raw), (size_t)PyBytes_GET_SIZE(raw),
                          &value);
    if (r == N_NOT_OURS) *ours = 0;
    return value;
}

/* True if every key of ``map`` is one of ``names`` (NULL-terminated). */
static int keys_within(PyObject *map, const char *const *names) {
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(map, &pos, &key, &value)) {
        if (!PyUnicode_CheckExact(key)) return 0;
        int known = 0;
        for (const char *const *name = names; *name != NULL && !known; name++)
            known = PyUnicode_CompareWithASCIIString(key, *name) == 0;
        if (!known) return 0;
    }
    return 1;
}

static const char *const EVENT_KEYS[] = {"schema", "value", "key", NULL};
static const char *const EFFECT_KEYS[] = {"kind", "params", "cap_slot", NULL};
/* No "error": a refusal ({"error": reason}, kernel.abi's docstring) is declined here on purpose,
 * so kernel.abi decides every refusal and its records are the same bytes on both paths. */
static const char *const OUTPUT_KEYS[] = {"state", "domain_events", "effects", "ann", NULL};

/* One domain event: (schema, value_cbor, key_cbor|None, value); NULL with *ours=0 if off. */
static PyObject *event_item(PyObject *obj, int *ours) {
    if (!PyDict_CheckExact(obj) || !keys_within(obj, EVENT_KEYS)) goto off;
    PyObject *schema = get_key(obj, "schema"), *value = get_key(obj, "value");
    PyObject *key = get_key(obj, "key");
    if (schema == NULL || value == NULL || !PyUnicode_CheckExact(schema) || !PyBytes_CheckExact(value))
        goto off;
    if (key != NULL && !(PyBytes_CheckExact(key) &&
                         native_is_canonical((const uint8_t *)PyBytes_AS_STRING(key),
                                             (size_t)PyBytes_GET_SIZE(key))))
        goto off;
    PyObject *decoded = payload(value, ours);
    if (decoded == NULL) return NULL;
    return Py_BuildValue("(OOON)", schema, value, key != NULL ? key : Py_None, decoded);
off:
    *ours = 0;
    return NULL;
}

/* One effect: (kind, params_cbor, cap_slot|None, params); NULL with *ours=0 if off. */
static PyObject *effect_item(PyObject *obj, int *ours) {
    if (!PyDict_CheckExact(obj) || !keys_within(obj, EFFECT_KEYS)) goto off;
    PyObject *kind = get_key(obj, "kind"), *params = get_key(obj, "params");
    PyObject *cap_slot = get_key(obj, "cap_slot");
    if (kind == NULL || params == NULL || !PyUnicode_CheckExact(kind) || !PyBytes_CheckExact(params))
        goto off;
    if (cap_slot != NULL && !PyUnicode_CheckExact(cap_slot)) goto off;
    PyObject *decoded = payload(params, ours);
    if (decoded == NULL) return NULL;
    return Py_BuildValue("(OOON)", kind, params, cap_slot != NULL ? cap_slot : Py_None, decoded);
off:
    *ours = 0;
    return NULL;
}

static PyObject *items(PyObject *top, const char *name, PyObject *(*item)(PyObject *, int *),
                       int *ours) {
    PyObject *list = get_key(top, name);
    if (list == NULL) return PyTuple_New(0);
    if (!PyList_CheckExact(list)) {
        *ours = 0;
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(list);
    PyObject *out = PyTuple_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *one = item(PyList_GET_ITEM(list, i), ours);
        if (one == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyTuple_SET_ITEM(out, i, one);
    }
    return out;
}

/* Split (a, b, c, value) items into a tuple of ``which`` objects of (a, b, c) and one of the
 * values. Both new references, or -1. */
static int split_items(PyObject *items, int which, PyObject **objects, PyObject **values) {
    Py_ssize_t n = PyTuple_GET_SIZE(items);
    *objects = PyTuple_New(n);
    *values = PyTuple_New(n);
    if (*objects == NULL || *values == NULL) goto fail;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *item = PyTuple_GET_ITEM(items, i);
        PyObject *made = make(which, &PyTuple_GET_ITEM(item, 0));
        if (made == NULL) goto fail;
        PyTuple_SET_ITEM(*objects, i, made);
        PyTuple_SET_ITEM(*values, i, Py_NewRef(PyTuple_GET_ITEM(item, 3)));
    }
    return 0;
fail:
    Py_CLEAR(*objects);
    Py_CLEAR(*values);
    return -1;
}

/* The StepOutput (with its OutputValues) that kernel.abi.decode_output builds. */
static PyObject *build_output(PyObject *state_cbor, PyObject *state, PyObject *events,
                              PyObject *effects, PyObject *ann_cbor, PyObject *ann) {
    PyObject *event_objs = NULL, *event_values = NULL, *effect_objs = NULL, *params = NULL;
    PyObject *values = NULL, *out = NULL;
    if (split_items(events, T_EVENT_OUT, &event_objs, &event_values) < 0 ||
        split_items(effects, T_EFFECT_OUT, &effect_objs, &params) < 0)
        goto done;
    PyObject *value_fields[4] = {state, event_values, params, ann};
    values = make(T_OUTPUT_VALUES, value_fields);
    if (values == NULL) goto done;
    PyObject *out_fields[5] = {state_cbor, event_objs, effect_objs, ann_cbor, values};
    out = make(T_STEP_OUTPUT, out_fields);
done:
    Py_XDECREF(event_objs);
    Py_XDECREF(event_values);
    Py_XDECREF(effect_objs);
    Py_XDECREF(params);
    Py_XDECREF(values);
    return out;
}

/* decode_output(raw): a StepOutput (once bind_types ran; else the tuple (state_cbor, state,
 * events, effects, ann_cbor, ann)), or None. */
PyObject *native_py_decode_output(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyBytes_CheckExact(arg)) {
        PyErr_SetString(PyExc_TypeError, "decode_output takes bytes");
        return NULL;
    }
    PyObject *top = NULL, *state = NULL, *events = NULL, *effects = NULL, *ann = NULL;
    PyObject *result = NULL;
    int ours = 1;
    int r = native_decode((const uint8_t *)PyBytes_AS_STRING(arg), (size_t)PyBytes_GET_SIZE(arg),
                          &top);
    if (r == N_ERROR) return NULL;
    if (r == N_NOT_OURS || !PyDict_CheckExact(top) || !keys_within(top, OUTPUT_KEYS)) goto off;
    PyObject *state_cbor = get_key(top, "state"), *ann_cbor = get_key(top, "ann");
    if (state_cbor == NULL || !(state_cbor == Py_None || PyBytes_CheckExact(state_cbor))) goto off;
    if (ann_cbor != NULL && !PyBytes_CheckExact(ann_cbor)) goto off;
    if (state_cbor == Py_None) {
        state = Py_NewRef(Py_None);
    } else if ((state = payload(state_cbor, &ours)) == NULL) {
        goto done;
    }
    if ((events = items(top, "domain_events", event_item, &ours)) == NULL) goto done;
    if ((effects = items(top, "effects", effect_item, &ours)) == NULL) goto done;
    if (ann_cbor == NULL) {
        ann = Py_NewRef(Py_None);
    } else if ((ann = payload(ann_cbor, &ours)) == NULL) {
        goto done;
    }
    if (shapes_bound)
        result = build_output(state_cbor, state, events, effects,
                              ann_cbor != NULL ? ann_cbor : Py_None, ann);
    else
        result = PyTuple_Pack(6, state_cbor, state, events, effects,
                              ann_cbor != NULL ? ann_cbor : Py_None, ann);
    goto done;
off:
    ours = 0;
done:
    Py_XDECREF(top);
    Py_XDECREF(state);
    Py_XDECREF(events);
    Py_XDECREF(effects);
    Py_XDECREF(ann);
    if (result == NULL && !ours && !PyErr_Occurred()) Py_RETURN_NONE;
    return result;
}
