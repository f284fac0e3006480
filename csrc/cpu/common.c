/* Status names, core count and the parallel-for used by every CPU kernel. */
#define _GNU_SOURCE
#include <pthread.h>
#include <unistd.h>

#include "tickgpu.h"
#include "internal.h"

const char *tg_status_name(int status)
{
    switch (status) {
    case TG_OK: return "TG_OK";
    case TG_EINVAL: return "TG_EINVAL";
    case TG_ENOMEM: return "TG_ENOMEM";
    case TG_ERANGE: return "TG_ERANGE";
    case TG_EDATA: return "TG_EDATA";
    case TG_ENODRIVER: return "TG_ENODRIVER";
    case TG_ECUDA: return "TG_ECUDA";
    case TG_ETHREAD: return "TG_ETHREAD";
    case TG_ECONTEXT: return "TG_ECONTEXT";
    default: return "TG_UNKNOWN";
    }
}

int tg_num_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

typedef struct {
    tg_range_fn fn;
    void *ctx;
    int64_t begin, end;
} tg_chunk;

static void *run_chunk(void *arg)
{
    tg_chunk *c = (tg_chunk *)arg;
    c->fn(c->ctx, c->begin, c->end);
    return NULL;
}

int tg_parallel_for(int64_t n, int nthreads, tg_range_fn fn, void *ctx)
{
    if (n < 0 || fn == NULL)
        return TG_EINVAL;
    if (nthreads <= 0)
        nthreads = n < TG_PARALLEL_MIN ? 1 : tg_num_cores();
    if (nthreads > TG_MAX_THREADS)
        nthreads = TG_MAX_THREADS;
    if ((int64_t)nthreads > n)
        nthreads = n > 0 ? (int)n : 1;
    if (nthreads == 1) {
        fn(ctx, 0, n);
        return TG_OK;
    }
    /* Threads are started per call: calls small enough for that cost to matter run on one
       thread (TG_PARALLEL_MIN), so a pool would buy nothing measurable. */
    pthread_t tid[TG_MAX_THREADS];
    tg_chunk chunk[TG_MAX_THREADS];
    int started = 0;
    for (int i = 0; i < nthreads; i++) {
        chunk[i].fn = fn;
        chunk[i].ctx = ctx;
        chunk[i].begin = n * i / nthreads;
        chunk[i].end = n * (i + 1) / nthreads;
    }
    for (int i = 1; i < nthreads; i++) {
        if (pthread_create(&tid[i], NULL, run_chunk, &chunk[i]) != 0)
            break;
        started = i;
    }
    /* Whatever could not be handed to a thread runs here, so the result is complete even then. */
    fn(ctx, chunk[0].begin, chunk[0].end);
    for (int i = started + 1; i < nthreads; i++)
        fn(ctx, chunk[i].begin, chunk[i].end);
    for (int i = 1; i <= started; i++)
        pthread_join(tid[i], NULL);
    return TG_OK;
}
