/* The device pool (csrc/mem/devpool.c) on its host backend under sanitizers: random alloc/free/flush
 * with every buffer filled with its own byte and checked before it is freed (an overlap or a reuse
 * of pending memory shows as a wrong byte, an overrun as an ASan report), statistics against sums
 * kept here, double and foreign frees refused, and several threads at once (ThreadSanitizer).
 * Then the driver backend on a stand-in driver table, level 3 (csrc/mem/vmm.c) included: a fake
 * virtual memory API that checks every reserve/create/map is matched and keeps memory poisoned
 * (ASan) except while it is mapped and made accessible.
 *
 * devpool.c and vmm.c are compiled into this test directly: the sanitizer harness links the CPU
 * core only. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../csrc/mem/devpool.c"
#include "../../csrc/mem/vmm.c"

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
    switch (next_rand(s) % 5) {
    case 0: return (int64_t)(next_rand(s) % 4097);
    case 1: return (int64_t)(next_rand(s) % 200000);
    case 2: return (int64_t)(next_rand(s) % (2 * MB));
    case 3: return (int64_t)(next_rand(s) % 600);
    default: return 2 * MB + (int64_t)(next_rand(s) % (5 * MB));   /* level 3 where it is on */
    }
}

/* Every byte still holds the buffer's tag. Compared 4 KB at a time with memcmp, which the
 * sanitizers check as one range: byte by byte, the threaded walk's multi-megabyte level-3 buffers
 * took minutes under TSan on a 2-core machine. */
static int intact(const held *h)
{
    unsigned char want[4096];
    memset(want, h->tag, sizeof want);
    const unsigned char *p = (const unsigned char *)h->ptr;
    for (int64_t i = 0; i < h->nbytes; i += (int64_t)sizeof want) {
        const int64_t left = h->nbytes - i;
        if (memcmp(p + i, want, (size_t)(left < (int64_t)sizeof want ? left : (int64_t)sizeof want)) != 0)
            return 0;
    }
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
            CHECK(st == TG_OK && ptr != 0 && ptr % 512 == 0 && level >= 1 && level <= 3);
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
 * Device memory is host memory; event and stream waits return `fake_sync_result`, so a failing wait
 * (a faulted kernel) can be staged. Streams carry queued "work" (fs_enqueue); an event recorded on a
 * stream completes, when waited on, the work queued before the record, destroyed stream or not; a
 * destroyed stream (fs_destroy) refuses cuStreamSynchronize, cuEventRecord and cuMemFreeAsync, and
 * each such call is counted in fs_misuse. */
static CUresult fake_sync_result = 0;
#define FS_MAX 64
static struct { uintptr_t h; long long queued, done; int dead; } fs[FS_MAX];
static int fs_n;
static long long fs_misuse, ctx_syncs, ev_created, ev_destroyed;
static struct { int live; uintptr_t stream; long long upto; } fev[64];

static int fs_get(uintptr_t h)
{
    for (int i = 0; i < fs_n; i++)
        if (fs[i].h == h)
            return i;
    CHECK(fs_n < FS_MAX);
    fs[fs_n].h = h, fs[fs_n].queued = fs[fs_n].done = 0, fs[fs_n].dead = 0;
    return fs_n++;
}
static int fs_is_dead(uintptr_t h)
{
    int i = fs_get(h);
    if (fs[i].dead)
        fs_misuse++;
    return fs[i].dead;
}
static void fs_enqueue(uintptr_t h) { fs[fs_get(h)].queued++; }
static void fs_destroy(uintptr_t h) { fs[fs_get(h)].dead = 1; }
static void fs_revive(uintptr_t h) { fs[fs_get(h)].dead = 0; }     /* the handle reused by a new stream */
static long long fs_outstanding(uintptr_t h) { int i = fs_get(h); return fs[i].queued - fs[i].done; }

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
static CUresult fake_free_async(CUdeviceptr d, CUstream s)
{
    if (fs_is_dead((uintptr_t)s))
        return 400;                                 /* CUDA_ERROR_INVALID_HANDLE */
    free((void *)(uintptr_t)d);
    return 0;
}
static CUresult fake_stream_sync(CUstream s)
{
    if (fs_is_dead((uintptr_t)s))
        return 400;
    if (fake_sync_result == 0)
        fs[fs_get((uintptr_t)s)].done = fs[fs_get((uintptr_t)s)].queued;
    return fake_sync_result;
}
static CUresult fake_ctx_sync(void)
{
    ctx_syncs++;
    for (int i = 0; i < fs_n; i++)
        fs[i].done = fs[i].queued;
    return 0;
}
static CUresult fake_event_create(CUevent *e, unsigned flags)
{
    CHECK(flags == CU_EVENT_DISABLE_TIMING);
    for (int i = 0; i < 64; i++)
        if (!fev[i].live) {
            fev[i].live = 1, fev[i].stream = 0, fev[i].upto = -1;
            ev_created++;
            *e = (CUevent)&fev[i];
            return 0;
        }
    return 2;
}
static CUresult fake_event_record(CUevent e, CUstream s)
{
    if (fs_is_dead((uintptr_t)s))
        return 400;
    int i = fs_get((uintptr_t)s);
    ((__typeof__(&fev[0]))e)->stream = (uintptr_t)s;
    ((__typeof__(&fev[0]))e)->upto = fs[i].queued;
    return 0;
}
static CUresult fake_event_sync(CUevent e)
{
    __typeof__(&fev[0]) ev = e;
    CHECK(ev->live);
    if (fake_sync_result != 0)
        return fake_sync_result;
    if (ev->upto >= 0) {
        int i = fs_get(ev->stream);
        if (fs[i].done < ev->upto)
            fs[i].done = ev->upto;
    }
    return 0;
}
static CUresult fake_event_destroy(CUevent e)
{
    __typeof__(&fev[0]) ev = e;
    CHECK(ev->live);
    ev->live = 0;
    ev_destroyed++;
    return 0;
}
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
    cu.event_create = fake_event_create;
    cu.event_record = fake_event_record;
    cu.event_sync = fake_event_sync;
    cu.event_destroy = fake_event_destroy;
    cu_status = TG_OK;
}

/* ---- A stand-in virtual memory management API ------------------------------------------------
 * Reserved ranges are real host memory, kept ASan-poisoned except where a granule is mapped and
 * cuMemSetAccess made it accessible, so a pool touching memory it unmapped is an ASan report.
 * Every misuse a real driver would refuse (or that would leak) is counted in fv.errors. */
#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#define POISON(a, n) __asan_poison_memory_region((void *)(a), (size_t)(n))
#define UNPOISON(a, n) __asan_unpoison_memory_region((void *)(a), (size_t)(n))
#else
#define POISON(a, n) ((void)(a), (void)(n))
#define UNPOISON(a, n) ((void)(a), (void)(n))
#endif

#define FV_MAX 4096
static struct {
    int64_t granule;
    int supported;                  /* CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
    int create_not_supported;       /* cuMemCreate answers CUDA_ERROR_NOT_SUPPORTED */
    int64_t create_budget;          /* granules cuMemCreate may still make before OUT_OF_MEMORY (< 0: any) */
    struct { uintptr_t va; int64_t size; } res[FV_MAX];
    int nres;
    struct { unsigned long long h; uintptr_t mapped_at; int live; } handles[FV_MAX];
    unsigned long long next_handle;
    int64_t creates, releases, reserves, frees, maps, unmaps, accesses, errors;
} fv;

static int fv_res_of(uintptr_t va, int64_t n)
{
    for (int i = 0; i < fv.nres; i++)
        if (fv.res[i].va <= va && va + (uintptr_t)n <= fv.res[i].va + (uintptr_t)fv.res[i].size)
            return i;
    return -1;
}

static int fv_handle(unsigned long long h)
{
    for (int i = 0; i < FV_MAX; i++)
        if (fv.handles[i].live && fv.handles[i].h == h)
            return i;
    return -1;
}

static int fv_mapped_at(uintptr_t va)
{
    for (int i = 0; i < FV_MAX; i++)
        if (fv.handles[i].live && fv.handles[i].mapped_at == va)
            return i;
    return -1;
}

/* 1 when [va, va + n) is wholly mapped (granule by granule). */
static int fv_mapped(uintptr_t va, int64_t n)
{
    for (int64_t off = 0; off < n; off += fv.granule)
        if (fv_mapped_at(va + (uintptr_t)off) < 0)
            return 0;
    return 1;
}

static CUresult fv_device_get(CUdevice *d, int ordinal) { *d = ordinal; return 0; }
static CUresult fv_attribute(int *v, int attr, CUdevice d) { (void)d; *v = attr == 102 ? fv.supported : 0; return 0; }
static CUresult fv_granularity(size_t *g, const cu_alloc_prop *prop, int opt)
{
    if (prop->type != 1 || prop->location.type != 1 || opt != 0)
        fv.errors++;
    *g = (size_t)fv.granule;
    return 0;
}
static CUresult fv_create(CUmemGenericAllocationHandle *h, size_t n, const cu_alloc_prop *prop, unsigned long long f)
{
    if (fv.create_not_supported)
        return 801;
    if (fv.create_budget == 0)
        return 2;
    if ((int64_t)n % fv.granule != 0 || prop->type != 1 || prop->location.type != 1 || f != 0)
        fv.errors++;
    for (int i = 0; i < FV_MAX; i++)
        if (!fv.handles[i].live) {
            fv.handles[i].h = *h = ++fv.next_handle;
            fv.handles[i].mapped_at = 0;
            fv.handles[i].live = 1;
            fv.creates++;
            if (fv.create_budget > 0)
                fv.create_budget--;
            return 0;
        }
    return 2;
}
static CUresult fv_release(CUmemGenericAllocationHandle h)
{
    int i = fv_handle(h);
    if (i < 0 || fv.handles[i].mapped_at != 0) {    /* unknown, or released while still mapped */
        fv.errors++;
        return 1;
    }
    fv.handles[i].live = 0;
    fv.releases++;
    return 0;
}
static CUresult fv_reserve(CUdeviceptr *va, size_t n, size_t align, CUdeviceptr addr, unsigned long long f)
{
    if (fv.nres == FV_MAX || n == 0 || (int64_t)n % fv.granule != 0 || addr != 0 || f != 0) {
        fv.errors++;
        return 1;
    }
    void *m = aligned_alloc(align ? align : (size_t)fv.granule, n);
    if (m == NULL)
        return 2;
    POISON(m, n);
    fv.res[fv.nres].va = (uintptr_t)m;
    fv.res[fv.nres++].size = (int64_t)n;
    *va = (CUdeviceptr)(uintptr_t)m;
    fv.reserves++;
    return 0;
}
static CUresult fv_address_free(CUdeviceptr va, size_t n)
{
    int i = fv_res_of((uintptr_t)va, (int64_t)n);
    if (i < 0 || fv.res[i].va != (uintptr_t)va || fv.res[i].size != (int64_t)n) {
        fv.errors++;
        return 1;
    }
    for (int64_t off = 0; off < (int64_t)n; off += fv.granule)
        if (fv_mapped_at((uintptr_t)va + (uintptr_t)off) >= 0)
            fv.errors++;                             /* freed with a granule still mapped */
    UNPOISON(va, n);
    free((void *)(uintptr_t)va);
    fv.res[i] = fv.res[--fv.nres];
    fv.frees++;
    return 0;
}
static CUresult fv_map(CUdeviceptr va, size_t n, size_t off, CUmemGenericAllocationHandle h, unsigned long long f)
{
    int i = fv_handle(h);
    if (i < 0 || fv.handles[i].mapped_at != 0 || (int64_t)n != fv.granule || off != 0 || f != 0 ||
        fv_res_of((uintptr_t)va, (int64_t)n) < 0 || fv_mapped_at((uintptr_t)va) >= 0) {
        fv.errors++;
        return 1;
    }
    fv.handles[i].mapped_at = (uintptr_t)va;
    fv.maps++;
    return 0;
}
static CUresult fv_unmap(CUdeviceptr va, size_t n)
{
    int i = fv_mapped_at((uintptr_t)va);
    if (i < 0 || (int64_t)n != fv.granule) {
        fv.errors++;
        return 1;
    }
    fv.handles[i].mapped_at = 0;
    POISON(va, n);
    fv.unmaps++;
    return 0;
}
static CUresult fv_set_access(CUdeviceptr va, size_t n, const cu_access_desc *d, size_t count)
{
    if (count != 1 || d->flags != 3 || d->location.type != 1 || !fv_mapped((uintptr_t)va, (int64_t)n)) {
        fv.errors++;
        return 1;
    }
    UNPOISON(va, n);
    fv.accesses++;
    return 0;
}

static void fake_vmm_load(void)
{
    vcu.device_get = fv_device_get;
    vcu.device_get_attribute = fv_attribute;
    vcu.get_granularity = fv_granularity;
    vcu.create = fv_create;
    vcu.release = fv_release;
    vcu.address_reserve = fv_reserve;
    vcu.address_free = fv_address_free;
    vcu.map = fv_map;
    vcu.unmap = fv_unmap;
    vcu.set_access = fv_set_access;
    vcu_status = TG_OK;
}

static void use_fake_driver(void)
{
    /* Before any driver-backend pool: cu_ready and tg_vmm_init then see the fakes. */
    pthread_once(&cu_once, fake_load);
    pthread_once(&vcu_once, fake_vmm_load);
    if (fv.granule == 0) {
        fv.granule = 2 * MB;
        fv.supported = 1;
        fv.create_budget = -1;
    }
}

/* Nothing held by the fake any more, every call matched, no misuse seen. */
static void check_fake_balanced(void)
{
    int live = 0;
    for (int i = 0; i < FV_MAX; i++)
        live += fv.handles[i].live;
    CHECK(fv.errors == 0 && fv.nres == 0 && live == 0);
    CHECK(fv.creates == fv.releases && fv.reserves == fv.frees && fv.maps == fv.unmaps);
}

static void destroy_and_check(tg_devpool *pool)
{
    int64_t n = -1;
    CHECK(tg_devpool_destroy(pool, &n, NULL, NULL) == TG_OK && n == 0);
    check_fake_balanced();
}

static tg_devpool *make_driver_pool(int64_t cap, int64_t lazy, int64_t vmm_min)
{
    use_fake_driver();
    tg_devpool_config c;
    memset(&c, 0, sizeof c);
    c.backend = TG_DEVPOOL_DRIVER;
    c.slab_block_bytes = MB;
    c.slab_blocks = 2;
    c.small_max = 256 << 10;
    c.lazy_bytes = lazy;
    c.cap_bytes = cap;
    c.release_threshold = -1;
    c.vmm_min_bytes = vmm_min;
    tg_devpool *p = NULL;
    CHECK(tg_devpool_create(&c, &p, NULL) == TG_OK && p != NULL);
    return p;
}

/* Random walk on level 3: buffers filled and checked (an unmapped or reused range is an ASan report
 * or a wrong byte), every live or pending level-3 buffer mapped, nothing leaked at close. */
static void test_vmm_walk(void)
{
    tg_devpool *pool = make_driver_pool(40 * MB, 6 * MB, 0);
    tg_devpool_stats s;
    tg_devpool_get_stats(pool, &s);
    CHECK(s.vmm_enabled == 1 && s.vmm_granule == 2 * MB && s.vmm_reason[0] == '\0');
    walk(pool, 0x5eed1234ull, 6000, 1, 0);
    tg_devpool_get_stats(pool, &s);
    CHECK(s.served_vmm > 100 && s.vmm_cache_hits > 0 && s.reserved <= s.cap && s.peak_reserved <= s.cap);
    CHECK(s.vmm_granules * 2 * MB <= s.reserved);
    CHECK(tg_devpool_flush(pool, NULL) == TG_OK);
    int64_t n = -1;
    CHECK(tg_devpool_destroy(pool, &n, NULL, NULL) == TG_OK && n == 0);
    check_fake_balanced();
}

/* The churn's end measured on an H200 (76 % utilization on the driver pool alone): N x 4 MB live,
 * every other one freed, then one request as large as what was freed. Served from the freed
 * granules: no granule created, peak reserved = peak in use. */
static void test_vmm_classic_case(void)
{
    enum { N = 64 };
    tg_devpool *pool = make_driver_pool(1024 * MB, 1024 * MB, 0);
    uintptr_t bufs[N];
    int level = 0;
    for (int i = 0; i < N; i++) {
        CHECK(tg_devpool_alloc(pool, 4 * MB, 0x10, &bufs[i], &level, NULL) == TG_OK && level == 3);
        memset((void *)bufs[i], i, (size_t)(4 * MB));
    }
    for (int i = 0; i < N; i += 2)
        CHECK(tg_devpool_free(pool, bufs[i], 0x10, NULL) == TG_OK);
    CHECK(tg_devpool_flush(pool, NULL) == TG_OK);
    tg_devpool_stats s;
    tg_devpool_get_stats(pool, &s);
    int64_t created = s.vmm_granules_created;
    CHECK(created == 2 * N && s.vmm_ranges_cached == N / 2 && s.in_use == N / 2 * 4 * MB);
    uintptr_t big = 0;
    CHECK(tg_devpool_alloc(pool, N / 2 * 4 * MB, 0x10, &big, &level, NULL) == TG_OK && level == 3);
    memset((void *)big, 0xAB, (size_t)(N / 2 * 4 * MB));
    for (int i = 1; i < N; i += 2)                  /* the survivors are untouched */
        CHECK(((unsigned char *)bufs[i])[0] == i && ((unsigned char *)bufs[i])[4 * MB - 1] == i);
    tg_devpool_get_stats(pool, &s);
    CHECK(s.vmm_granules_created == created);
    CHECK(s.vmm_ranges_cached == 0 && s.vmm_granules_free == 0);
    CHECK(s.peak_reserved == N * 4 * MB && s.peak_in_use == N * 4 * MB);
    CHECK((double)s.peak_in_use / (double)s.peak_reserved >= 0.85);
    /* A freed range comes back from the cache with no driver call. */
    CHECK(tg_devpool_free(pool, bufs[1], 0x10, NULL) == TG_OK);
    CHECK(tg_devpool_flush(pool, NULL) == TG_OK);
    tg_devpool_get_stats(pool, &s);
    int64_t calls = s.vmm_driver_calls, hits = s.vmm_cache_hits;
    uintptr_t again = 0;
    CHECK(tg_devpool_alloc(pool, 4 * MB - 100, 0x10, &again, &level, NULL) == TG_OK && again == bufs[1]);
    tg_devpool_get_stats(pool, &s);
    CHECK(s.vmm_driver_calls == calls && s.vmm_cache_hits == hits + 1);
    /* Double and foreign frees of level-3 blocks. */
    CHECK(tg_devpool_free(pool, big, 0x10, NULL) == TG_OK);
    CHECK(tg_devpool_free(pool, big, 0x10, NULL) == TG_EDATA);
    CHECK(tg_devpool_free(pool, again + 512, 0x10, NULL) == TG_EINVAL);
    CHECK(tg_devpool_flush(pool, NULL) == TG_OK);
    CHECK(tg_devpool_free(pool, big, 0x10, NULL) == TG_EINVAL);   /* cached now, not live */
    int64_t n = -1, bytes = -1;
    CHECK(tg_devpool_destroy(pool, &n, &bytes, NULL) == TG_OK && n == N / 2 && bytes == N / 2 * 4 * MB);
    check_fake_balanced();
}

/* New granules only within the cap; a trim gives cached ranges and free granules back. */
static void test_vmm_cap_and_trim(void)
{
    tg_devpool *pool = make_driver_pool(12 * MB, 64 * MB, 0);
    uintptr_t a = 0, b = 0, c = 0;
    int level = 0;
    CHECK(tg_devpool_alloc(pool, 10 * MB, 0, &a, &level, NULL) == TG_OK && level == 3);
    CHECK(tg_devpool_alloc(pool, 8 * MB, 0, &b, &level, NULL) == TG_ERANGE);
    CHECK(tg_devpool_free(pool, a, 0, NULL) == TG_OK);
    /* The pending range comes back through the flush the request makes, and its granules serve it. */
    CHECK(tg_devpool_alloc(pool, 8 * MB, 0, &b, &level, NULL) == TG_OK && level == 3);
    tg_devpool_stats s;
    tg_devpool_get_stats(pool, &s);
    CHECK(s.vmm_granules_created == 5 && s.vmm_granules == 5 && s.vmm_granules_free == 1);
    CHECK(s.peak_reserved == 10 * MB && s.reserved == 10 * MB && s.flushes == 1);
    CHECK(tg_devpool_free(pool, b, 0, NULL) == TG_OK && tg_devpool_flush(pool, NULL) == TG_OK);
    destroy_and_check(pool);

    /* A small request that needs room under the cap: the trim releases the cached range and the
       free granules, then a level-1 block fits. */
    pool = make_driver_pool(10 * MB + 512 * 1024, 64 * MB, 0);
    CHECK(tg_devpool_alloc(pool, 10 * MB, 0, &a, &level, NULL) == TG_OK && level == 3);
    CHECK(tg_devpool_free(pool, a, 0, NULL) == TG_OK && tg_devpool_flush(pool, NULL) == TG_OK);
    CHECK(tg_devpool_alloc(pool, 100 << 10, 0, &c, &level, NULL) == TG_OK && level == 1);
    tg_devpool_get_stats(pool, &s);
    CHECK(s.vmm_granules == 0 && s.vmm_ranges_cached == 0 && s.reserved == MB);
    /* Out of device memory in cuMemCreate: TG_ENOMEM, and nothing leaked. */
    fv.create_budget = 1;
    CHECK(tg_devpool_alloc(pool, 4 * MB, 0, &b, &level, NULL) == TG_ENOMEM);
    fv.create_budget = -1;
    CHECK(tg_devpool_free(pool, c, 0, NULL) == TG_OK);
    destroy_and_check(pool);
}

/* Where the device or the driver cannot do VMM, large requests take level 2 and the stats say why. */
static void test_vmm_fallbacks(void)
{
    tg_devpool_stats s;
    uintptr_t a = 0;
    int level = 0;
    fv.supported = 0;
    tg_devpool *pool = make_driver_pool(64 * MB, 0, 0);
    tg_devpool_get_stats(pool, &s);
    CHECK(s.vmm_enabled == 0 && strstr(s.vmm_reason, "does not support") != NULL);
    CHECK(tg_devpool_alloc(pool, 4 * MB, 0, &a, &level, NULL) == TG_OK && level == 2);
    CHECK(tg_devpool_rounded(pool, 4 * MB + 1) == 4 * MB + 512);
    CHECK(tg_devpool_free(pool, a, 0, NULL) == TG_OK);
    CHECK(tg_devpool_destroy(pool, NULL, NULL, NULL) == TG_OK);
    fv.supported = 1;

    fv.create_not_supported = 1;                     /* the attribute says yes, cuMemCreate says no */
    pool = make_driver_pool(64 * MB, 0, 0);
    int cu_result = -1;
    CHECK(tg_devpool_alloc(pool, 4 * MB, 0, &a, &level, &cu_result) == TG_OK && level == 2 && cu_result == 0);
    tg_devpool_get_stats(pool, &s);
    CHECK(s.vmm_enabled == 0 && strstr(s.vmm_reason, "CUDA_ERROR_NOT_SUPPORTED") != NULL);
    CHECK(tg_devpool_free(pool, a, 0, NULL) == TG_OK);
    CHECK(tg_devpool_destroy(pool, NULL, NULL, NULL) == TG_OK);
    fv.create_not_supported = 0;

    vcu_status = TG_ENODRIVER;                       /* a driver without the VMM symbols */
    pool = make_driver_pool(64 * MB, 0, 0);
    tg_devpool_get_stats(pool, &s);
    CHECK(s.vmm_enabled == 0 && strstr(s.vmm_reason, "lacks") != NULL);
    CHECK(tg_devpool_destroy(pool, NULL, NULL, NULL) == TG_OK);
    vcu_status = TG_OK;

    pool = make_driver_pool(64 * MB, 0, -1);         /* turned off */
    tg_devpool_get_stats(pool, &s);
    CHECK(s.vmm_enabled == 0 && strstr(s.vmm_reason, "off") != NULL);
    CHECK(tg_devpool_destroy(pool, NULL, NULL, NULL) == TG_OK);
    check_fake_balanced();
}

/* A flush whose stream wait fails must not hand level-1 memory out again: the queued work that
 * last used it may still be running (or faulted mid-write). The free stays pending. */
static void test_failed_wait_keeps_chunks_pending(void)
{
    use_fake_driver();
    tg_devpool_config c;
    memset(&c, 0, sizeof c);
    c.backend = TG_DEVPOOL_DRIVER;
    c.slab_block_bytes = MB;
    c.slab_blocks = 1;
    c.small_max = 64 << 10;
    c.lazy_bytes = 64 * MB;
    c.cap_bytes = 64 * MB;
    c.release_threshold = -1;
    c.vmm_min_bytes = -1;                            /* the 3 MB buffer at level 2 (level 3: below) */
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
    CHECK(tg_devpool_lookup(pool, b, NULL, NULL, &state) == TG_OK && state == 2);   /* level 2 too */
    tg_devpool_stats s;
    tg_devpool_get_stats(pool, &s);
    CHECK(s.pending_bytes == 1024 + 3 * MB && s.in_use == 0);
    CHECK(tg_devpool_free(pool, a, 0x10, NULL) == TG_EDATA);   /* and still a double free */
    fake_sync_result = 0;                            /* the wait succeeds: now it is returned */
    CHECK(tg_devpool_flush(pool, &cu_result) == TG_OK);
    CHECK(tg_devpool_lookup(pool, a, NULL, NULL, NULL) == TG_EINVAL);
    CHECK(tg_devpool_lookup(pool, b, NULL, NULL, NULL) == TG_EINVAL);
    tg_devpool_get_stats(pool, &s);
    CHECK(s.pending_bytes == 0);
    int64_t n = -1;
    CHECK(tg_devpool_destroy(pool, &n, NULL, NULL) == TG_OK && n == 0);
}

/* Level 3 under a failing wait: the range stays pending, then is cached once the wait succeeds. */
static void test_vmm_failed_wait(void)
{
    tg_devpool *pool = make_driver_pool(64 * MB, 64 * MB, 0);
    uintptr_t a = 0;
    int level = 0, state = 0, cu_result = 0;
    CHECK(tg_devpool_alloc(pool, 3 * MB, 0x10, &a, &level, NULL) == TG_OK && level == 3);
    CHECK(tg_devpool_free(pool, a, 0x10, NULL) == TG_OK);
    fake_sync_result = 700;
    CHECK(tg_devpool_flush(pool, &cu_result) == TG_ECUDA && cu_result == 700);
    CHECK(tg_devpool_lookup(pool, a, NULL, NULL, &state) == TG_OK && state == 2);
    CHECK(fv_mapped(a, 4 * MB));
    fake_sync_result = 0;
    CHECK(tg_devpool_flush(pool, NULL) == TG_OK);
    tg_devpool_stats s;
    tg_devpool_get_stats(pool, &s);
    CHECK(s.vmm_ranges_cached == 1 && s.pending_bytes == 0);
    CHECK(tg_devpool_destroy(pool, NULL, NULL, NULL) == TG_OK);
    check_fake_balanced();
}

/* Frees on a stream, the stream destroyed, then the flush: no error, no call on the dead handle, the
 * work queued before the frees waited for (through the event), every level reused, nothing leaked;
 * then the handle reused by a new stream, and a warm pool creating no event. */
static void test_stream_destroyed_before_flush(void)
{
    tg_devpool *pool = make_driver_pool(64 * MB, 64 * MB, 0);
    const uintptr_t s = 0x7000;
    int64_t sizes[3] = {1000, 300 << 10, 3 * MB};    /* levels 1, 2, 3 */
    uintptr_t bufs[3], again[3];
    int level = 0, cu_result = -1;
    for (int k = 0; k < 3; k++) {
        CHECK(tg_devpool_alloc(pool, sizes[k], s, &bufs[k], &level, NULL) == TG_OK && level == k + 1);
        memset((void *)bufs[k], 0x5A, (size_t)sizes[k]);
    }
    fs_enqueue(s);
    for (int k = 0; k < 3; k++)
        CHECK(tg_devpool_free(pool, bufs[k], s, NULL) == TG_OK);
    fs_destroy(s);
    long long misuse = fs_misuse;
    CHECK(tg_devpool_flush(pool, &cu_result) == TG_OK && cu_result == 0);
    CHECK(fs_misuse == misuse && fs_outstanding(s) == 0);
    tg_devpool_stats st;
    tg_devpool_get_stats(pool, &st);
    CHECK(st.pending_bytes == 0 && st.in_use == 0 && st.events_created == 1 && st.pending_any == 0);
    fs_revive(s);                                   /* a new stream with the old handle's value */
    for (int k = 0; k < 3; k++)
        CHECK(tg_devpool_alloc(pool, sizes[k], s, &again[k], &level, NULL) == TG_OK && level == k + 1);
    CHECK(again[0] == bufs[0] && again[2] == bufs[2]);
    for (int k = 0; k < 3; k++)
        CHECK(tg_devpool_free(pool, again[k], s, NULL) == TG_OK);
    CHECK(tg_devpool_flush(pool, NULL) == TG_OK);
    tg_devpool_get_stats(pool, &st);
    CHECK(st.events_created == 1);                 /* from the free list */
    destroy_and_check(pool);
    CHECK(ev_created == ev_destroyed);
}

/* TG_DEVPOOL_ANY_STREAM: the flush waits for the whole context; held off, it keeps those pending. */
static void test_any_stream(void)
{
    tg_devpool *pool = make_driver_pool(64 * MB, 64 * MB, 0);
    uintptr_t a = 0, b = 0, c = 0;
    int state = 0;
    CHECK(tg_devpool_alloc(pool, 1000, 0, &a, NULL, NULL) == TG_OK);
    fs_enqueue(0x7100);
    fs_enqueue(0x7200);
    CHECK(tg_devpool_free(pool, a, (uintptr_t)TG_DEVPOOL_ANY_STREAM, NULL) == TG_OK);
    long long syncs = ctx_syncs;
    CHECK(tg_devpool_flush(pool, NULL) == TG_OK && ctx_syncs == syncs + 1);
    CHECK(fs_outstanding(0x7100) == 0 && fs_outstanding(0x7200) == 0);
    CHECK(tg_devpool_lookup(pool, a, NULL, NULL, NULL) == TG_EINVAL);
    CHECK(tg_devpool_hold_context_waits(pool, 1) == 1);
    CHECK(tg_devpool_alloc(pool, 1000, 0, &b, NULL, NULL) == TG_OK);
    CHECK(tg_devpool_alloc(pool, 1000, 0x7100, &c, NULL, NULL) == TG_OK);
    CHECK(tg_devpool_free(pool, b, (uintptr_t)TG_DEVPOOL_ANY_STREAM, NULL) == TG_OK);
    CHECK(tg_devpool_free(pool, c, 0x7100, NULL) == TG_OK);
    CHECK(tg_devpool_flush(pool, NULL) == TG_OK && ctx_syncs == syncs + 1);
    CHECK(tg_devpool_lookup(pool, b, NULL, NULL, &state) == TG_OK && state == 2);
    CHECK(tg_devpool_lookup(pool, c, NULL, NULL, NULL) == TG_EINVAL);
    CHECK(tg_devpool_hold_context_waits(pool, 0) == 0);
    CHECK(tg_devpool_flush(pool, NULL) == TG_OK && ctx_syncs == syncs + 2);
    CHECK(tg_devpool_lookup(pool, b, NULL, NULL, NULL) == TG_EINVAL);
    /* A 17th distinct stream in one batch: its free waits for the context too. */
    uintptr_t many[17];
    for (int k = 0; k < 17; k++)
        CHECK(tg_devpool_alloc(pool, 600, 0x8000 + 0x100 * (uintptr_t)k, &many[k], NULL, NULL) == TG_OK);
    for (int k = 0; k < 17; k++)
        CHECK(tg_devpool_free(pool, many[k], 0x8000 + 0x100 * (uintptr_t)k, NULL) == TG_OK);
    tg_devpool_stats st;
    tg_devpool_get_stats(pool, &st);
    CHECK(st.pending_any == 1 && st.events_created == 16);
    CHECK(tg_devpool_flush(pool, NULL) == TG_OK && ctx_syncs == syncs + 3);
    destroy_and_check(pool);
    CHECK(ev_created == ev_destroyed);
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
static void test_threads(tg_devpool *pool, intptr_t torch_bytes)
{
    pthread_t t[4];
    thread_arg args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg){pool, 0x1234567ull * (uint64_t)(i + 1), (unsigned char)(64 * i)};
        CHECK(pthread_create(&t[i], NULL, thread_main, &args[i]) == 0);
    }
    CHECK(tg_devpool_set_default(pool) == NULL);
    int served = 0;
    for (int k = 0; k < 2000; k++) {
        void *m = tg_torch_alloc(torch_bytes + k, 0, NULL);
        if (m == NULL)
            continue;               /* the cap, with the other threads' buffers live */
        served++;
        memset(m, 0xEE, (size_t)torch_bytes);
        tg_torch_free(m, torch_bytes + k, 0, NULL);
    }
    CHECK(served > 0);              /* how many fit beside the threads' buffers depends on timing */
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
    test_threads(make_pool(MB), 4096);
    test_vmm_walk();
    test_vmm_classic_case();
    test_vmm_cap_and_trim();
    test_vmm_failed_wait();
    test_stream_destroyed_before_flush();
    test_any_stream();
    test_vmm_fallbacks();
    test_threads(make_driver_pool(256 * MB, 4 * MB, 0), 3 * MB);   /* level 3 through PyTorch's entry */
    check_fake_balanced();
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("devpool: all checks passed\n");
    return 0;
}
