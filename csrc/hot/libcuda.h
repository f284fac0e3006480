/*
 * libcuda.h -- the CUDA driver library for the native core's tables of function pointers
 * (internal: csrc/hot/hot.c, csrc/mem/devpool.c, csrc/mem/vmm.c each keep a table of their own).
 *
 * Why dlopen: the core must build and import on machines without CUDA (CI, laptops). libcuda.so.1
 * is the driver's own soname; the toolkit's stub library is never opened, because a stub would
 * "load" and then fail every call. The library is never closed: other code may share it.
 */
#ifndef TICKGPU_HOT_LIBCUDA_H
#define TICKGPU_HOT_LIBCUDA_H

#include <dlfcn.h>
#include <stddef.h>
#include <string.h>

/* The driver, or NULL without one. RTLD_NOLOAD first: share the instance cuda.bindings (or
 * PyTorch) already opened. */
static inline void *tg_libcuda_open(void)
{
    void *lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
    return lib != NULL ? lib : dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
}

/* Fills `table`, a struct of `n` function pointers in the order of `names`, all or nothing.
 * Returns 0 when every symbol resolved; -1 without a driver (the table untouched) or when one is
 * missing (the table zeroed). */
static inline int tg_libcuda_load(void *table, const char *const names[], size_t n)
{
    void *lib = tg_libcuda_open();
    if (lib == NULL)
        return -1;
    void **t = (void **)table;
    for (size_t i = 0; i < n; i++)
        if ((t[i] = dlsym(lib, names[i])) == NULL) {
            memset(table, 0, n * sizeof(void *));
            return -1;
        }
    return 0;
}

#endif
