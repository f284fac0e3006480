/* Shared by the CPU kernels; not part of the ABI. */
#ifndef TICKGPU_INTERNAL_H
#define TICKGPU_INTERNAL_H

#include <stdint.h>

/* Below this many elements a call runs on the calling thread: starting threads costs more. */
#define TG_PARALLEL_MIN 32768
#define TG_MAX_THREADS 256

typedef void (*tg_range_fn)(void *ctx, int64_t begin, int64_t end);

/* Runs fn over [0, n) split into contiguous chunks, one per thread; returns a tg_status. */
int tg_parallel_for(int64_t n, int nthreads, tg_range_fn fn, void *ctx);

/* Strided element access: stride 0 broadcasts element 0. */
#define TG_AT(type, ptr, stride, i) (((const type *)(ptr))[(stride) * (i)])

#endif
