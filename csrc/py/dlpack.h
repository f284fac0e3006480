/* DLPack export through the Python C API (csrc/py/dlpack.c); not part of the CFFI cdef, since its
 * functions take and return Python objects: tickgpu.runtime.arrays calls them through ctypes.PyDLL. */
#ifndef TICKGPU_PY_DLPACK_H
#define TICKGPU_PY_DLPACK_H

#include <Python.h>
#include <stdint.h>

/* A new "dltensor" capsule of the C-contiguous array at `data` (ndim dimensions of `shape`, DLPack
 * dtype code/bits, lanes 1; device type/id as DLPack counts them), holding a reference to `owner`
 * until the consumer's release (or, unconsumed, the capsule's). NULL with an exception set on bad
 * arguments or no memory. */
PyObject *tg_dlpack_capsule(PyObject *owner, uintptr_t data, int ndim, const int64_t *shape, int code, int bits,
                            int device_type, int device_id);

#endif
