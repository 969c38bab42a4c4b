/* The module of the native step path: kernel.native._native. See kernel/native/__init__.py for the design,
 * the one-sided contract every function keeps, and how it is selected and tested. */
#include "native.h"

static PyMethodDef native_methods[] = {
    {"dumps", native_py_dumps, METH_O, "air.cbor.dumps for exact built-in types, or None."},
    {"loads", native_py_loads, METH_O, "air.cbor.loads; ValueError if not canonical."},
    {"encode_record", (PyCFunction)(void (*)(void))native_py_encode_record, METH_FASTCALL,
     "A journal payload from seq, body and the encoded kind and subject, or None."},
    {"decode_record", native_py_decode_record, METH_O,
     "(seq, subject, kind, body) of a canonical record payload, or None."},
    {"encode_input", (PyCFunction)(void (*)(void))native_py_encode_input, METH_FASTCALL,
     "kernel.abi.encode_input without extra ctx, or None."},
    {"decode_output", native_py_decode_output, METH_O,
     "(state_cbor, state, events, effects, ann_cbor, ann) of a valid output, or None."},
    {"normalise", (PyCFunction)(void (*)(void))native_py_normalise, METH_FASTCALL,
     "air.values.normalise by a compiled program (kernel.native.norm_program); ValueError if "
     "not mine."},
    {"shard_splice", (PyCFunction)(void (*)(void))native_py_shard_splice, METH_FASTCALL,
     "A packed index shard merged with its dirty cells, its logical bytes, the replaced entries "
     "whose state slot was empty and the states that go out of line; or None."},
    {"find_key", (PyCFunction)(void (*)(void))native_py_find_key, METH_FASTCALL,
     "The index of a key hash in a shard's ascending keys by bisection, -1 if absent; or None."},
    {"keys_ascend", native_py_keys_ascend, METH_O,
     "Whether a shard's 32-byte key hashes strictly ascend; or None."},
    {"bind", native_py_bind, METH_O, "Set the wasmtime C-API function addresses."},
    {"bind_types", native_py_bind_types, METH_O,
     "The kernel.abi result classes decode_output builds, with their fields."},
    {NULL, NULL, 0, NULL},
};

static int native_exec(PyObject *module) {
    PyObject *cbor2 = PyImport_ImportModule("cbor2");
    if (cbor2 == NULL) return -1;
    native_tag_type = PyObject_GetAttrString(cbor2, "CBORTag");
    Py_DECREF(cbor2);
    if (native_tag_type == NULL) return -1;
    if (PyType_Ready(&NativeSessionType) < 0) return -1;
    if (PyModule_AddObjectRef(module, "Session", (PyObject *)&NativeSessionType) < 0) return -1;
    return PyModule_AddIntConstant(module, "ABI_VERSION", 1);
}

static PyModuleDef_Slot native_slots[] = {
    {Py_mod_exec, native_exec},
    {0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "kernel.native._native",
    .m_doc = "The native step path (see kernel/native/__init__.py).",
    .m_size = 0,
    .m_methods = native_methods,
    .m_slots = native_slots,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModuleDef_Init(&native_module); }
