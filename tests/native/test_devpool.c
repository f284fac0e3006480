/* The device pool (csrc/mem/devpool.c) on its host backend under sanitizers: random alloc/free/flush
 * with every buffer filled with its own byte and checked before it is freed (an overlap or a reuse
 * of pending memory shows as a wrong byte, an overrun as an ASan report), statistics against sums
 * kept here, double and foreign frees refused, and several threads at once (ThreadSanitizer).
 *
 * devpool.c is compiled into this test directly: the sanitizer harness links the CPU core only. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../csrc/mem/devpool.c"

#include "check.h"

#define MB ((int64_t)1 << 20)

typedef struct {
    uintptr_t ptr;
    int64_t nbytes, rounded;
    unsigned char tag;
} held;

static uint64_t next_rand(uint64_t *s)   /* xorshift64*: a fixed sequence per seed */
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 2685821657736338717ull;
}

static int64_t random_size(uint64_t *s)
{
    switch (next_rand(s) % 4) {
    case 0: return (int64_t)(next_rand(s) % 4097);
    case 1: return (int64_t)(next_rand(s) % 200000);
    case 2: return (int64_t)(next_rand(s) % (2 * MB));
    default: return (int64_t)(next_rand(s) % 600);
    }
}

static int intact(const held *h)
{
    const unsigned char *p = (const unsigned char *)h->ptr;
    for (int64_t i = 0; i < h->nbytes; i++)
        if (p[i] != h->tag)
            return 0;
    return 1;
}

static tg_devpool *make_pool(int64_t lazy)
{
    tg_devpool_config c;
    memset(&c, 0, sizeof c);
    c.backend = TG_DEVPOOL_HOST;
    c.slab_block_bytes = MB;
    c.slab_blocks = 3;
    c.small_max = 256 << 10;
    c.lazy_bytes = lazy;
    c.cap_bytes = 24 * MB;
    c.release_threshold = -1;
    tg_devpool *p = NULL;
    CHECK(tg_devpool_create(&c, &p, NULL) == TG_OK && p != NULL);
    return p;
}

/* One thread's random walk; with `exact` (single thread) the statistics are checked against it. */
static void walk(tg_devpool *pool, uint64_t seed, int steps, int exact, unsigned char tag_base)
{
    held *live = calloc(4096, sizeof *live);
    int64_t nlive = 0, in_use = 0;
    unsigned char tag = tag_base;
    for (int step = 0; step < steps; step++) {
        uint64_t r = next_rand(&seed) % 10;
        if (r < 5 && nlive < 4096) {
            int64_t n = random_size(&seed);
            uintptr_t ptr = 0;
            int level = 0;
            int st = tg_devpool_alloc(pool, n, 0, &ptr, &level, NULL);
            if (st == TG_ERANGE)
                continue;           /* the cap: refused cleanly */
            CHECK(st == TG_OK && ptr != 0 && ptr % 512 == 0 && (level == 1 || level == 2));
            if (st != TG_OK)
                continue;
            tag = (unsigned char)(tag % 60 + 1 + tag_base);
            memset((void *)ptr, tag, (size_t)n);
            live[nlive++] = (held){ptr, n, tg_devpool_rounded(pool, n), tag};
            in_use += tg_devpool_rounded(pool, n);
        } else if (r < 9 && nlive > 0) {
            int64_t i = (int64_t)(next_rand(&seed) % (uint64_t)nlive);
            CHECK(intact(&live[i]));
            CHECK(tg_devpool_free(pool, live[i].ptr, 0, NULL) == TG_OK);
            in_use -= live[i].rounded;
            if (exact) {            /* a second free while pending is a double free */
                int64_t size = 0;
                int level = 0, state = 0;
                if (tg_devpool_lookup(pool, live[i].ptr, &size, &level, &state) == TG_OK && state == 2)
                    CHECK(tg_devpool_free(pool, live[i].ptr, 0, NULL) == TG_EDATA);
            }
            live[i] = live[--nlive];
        } else {
            CHECK(tg_devpool_flush(pool, NULL) == TG_OK);
        }
        if (exact) {
            tg_devpool_stats s;
            CHECK(tg_devpool_get_stats(pool, &s) == TG_OK);
            CHECK(s.in_use == in_use && s.live == nlive && s.reserved <= s.cap && s.peak_reserved <= s.cap);
            CHECK(s.fragmentation >= 0.0 && s.fragmentation < 1.0);
        }
    }
    for (int64_t i = 0; i < nlive; i++) {
        CHECK(intact(&live[i]));
        CHECK(tg_devpool_free(pool, live[i].ptr, 0, NULL) == TG_OK);
    }
    free(live);
}

static void test_single_thread(void)
{
    tg_devpool *pool = make_pool(3 * MB);
    walk(pool, 0x9e3779b97f4a7c15ull, 20000, 1, 0);
    CHECK(tg_devpool_free(pool, (uintptr_t)0x1234, 0, NULL) == TG_EINVAL);     /* foreign */
    CHECK(tg_devpool_flush(pool, NULL) == TG_OK);
    tg_devpool_stats s;
    tg_devpool_get_stats(pool, &s);
    CHECK(s.in_use == 0 && s.pending_bytes == 0 && s.largest_free == (s.blocks ? MB : 0));
    int64_t n = -1, bytes = -1;
    CHECK(tg_devpool_destroy(pool, &n, &bytes, NULL) == TG_OK && n == 0 && bytes == 0);
}

static void test_outstanding_reported(void)
{
    tg_devpool *pool = make_pool(0);
    uintptr_t a = 0, b = 0;
    CHECK(tg_devpool_alloc(pool, 100, 0, &a, NULL, NULL) == TG_OK);
    CHECK(tg_devpool_alloc(pool, 3 * MB, 0, &b, NULL, NULL) == TG_OK);   /* level 2 */
    int64_t n = 0, bytes = 0;
    CHECK(tg_devpool_destroy(pool, &n, &bytes, NULL) == TG_OK && n == 2 && bytes == 512 + 3 * MB);
}

static void test_bad_config(void)
{
    tg_devpool_config c;
    memset(&c, 0, sizeof c);
    c.backend = TG_DEVPOOL_HOST;
    c.slab_block_bytes = 1000;      /* not a multiple of 64 KB */
    c.slab_blocks = 1;
    c.cap_bytes = MB;
    tg_devpool *p = (tg_devpool *)1;
    CHECK(tg_devpool_create(&c, &p, NULL) == TG_EINVAL && p == NULL);
    c.slab_block_bytes = MB;
    c.cap_bytes = 0;                /* the host backend needs a cap */
    CHECK(tg_devpool_create(&c, &p, NULL) == TG_EINVAL);
    CHECK(tg_devpool_alloc(NULL, 8, 0, (uintptr_t *)&c, NULL, NULL) == TG_EINVAL);
}

/* ---- A stand-in driver table: the driver backend's logic without a GPU --------------------------
 * Device memory is host memory; cuStreamSynchronize returns `fake_sync_result`, so a failing wait
 * (a faulted kernel, a bad stream) can be staged. */
static CUresult fake_sync_result = 0;

static CUresult fake_mem_alloc(CUdeviceptr *d, size_t n)
{
    *d = (CUdeviceptr)(uintptr_t)aligned_alloc((size_t)PAGE, n);
    return *d ? 0 : CU_OUT_OF_MEMORY;
}
static CUresult fake_mem_free(CUdeviceptr d) { free((void *)(uintptr_t)d); return 0; }
static CUresult fake_get_info(size_t *f, size_t *t) { *f = *t = (size_t)1 << 30; return 0; }
static CUresult fake_pool_create(CUmemoryPool *p, const cu_pool_props *props) { (void)props; *p = (CUmemoryPool)0x1; return 0; }
static CUresult fake_pool_set(CUmemoryPool p, int a, void *v) { (void)p, (void)a, (void)v; return 0; }
static CUresult fake_pool_get(CUmemoryPool p, int a, void *v) { (void)p, (void)a; *(unsigned long long *)v = 0; return 0; }
static CUresult fake_pool_trim(CUmemoryPool p, size_t k) { (void)p, (void)k; return 0; }
static CUresult fake_pool_destroy(CUmemoryPool p) { (void)p; return 0; }
static CUresult fake_alloc_async(CUdeviceptr *d, size_t n, CUmemoryPool p, CUstream s)
{
    (void)p, (void)s;
    *d = (CUdeviceptr)(uintptr_t)aligned_alloc((size_t)MIN_CLASS, (n + MIN_CLASS - 1) / MIN_CLASS * MIN_CLASS);
    return *d ? 0 : CU_OUT_OF_MEMORY;
}
static CUresult fake_free_async(CUdeviceptr d, CUstream s) { (void)s; free((void *)(uintptr_t)d); return 0; }
static CUresult fake_stream_sync(CUstream s) { (void)s; return fake_sync_result; }
static CUresult fake_ctx_sync(void) { return 0; }
static CUresult fake_ctx_set(CUcontext c) { (void)c; return 0; }
static CUresult fake_error_name(CUresult r, const char **s) { (void)r; *s = "FAKE"; return 0; }

static void fake_load(void)
{
    cu.mem_alloc = fake_mem_alloc;
    cu.mem_free = fake_mem_free;
    cu.mem_get_info = fake_get_info;
    cu.pool_create = fake_pool_create;
    cu.pool_set_attribute = fake_pool_set;
    cu.pool_get_attribute = fake_pool_get;
    cu.pool_trim_to = fake_pool_trim;
    cu.pool_destroy = fake_pool_destroy;
    cu.alloc_from_pool_async = fake_alloc_async;
    cu.free_async = fake_free_async;
    cu.stream_sync = fake_stream_sync;
    cu.ctx_sync = fake_ctx_sync;
    cu.ctx_set_current = fake_ctx_set;
    cu.error_name = fake_error_name;
    cu_status = TG_OK;
}

/* A flush whose stream wait fails must not hand level-1 memory out again: the queued work that
 * last used it may still be running (or faulted mid-write). The free stays pending. */
static void test_failed_wait_keeps_chunks_pending(void)
{
    pthread_once(&cu_once, fake_load);   /* before any driver-backend pool: cu_ready sees the fake */
    tg_devpool_config c;
    memset(&c, 0, sizeof c);
    c.backend = TG_DEVPOOL_DRIVER;
    c.slab_block_bytes = MB;
    c.slab_blocks = 1;
    c.small_max = 64 << 10;
    c.lazy_bytes = 64 * MB;
    c.cap_bytes = 64 * MB;
    c.release_threshold = -1;
    tg_devpool *pool = NULL;
    int cu_result = 0;
    CHECK(tg_devpool_create(&c, &pool, &cu_result) == TG_OK && pool != NULL);
    if (pool == NULL)
        return;
    uintptr_t a = 0, b = 0;
    int level = 0, state = 0;
    CHECK(tg_devpool_alloc(pool, 1000, 0x10, &a, &level, NULL) == TG_OK && level == 1);
    CHECK(tg_devpool_alloc(pool, 3 * MB, 0x10, &b, &level, NULL) == TG_OK && level == 2);
    CHECK(tg_devpool_free(pool, a, 0x10, NULL) == TG_OK);
    CHECK(tg_devpool_free(pool, b, 0x10, NULL) == TG_OK);
    fake_sync_result = 700;                          /* CUDA_ERROR_ILLEGAL_ADDRESS */
    CHECK(tg_devpool_flush(pool, &cu_result) == TG_ECUDA && cu_result == 700);
    CHECK(tg_devpool_lookup(pool, a, NULL, NULL, &state) == TG_OK && state == 2);   /* still pending */
    CHECK(tg_devpool_lookup(pool, b, NULL, NULL, NULL) == TG_EINVAL);   /* level 2: stream-ordered free */
    tg_devpool_stats s;
    tg_devpool_get_stats(pool, &s);
    CHECK(s.pending_bytes == 1024 && s.in_use == 0);
    CHECK(tg_devpool_free(pool, a, 0x10, NULL) == TG_EDATA);   /* and still a double free */
    fake_sync_result = 0;                            /* the wait succeeds: now it is returned */
    CHECK(tg_devpool_flush(pool, &cu_result) == TG_OK);
    CHECK(tg_devpool_lookup(pool, a, NULL, NULL, NULL) == TG_EINVAL);
    tg_devpool_get_stats(pool, &s);
    CHECK(s.pending_bytes == 0);
    int64_t n = -1;
    CHECK(tg_devpool_destroy(pool, &n, NULL, NULL) == TG_OK && n == 0);
}

typedef struct {
    tg_devpool *pool;
    uint64_t seed;
    unsigned char tag_base;
} thread_arg;

static void *thread_main(void *v)
{
    thread_arg *a = v;
    walk(a->pool, a->seed, 4000, 0, a->tag_base);
    return NULL;
}

/* Four threads on one pool, and two of them through the process default (PyTorch's entry points). */
static void test_threads(void)
{
    tg_devpool *pool = make_pool(MB);
    pthread_t t[4];
    thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg){pool, 0x1234567ull * (uint64_t)(i + 1), (unsigned char)(64 * i)};
        CHECK(pthread_create(&t[i], NULL, thread_main, &args[i]) == 0);
    }
    CHECK(tg_devpool_set_default(pool) == NULL);
    for (int k = 0; k < 2000; k++) {
        void *m = tg_torch_alloc(4096 + k, 0, NULL);
        CHECK(m != NULL);
        memset(m, 0xEE, 4096);
        tg_torch_free(m, 4096 + k, 0, NULL);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    tg_torch_free((void *)0x40, 8, 0, NULL);          /* foreign: ignored, no crash */
    int64_t n = -1;
    CHECK(tg_devpool_destroy(pool, &n, NULL, NULL) == TG_OK && n == 0);
    CHECK(tg_devpool_get_default() == NULL);           /* destroy cleared the default */
    CHECK(tg_torch_alloc(64, 0, NULL) == NULL);
}

int main(void)
{
    test_bad_config();
    test_single_thread();
    test_outstanding_reported();
    test_failed_wait_keeps_chunks_pending();
    test_threads();
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("devpool: all checks passed\n");
    return 0;
}
