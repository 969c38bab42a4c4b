/* Shared declarations of the native step path (kernel/native/*.c). See kernel/native/__init__.py for
 * what the extension does, its invariants and how it is tested. No file, clock, environment or
 * randomness is touched by any of this code (SPEC §2 holds for native code too). */
#ifndef WORLD_KERNEL_NATIVE_H
#define WORLD_KERNEL_NATIVE_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* Most arrays/maps nested in one value: air.cbor.CBOR_DEPTH_MAX. */
#define NATIVE_CBOR_DEPTH_MAX 256

/* A growable byte buffer. */
typedef struct {
    uint8_t *data;
    size_t len;
    size_t cap;
    uint8_t inline_data[256];
} nbuf_t;

void nbuf_init(nbuf_t *b);
void nbuf_free(nbuf_t *b);
int nbuf_reserve(nbuf_t *b, size_t extra);                     /* 0 ok, -1 MemoryError set */
int nbuf_put(nbuf_t *b, const void *src, size_t n);            /* 0 ok, -1 MemoryError set */
int nbuf_head(nbuf_t *b, unsigned major, uint64_t value);      /* shortest CBOR head */

/* Result of the encoder and decoder walks: OK, NOT_OURS (outside what the native code accepts:
 * the caller falls back to the pure-Python reference, which then decides and explains), or
 * ERROR (a Python exception is set, e.g. MemoryError). */
enum { N_OK = 0, N_NOT_OURS = 1, N_ERROR = -1 };

/* The canonical encoder: air.cbor.dumps for exact built-in types. */
int native_encode(nbuf_t *b, PyObject *obj, int depth);

/* The strict decoder: air.cbor.loads. On N_NOT_OURS *out is NULL and no exception is set. */
int native_decode(const uint8_t *data, size_t len, PyObject **out);

/* Strict decode without building objects: 1 canonical, 0 not. */
int native_is_canonical(const uint8_t *data, size_t len);

/* cbor2.CBORTag, set at module init (needed for dec128 values). */
extern PyObject *native_tag_type;

/* Python entry points defined in cbor.c / abi.c / wasm.c /
 * norm.c / shard.c. */
PyObject *native_py_dumps(PyObject *self, PyObject *obj);
PyObject *native_py_loads(PyObject *self, PyObject *arg);
PyObject *native_py_encode_record(PyObject *self, PyObject *const *args, Py_ssize_t n);
PyObject *native_py_decode_record(PyObject *self, PyObject *arg);
PyObject *native_py_encode_input(PyObject *self, PyObject *const *args, Py_ssize_t n);
PyObject *native_py_decode_output(PyObject *self, PyObject *arg);
PyObject *native_py_bind(PyObject *self, PyObject *arg);
PyObject *native_py_bind_types(PyObject *self, PyObject *arg);
PyObject *native_py_normalise(PyObject *self, PyObject *const *args, Py_ssize_t n);
PyObject *native_py_shard_splice(PyObject *self, PyObject *const *args, Py_ssize_t n);
PyObject *native_py_find_key(PyObject *self, PyObject *const *args, Py_ssize_t n);
PyObject *native_py_keys_ascend(PyObject *self, PyObject *arg);
int native_encode_input(nbuf_t *b, PyObject *state, PyObject *schema, PyObject *value,
                        PyObject *key, PyObject *cell_mode);
extern PyTypeObject NativeSessionType;

#endif
