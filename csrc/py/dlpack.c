/*
 * dlpack.c -- DLPack export of tickgpu's own arrays (tickgpu.runtime.arrays.DeviceArray and the
 * device pool's views): a legacy ("dltensor") capsule around a DLManagedTensor that holds a strong
 * reference to the exporting Python object until the consumer releases the tensor.
 *
 * Why C and not ctypes: the two callbacks run whenever the consumer (PyTorch, CuPy, XLA) or the
 * garbage collector decides, possibly on a thread of the consumer's own and possibly while the
 * interpreter shuts down. Python-level callbacks need live Python objects (their closures, the
 * capsule's name, a registry) at that moment; these functions need none:
 *
 * - the tensor, its shape and strides are one malloc'd block; manager_ctx is the owner, held by
 *   Py_IncRef and released by the deleter under PyGILState_Ensure (any thread, GIL held or not);
 * - the capsule's destructor calls the deleter only for a capsule never consumed (still named
 *   "dltensor"), and keeps any exception that is being raised (a consumer that refused the
 *   capsule drops it with its own error set);
 * - once the interpreter is finalizing (tg_dlpack_at_exit, called from an atexit handler) both
 *   leave the tensor and its owner alone: the process is ending, and Python objects may be gone.
 *
 * Only the limited API (the native core is an abi3 module). Called through ctypes.PyDLL, which
 * holds the GIL for the call; declared in csrc/py/dlpack.h, outside the CFFI cdef.
 */
#include <Python.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "tickgpu.h"
#include "py/dlpack.h"

typedef struct {
    int32_t device_type, device_id;
} dl_device;

typedef struct {
    uint8_t code, bits;
    uint16_t lanes;
} dl_dtype;

typedef struct {
    void *data;
    dl_device device;
    int32_t ndim;
    dl_dtype dtype;
    int64_t *shape, *strides;
    uint64_t byte_offset;
} dl_tensor;

typedef struct dl_managed {
    dl_tensor dl_tensor;
    void *manager_ctx;
    void (*deleter)(struct dl_managed *self);
} dl_managed;

static const char CAPSULE_NAME[] = "dltensor";
static atomic_int finalizing = 0;
static atomic_long live = 0;

void tg_dlpack_at_exit(void) { atomic_store(&finalizing, 1); }

long tg_dlpack_live(void) { return atomic_load(&live); }

static void deleter(dl_managed *self)
{
    if (self == NULL || atomic_load(&finalizing))
        return;   /* the process is ending: nothing is freed, nothing Python is touched */
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *owner = (PyObject *)self->manager_ctx;
    self->manager_ctx = NULL;
    free(self);
    atomic_fetch_sub(&live, 1);
    Py_DecRef(owner);   /* last: freeing the owner may run Python code (its __del__) */
    PyGILState_Release(g);
}

static void capsule_destructor(PyObject *capsule)
{
    if (atomic_load(&finalizing) || !PyCapsule_IsValid(capsule, CAPSULE_NAME))
        return;   /* consumed (renamed "used_dltensor"): the consumer calls the deleter */
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    dl_managed *t = (dl_managed *)PyCapsule_GetPointer(capsule, CAPSULE_NAME);
    if (t != NULL)
        t->deleter(t);
    PyErr_Restore(type, value, tb);
}

PyObject *tg_dlpack_capsule(PyObject *owner, uintptr_t data, int ndim, const int64_t *shape, int code, int bits,
                            int device_type, int device_id)
{
    if (owner == NULL || ndim < 0 || ndim > 64 || (ndim > 0 && shape == NULL) || code < 0 || code > 255 ||
        bits <= 0 || bits > 255) {
        PyErr_SetString(PyExc_ValueError, "tg_dlpack_capsule: bad owner, ndim, shape or dtype");
        return NULL;
    }
    size_t dims = ndim > 0 ? (size_t)ndim : 1;
    dl_managed *t = malloc(sizeof *t + 2 * dims * sizeof(int64_t));
    if (t == NULL)
        return PyErr_NoMemory();
    int64_t *sh = (int64_t *)(t + 1), *st = sh + dims;
    int64_t step = 1;
    for (int i = ndim - 1; i >= 0; i--) {   /* compact row-major, in elements (DLPack's unit) */
        sh[i] = shape[i];
        st[i] = step;
        step *= shape[i] > 0 ? shape[i] : 1;
    }
    t->dl_tensor.data = (void *)data;
    t->dl_tensor.device.device_type = device_type;
    t->dl_tensor.device.device_id = device_id;
    t->dl_tensor.ndim = ndim;
    t->dl_tensor.dtype.code = (uint8_t)code;
    t->dl_tensor.dtype.bits = (uint8_t)bits;
    t->dl_tensor.dtype.lanes = 1;
    t->dl_tensor.shape = sh;
    t->dl_tensor.strides = st;
    t->dl_tensor.byte_offset = 0;
    t->manager_ctx = owner;
    t->deleter = deleter;
    Py_IncRef(owner);
    atomic_fetch_add(&live, 1);
    PyObject *capsule = PyCapsule_New(t, CAPSULE_NAME, capsule_destructor);
    if (capsule == NULL) {
        t->deleter(t);
        return NULL;
    }
    return capsule;
}
