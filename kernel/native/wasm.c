/* One reducer step through wasmtime's C API in one native call.
 *
 * The same sequence as kernel/wasm/_fastcall.py, step for step, without a ctypes crossing per C
 * call: a new store (limiter, fuel), a new instance from the pre-linked InstancePre, three
 * export lookups, alloc, write, step, read, store deleted. libwasmtime is not linked: the
 * function pointers come from the library wasmtime-py loaded (kernel.native passes them to
 * bind() once), so the extension builds without wasmtime's headers or import library. The few
 * struct layouts used are declared below and checked against wasmtime-py's ctypes layouts by
 * kernel.native before any session is made.
 *
 * Failures are returned, not raised, as a tuple the host turns into the very ReducerError the
 * Python path raises (kernel.wasm._host): ("error", opened, message, memory_bytes),
 * ("trap", code or None, opened, memory_bytes), ("alloc_oob", need, ptr), ("slot_oob",),
 * ("too_large", out_len), ("out_oob", out_ptr, out_len). The GIL is released while wasm runs. */
#include "native.h"

#include <string.h>

typedef struct wasm_byte_vec {
    size_t size;
    char *data;
} wasm_byte_vec_t;

typedef union {
    int32_t i32;
    int64_t i64;
    uint8_t bytes[16];
} val_raw_t;

typedef struct {
    uint64_t store_id;
    size_t private_;
} instance_t;

typedef struct {
    uint8_t kind; /* then 7 bytes of padding: ``of`` is 8-aligned, at offset 8 */
    uint64_t of[3];
} extern_t;

enum { EXTERN_FUNC = 0, EXTERN_MEMORY = 3, RETPTR_PAD = 12 };

static struct {
    void *(*store_new)(void *, void *, void *);
    void *(*store_context)(void *);
    void (*store_limiter)(void *, int64_t, int64_t, int64_t, int64_t, int64_t);
    void (*store_delete)(void *);
    void *(*context_set_fuel)(void *, uint64_t);
    void *(*instance_pre_instantiate)(void *, void *, instance_t *, void **);
    int (*instance_export_get)(void *, instance_t *, const char *, size_t, extern_t *);
    void *(*func_call_unchecked)(void *, void *, val_raw_t *, size_t, void **);
    uint8_t *(*memory_data)(void *, void *);
    size_t (*memory_data_size)(void *, void *);
    int (*trap_code)(void *, uint8_t *);
    void (*trap_delete)(void *);
    void (*error_message)(void *, wasm_byte_vec_t *);
    void (*error_delete)(void *);
    void (*byte_vec_delete)(wasm_byte_vec_t *);
} api;
static int api_bound = 0;

#define API_COUNT 15

/* bind((fn_ptr, ...)) in the order of the struct above; kernel.native.WASMTIME_FUNCTIONS. */
PyObject *native_py_bind(PyObject *self, PyObject *arg) {
    (void)self;
    if (!PyTuple_Check(arg) || PyTuple_GET_SIZE(arg) != API_COUNT) {
        PyErr_SetString(PyExc_TypeError, "bind takes a tuple of the 15 function addresses");
        return NULL;
    }
    void *ptrs[API_COUNT];
    for (Py_ssize_t i = 0; i < API_COUNT; i++) {
        ptrs[i] = PyLong_AsVoidPtr(PyTuple_GET_ITEM(arg, i));
        if (ptrs[i] == NULL) {
            if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "null function address");
            return NULL;
        }
    }
    memcpy(&api, ptrs, sizeof(api));
    api_bound = 1;
    Py_RETURN_NONE;
}

typedef struct {
    PyObject_HEAD void *engine;
    void *pre;
    int64_t memory_bytes_max, table_elements_max;
    uint64_t fuel;
    uint64_t output_bytes_max;
    int retptr;
    int kinds_checked;
} SessionObject;

/* What one step ended with, filled without the GIL and turned into Python after. */
typedef struct {
    enum { ST_OK, ST_ERROR, ST_TRAP, ST_ALLOC_OOB, ST_SLOT_OOB, ST_TOO_LARGE, ST_OUT_OOB, ST_KINDS } kind;
    int opened, has_code;
    uint8_t code;
    uint64_t a, b;
    size_t memory_bytes;
    wasm_byte_vec_t message;
    uint8_t kinds[3];
} outcome_t;

typedef struct {
    void *store, *ctx;
    instance_t instance;
    extern_t ext[3];
    val_raw_t args[3];
} call_t;

/* A failed C call: a wasmtime error or a trap. Takes ownership of both. */
static void failed(call_t *c, outcome_t *o, void *error, void *trap) {
    if (error != NULL) {
        o->kind = ST_ERROR;
        api.error_message(error, &o->message);
        api.error_delete(error);
        if (trap != NULL) api.trap_delete(trap);
    } else {
        o->kind = ST_TRAP;
        o->has_code = api.trap_code(trap, &o->code) != 0;
        api.trap_delete(trap);
    }
    if (o->opened) o->memory_bytes = api.memory_data_size(c->ctx, c->ext[0].of);
}

static int call_func(call_t *c, outcome_t *o, int which) {
    void *trap = NULL;
    void *error = api.func_call_unchecked(c->ctx, c->ext[which].of, c->args, 3, &trap);
    if (error != NULL || trap != NULL) {
        failed(c, o, error, trap);
        return -1;
    }
    return 0;
}

/* Store, limiter, fuel, instance, exports. 0 ok, -1 with *o filled. */
static int open_instance(SessionObject *s, call_t *c, outcome_t *o) {
    c->store = api.store_new(s->engine, NULL, NULL);
    c->ctx = api.store_context(c->store);
    api.store_limiter(c->store, s->memory_bytes_max, s->table_elements_max, 1, 1, 1);
    void *error = api.context_set_fuel(c->ctx, s->fuel);
    if (error != NULL) {
        failed(c, o, error, NULL);
        return -1;
    }
    void *trap = NULL;
    error = api.instance_pre_instantiate(s->pre, c->ctx, &c->instance, &trap);
    if (error != NULL || trap != NULL) {
        failed(c, o, error, trap);
        return -1;
    }
    int found = api.instance_export_get(c->ctx, &c->instance, "memory", 6, &c->ext[0]) != 0;
    found = (api.instance_export_get(c->ctx, &c->instance, "alloc", 5, &c->ext[1]) != 0) && found;
    found = (api.instance_export_get(c->ctx, &c->instance, "step", 4, &c->ext[2]) != 0) && found;
    if (!found || !s->kinds_checked) {
        for (int i = 0; i < 3; i++) o->kinds[i] = c->ext[i].kind;
        if (!found || c->ext[0].kind != EXTERN_MEMORY || c->ext[1].kind != EXTERN_FUNC ||
            c->ext[2].kind != EXTERN_FUNC) {
            o->kind = ST_KINDS;
            return -1;
        }
        s->kinds_checked = 1;
    }
    o->opened = 1;
    return 0;
}

static void exchange(SessionObject *s, call_t *c, outcome_t *o, const uint8_t *in, size_t size,
                     uint8_t **out, size_t *out_len) {
    uint64_t need = size + (s->retptr ? RETPTR_PAD : 0);
    c->args[0].i32 = (int32_t)(uint32_t)need;
    if (call_func(c, o, 1) < 0) return;
    uint64_t ptr = (uint32_t)c->args[0].i32;
    size_t memory = api.memory_data_size(c->ctx, c->ext[0].of);
    if (ptr + (need > size ? need : size) > memory) {
        o->kind = ST_ALLOC_OOB;
        o->a = need;
        o->b = ptr;
        return;
    }
    memcpy(api.memory_data(c->ctx, c->ext[0].of) + ptr, in, size);
    uint64_t out_ptr, length;
    if (!s->retptr) {
        c->args[0].i32 = (int32_t)(uint32_t)ptr;
        c->args[1].i32 = (int32_t)(uint32_t)size;
        if (call_func(c, o, 2) < 0) return;
        out_ptr = (uint32_t)c->args[0].i32;
        length = (uint32_t)c->args[1].i32;
    } else {
        uint64_t slot = (ptr + size + 3) & ~(uint64_t)3;
        c->args[0].i32 = (int32_t)(uint32_t)slot;
        c->args[1].i32 = (int32_t)(uint32_t)ptr;
        c->args[2].i32 = (int32_t)(uint32_t)size;
        if (call_func(c, o, 2) < 0) return;
        if (slot + 8 > api.memory_data_size(c->ctx, c->ext[0].of)) {
            o->kind = ST_SLOT_OOB;
            return;
        }
        const uint8_t *pair = api.memory_data(c->ctx, c->ext[0].of) + slot;
        out_ptr = (uint64_t)pair[0] | (uint64_t)pair[1] << 8 | (uint64_t)pair[2] << 16 |
                  (uint64_t)pair[3] << 24;
        length = (uint64_t)pair[4] | (uint64_t)pair[5] << 8 | (uint64_t)pair[6] << 16 |
                 (uint64_t)pair[7] << 24;
    }
    if (length > s->output_bytes_max) {
        o->kind = ST_TOO_LARGE;
        o->a = length;
        return;
    }
    if (out_ptr + length > api.memory_data_size(c->ctx, c->ext[0].of)) {
        o->kind = ST_OUT_OOB;
        o->a = out_ptr;
        o->b = length;
        return;
    }
    *out = api.memory_data(c->ctx, c->ext[0].of) + out_ptr;
    *out_len = (size_t)length;
}

static PyObject *outcome_tuple(outcome_t *o) {
    PyObject *memory = o->opened ? PyLong_FromSize_t(o->memory_bytes) : Py_NewRef(Py_None);
    if (memory == NULL) return NULL;
    switch (o->kind) {
    case ST_ERROR: {
        PyObject *text = PyUnicode_DecodeUTF8(o->message.data, (Py_ssize_t)o->message.size,
                                              "replace");
        api.byte_vec_delete(&o->message);
        if (text == NULL) {
            Py_DECREF(memory);
            return NULL;
        }
        return Py_BuildValue("(sNNN)", "error", PyBool_FromLong(o->opened), text, memory);
    }
    case ST_TRAP: {
        PyObject *code = o->has_code ? PyLong_FromLong(o->code) : Py_NewRef(Py_None);
        return Py_BuildValue("(sNNN)", "trap", code, PyBool_FromLong(o->opened), memory);
    }
    case ST_KINDS:
        Py_DECREF(memory);
        return Py_BuildValue("(s(iii))", "kinds", o->kinds[0], o->kinds[1], o->kinds[2]);
    case ST_ALLOC_OOB:
        Py_DECREF(memory);
        return Py_BuildValue("(sKK)", "alloc_oob", (unsigned long long)o->a,
                             (unsigned long long)o->b);
    case ST_SLOT_OOB:
        Py_DECREF(memory);
        return Py_BuildValue("(s)", "slot_oob");
    case ST_TOO_LARGE:
        Py_DECREF(memory);
        return Py_BuildValue("(sK)", "too_large", (unsigned long long)o->a);
    default: /* ST_OUT_OOB */
        Py_DECREF(memory);
        return Py_BuildValue("(sKK)", "out_oob", (unsigned long long)o->a,
                             (unsigned long long)o->b);
    }
}

/* The whole step on ``in``: output bytes, or a failure tuple. */
static PyObject *run_step(SessionObject *s, const uint8_t *in, size_t size) {
    call_t c;
    outcome_t o;
    memset(&c, 0, sizeof(c));
    memset(&o, 0, sizeof(o));
    uint8_t *out = NULL;
    size_t out_len = 0;
    Py_BEGIN_ALLOW_THREADS;
    if (open_instance(s, &c, &o) == 0) exchange(s, &c, &o, in, size, &out, &out_len);
    Py_END_ALLOW_THREADS;
    PyObject *result = o.kind == ST_OK
                           ? PyBytes_FromStringAndSize((const char *)out, (Py_ssize_t)out_len)
                           : outcome_tuple(&o);
    if (c.store != NULL) api.store_delete(c.store);
    return result;
}

static PyObject *session_call(SessionObject *s, PyObject *arg) {
    if (!PyBytes_CheckExact(arg)) {
        PyErr_SetString(PyExc_TypeError, "call takes bytes");
        return NULL;
    }
    return run_step(s, (const uint8_t *)PyBytes_AS_STRING(arg), (size_t)PyBytes_GET_SIZE(arg));
}

/* step(state, schema, value, key, cell_mode): encode_input + call; None if the arguments are
 * not ours (the caller then encodes in Python and uses call). */
static PyObject *session_step(SessionObject *s, PyObject *const *args, Py_ssize_t n) {
    if (n != 5) {
        PyErr_SetString(PyExc_TypeError, "step takes 5 arguments");
        return NULL;
    }
    nbuf_t b;
    nbuf_init(&b);
    int r = native_encode_input(&b, args[0], args[1], args[2], args[3], args[4]);
    PyObject *result = r == N_OK ? run_step(s, b.data, b.len) : (r == N_NOT_OURS ? Py_NewRef(Py_None) : NULL);
    nbuf_free(&b);
    return result;
}

/* probe(): instantiate once and drop it; None, or a failure tuple. */
static PyObject *session_probe(SessionObject *s, PyObject *unused) {
    (void)unused;
    call_t c;
    outcome_t o;
    memset(&c, 0, sizeof(c));
    memset(&o, 0, sizeof(o));
    Py_BEGIN_ALLOW_THREADS;
    open_instance(s, &c, &o);
    Py_END_ALLOW_THREADS;
    o.opened = 0; /* like the Python probe: a failure here is an instantiation failure */
    PyObject *result = o.kind == ST_OK ? Py_NewRef(Py_None) : outcome_tuple(&o);
    if (c.store != NULL) api.store_delete(c.store);
    return result;
}

static int session_init(SessionObject *s, PyObject *args, PyObject *kwds) {
    static char *names[] = {"engine", "pre", "memory_bytes_max", "table_elements_max",
                            "fuel", "output_bytes_max", "retptr", NULL};
    unsigned long long engine, pre, fuel, output_max;
    long long memory_max, table_max;
    int retptr;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "KKLLKKp", names, &engine, &pre, &memory_max,
                                     &table_max, &fuel, &output_max, &retptr))
        return -1;
    if (!api_bound) {
        PyErr_SetString(PyExc_RuntimeError, "bind() the wasmtime functions first");
        return -1;
    }
    if (engine == 0 || pre == 0) {
        PyErr_SetString(PyExc_ValueError, "null engine or InstancePre");
        return -1;
    }
    s->engine = (void *)(uintptr_t)engine;
    s->pre = (void *)(uintptr_t)pre;
    s->memory_bytes_max = memory_max;
    s->table_elements_max = table_max;
    s->fuel = fuel;
    s->output_bytes_max = output_max;
    s->retptr = retptr;
    s->kinds_checked = 0;
    return 0;
}

static PyMethodDef session_methods[] = {
    {"call", (PyCFunction)session_call, METH_O, "Run one step on input bytes."},
    {"step", (PyCFunction)(void (*)(void))session_step, METH_FASTCALL,
     "encode_input + call in one native call."},
    {"probe", (PyCFunction)session_probe, METH_NOARGS, "Instantiate once and drop it."},
    {NULL, NULL, 0, NULL},
};

PyTypeObject NativeSessionType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "kernel.native._native.Session",
    .tp_basicsize = sizeof(SessionObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "One reducer's step machinery on wasmtime's C API; see kernel/native/__init__.py.",
    .tp_methods = session_methods,
    .tp_init = (initproc)session_init,
    .tp_new = PyType_GenericNew,
};
