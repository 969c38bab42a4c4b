/* Normalising an outside value by its schema, for the common shapes: air.values.normalise.
 *
 * The schema comes compiled by kernel.native.norm_program into nested tuples (refs resolved):
 *   (P_PRIM, name, code)          a primitive, code one of the PRIM_* below
 *   (P_RECORD, "record", fields, index)   fields ((name, program, is_option), ...), index name->i
 *   (P_VARIANT, "variant", cases)         cases {name: program}
 *   (P_OPTION, "option", item), (P_LIST, "list", item), (P_DECLINE, kind)
 * One-sided like everything here: it handles plain JSON-ish values of exact built-in types in
 * the sugar lens (records, "$tag" variants, options, lists, ints, text, bools, bytes objects)
 * and declines the rest (the tagged lens, integers or times written as text, base64, sets, maps,
 * decimals, anything off-schema), raising ValueError; kernel.native then runs the reference,
 * which normalises or raises the precise ValueMismatch. */
#include "native.h"

enum { P_PRIM, P_RECORD, P_VARIANT, P_OPTION, P_LIST, P_DECLINE };
enum {
    PRIM_DECLINE,
    PRIM_BOOL,
    PRIM_INT,
    PRIM_NAT,
    PRIM_TEXT,
    PRIM_BYTES,
    PRIM_HASH,
    PRIM_UUID,
    PRIM_UNIT,
};
#define NORM_DEPTH_MAX 64 /* below air.values.VALUE_DEPTH_MAX (128): deeper is declined */

static PyObject *decline(void) {
    PyErr_SetString(PyExc_ValueError, "not mine");
    return NULL;
}

static PyObject *norm(PyObject *prog, PyObject *value, int depth);

static PyObject *norm_prim(long code, PyObject *value) {
    switch (code) {
    case PRIM_BOOL:
        if (PyBool_Check(value)) return Py_NewRef(value);
        break;
    case PRIM_INT:
    case PRIM_NAT:
        if (PyLong_CheckExact(value)) {
            int overflow = 0;
            long long v = PyLong_AsLongLongAndOverflow(value, &overflow);
            if (v == -1 && PyErr_Occurred()) return NULL;
            if (code == PRIM_INT && !overflow) return Py_NewRef(value);
            if (code == PRIM_NAT && !overflow && v >= 0) return Py_NewRef(value);
            if (code == PRIM_NAT && overflow > 0) {
                unsigned long long u = PyLong_AsUnsignedLongLong(value);
                if (!(u == (unsigned long long)-1 && PyErr_Occurred())) return Py_NewRef(value);
                PyErr_Clear();
            }
        }
        break;
    case PRIM_TEXT:
        if (PyUnicode_CheckExact(value)) {
            if (PyUnicode_IS_ASCII(value)) return Py_NewRef(value);
            if (PyUnicode_AsUTF8AndSize(value, NULL) != NULL) return Py_NewRef(value);
            PyErr_Clear(); /* a lone surrogate: text.not_unicode */
        }
        break;
    case PRIM_BYTES:
        if (PyBytes_CheckExact(value)) return Py_NewRef(value);
        break;
    case PRIM_HASH:
    case PRIM_UUID:
        if (PyBytes_CheckExact(value) && PyBytes_GET_SIZE(value) == (code == PRIM_HASH ? 32 : 16))
            return Py_NewRef(value);
        break;
    case PRIM_UNIT:
        if (value == Py_None || (PyDict_CheckExact(value) && PyDict_GET_SIZE(value) == 0))
            Py_RETURN_NONE;
        break;
    default:
        break;
    }
    return decline();
}

static PyObject *norm_record(PyObject *prog, PyObject *value, int depth) {
    PyObject *fields = PyTuple_GET_ITEM(prog, 2), *index = PyTuple_GET_ITEM(prog, 3);
    if (!PyDict_CheckExact(value)) return decline();
    Py_ssize_t pos = 0;
    PyObject *key, *item;
    while (PyDict_Next(value, &pos, &key, &item)) /* unknown fields: record.extra */
        if (!PyUnicode_CheckExact(key) || PyDict_GetItemWithError(index, key) == NULL)
            return PyErr_Occurred() ? NULL : decline();
    PyObject *out = PyDict_New();
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fields); i++) {
        PyObject *field = PyTuple_GET_ITEM(fields, i);
        PyObject *name = PyTuple_GET_ITEM(field, 0);
        PyObject *given = PyDict_GetItemWithError(value, name), *done;
        if (given != NULL)
            done = norm(PyTuple_GET_ITEM(field, 1), given, depth);
        else if (PyErr_Occurred())
            done = NULL;
        else if (PyTuple_GET_ITEM(field, 2) == Py_True)
            done = Py_NewRef(Py_None); /* an absent option field */
        else
            done = decline(); /* record.missing */
        if (done == NULL || PyDict_SetItem(out, name, done) < 0) {
            Py_XDECREF(done);
            Py_DECREF(out);
            return NULL;
        }
        Py_DECREF(done);
    }
    return out;
}

static PyObject *norm_variant(PyObject *prog, PyObject *value, int depth) {
    PyObject *cases = PyTuple_GET_ITEM(prog, 2), *tag, *inner = Py_None;
    if (PyUnicode_CheckExact(value)) {
        tag = value;
    } else {
        if (!PyDict_CheckExact(value)) return decline();
        tag = PyDict_GetItemString(value, "$tag");
        PyObject *given = PyDict_GetItemString(value, "$value");
        if (tag == NULL || PyDict_GET_SIZE(value) != 1 + (given != NULL)) return decline();
        if (given != NULL) inner = given;
    }
    if (!PyUnicode_CheckExact(tag)) return decline();
    PyObject *case_prog = PyDict_GetItemWithError(cases, tag);
    if (case_prog == NULL) return PyErr_Occurred() ? NULL : decline(); /* variant.tag */
    PyObject *done = norm(case_prog, inner, depth);
    if (done == NULL) return NULL;
    PyObject *out = Py_BuildValue("{sOsN}", "$tag", tag, "$value", done);
    return out;
}

static PyObject *norm_list(PyObject *prog, PyObject *value, int depth) {
    if (!PyList_CheckExact(value) && !PyTuple_CheckExact(value)) return decline();
    PyObject *item = PyTuple_GET_ITEM(prog, 2);
    Py_ssize_t n = PySequence_Fast_GET_SIZE(value);
    PyObject *out = PyList_New(n);
    if (out == NULL) return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PySequence_Fast_GET_SIZE(value) != n) { /* changed under us */
            Py_DECREF(out);
            return decline();
        }
        PyObject *done = norm(item, PySequence_Fast_ITEMS(value)[i], depth);
        if (done == NULL) {
            Py_DECREF(out);
            return NULL;
        }
        PyList_SET_ITEM(out, i, done);
    }
    return out;
}

static PyObject *norm(PyObject *prog, PyObject *value, int depth) {
    if (!PyTuple_CheckExact(prog) || PyTuple_GET_SIZE(prog) < 2) return decline();
    long kind = PyLong_AsLong(PyTuple_GET_ITEM(prog, 0));
    /* The tagged lens ({"<kind>": ...}) is the reference's: decline it at every level. */
    if (PyDict_CheckExact(value) && PyDict_GET_SIZE(value) == 1 &&
        PyDict_GetItemWithError(value, PyTuple_GET_ITEM(prog, 1)) != NULL)
        return decline();
    if (PyErr_Occurred()) return NULL;
    if (kind == P_PRIM) return norm_prim(PyLong_AsLong(PyTuple_GET_ITEM(prog, 2)), value);
    if (depth >= NORM_DEPTH_MAX) return decline();
    switch (kind) {
    case P_RECORD:
        return norm_record(prog, value, depth + 1);
    case P_VARIANT:
        return norm_variant(prog, value, depth + 1);
    case P_OPTION:
        if (value == Py_None) Py_RETURN_NONE;
        return norm(PyTuple_GET_ITEM(prog, 2), value, depth + 1);
    case P_LIST:
        return norm_list(prog, value, depth + 1);
    default:
        return decline();
    }
}

PyObject *native_py_normalise(PyObject *self, PyObject *const *args, Py_ssize_t n) {
    (void)self;
    if (n != 2) {
        PyErr_SetString(PyExc_TypeError, "normalise(program, value)");
        return NULL;
    }
    return norm(args[0], args[1], 0);
}
