/*
 * fake_libcuda.c -- just enough of libcuda.so.1 for tickgpu's C hot path (csrc/hot/hot.c) to run
 * on a machine without a GPU, so that its round trip and pipeline are tested for real.
 *
 * A "graph exec" handle is the address of a fake_graph the test builds: a list of copies that a
 * launch performs at once (standing in for H2D copy -> kernel -> D2H copy), and an optional
 * failure. Streams are opaque numbers. Every launch and synchronisation is logged, so a test can
 * check the order of events (a runner's staging reused only after its stream was waited for).
 *
 * It also stands in for the calls the device pool (csrc/mem/devpool.c, vmm.c) makes: memory and
 * the stream-ordered pool on host memory, and the virtual memory management API. A reserved
 * virtual range is a PROT_NONE mapping; cuMemSetAccess makes its mapped granules readable and
 * writable, cuMemUnmap takes that away again, so touching a range the pool unmapped faults. Every
 * misuse a driver would refuse (a release of a mapped granule, a free of a range still mapped, a
 * double map) is counted, and the counters let a test assert every reserve/create/map is matched.
 *
 * Streams and events, for the pool's lazy frees: a test queues "work" on a stream
 * (fake_stream_enqueue); a stream sync completes it, an event recorded on a stream completes, when
 * waited on, the work queued before the record, and a context sync completes all. A stream made by
 * cuStreamCreate and then destroyed refuses cuStreamSynchronize, cuEventRecord and cuMemFreeAsync
 * (CUDA_ERROR_INVALID_HANDLE), as the driver may; numbers never created (the hot path's tests) and
 * the special streams 0, 1, 2 always work. Events never created here are accepted and do nothing.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} fake_copy;

typedef struct {
    int n_copies;
    fake_copy copies[8];
    int fail_at;          /* launch number (1-based) that fails with CUDA_ERROR_LAUNCH_FAILED; 0 never */
    int launches;
} fake_graph;

#define LOG_MAX 4096
static int log_kind[LOG_MAX];            /* 1 launch, 2 stream sync */
static uintptr_t log_stream[LOG_MAX];
static int log_n = 0;

static void record(int kind, uintptr_t stream)
{
    if (log_n < LOG_MAX) {
        log_kind[log_n] = kind;
        log_stream[log_n] = stream;
        log_n++;
    }
}

int fake_log(int *kinds, uintptr_t *streams, int max)
{
    int n = log_n < max ? log_n : max;
    for (int i = 0; i < n; i++) {
        kinds[i] = log_kind[i];
        streams[i] = log_stream[i];
    }
    return log_n;
}

void fake_log_clear(void) { log_n = 0; }

int cuGraphLaunch(void *exec, void *stream)
{
    fake_graph *g = (fake_graph *)exec;
    g->launches++;
    if (g->fail_at && g->launches == g->fail_at)
        return 719;   /* CUDA_ERROR_LAUNCH_FAILED */
    record(1, (uintptr_t)stream);
    for (int i = 0; i < g->n_copies; i++)
        memmove(g->copies[i].dst, g->copies[i].src, g->copies[i].bytes);
    return 0;
}

#define FS_MAX 256
static struct { uintptr_t h; long long queued, done; int dead; } fs[FS_MAX];
static int fs_n = 0;
static uintptr_t fs_next = 0x5000;
static long long fs_misuse = 0;          /* calls on a destroyed stream */

static int fs_find(uintptr_t h)
{
    for (int i = 0; i < fs_n; i++)
        if (fs[i].h == h)
            return i;
    return -1;
}

static int fs_get(uintptr_t h)          /* streams never created are tracked on first use */
{
    int i = fs_find(h);
    if (i < 0 && fs_n < FS_MAX) {
        fs[fs_n].h = h, fs[fs_n].queued = fs[fs_n].done = 0, fs[fs_n].dead = 0;
        i = fs_n++;
    }
    return i;
}

static int fs_dead(uintptr_t h)
{
    int i = fs_find(h);
    if (i >= 0 && fs[i].dead) {
        fs_misuse++;
        return 1;
    }
    return 0;
}

/* A destroyed handle whose work is done may come back for a new stream, as a driver may reuse it. */
int cuStreamCreate(void **out, unsigned flags)
{
    (void)flags;
    for (int i = 0; i < fs_n; i++)
        if (fs[i].dead && fs[i].queued == fs[i].done) {   /* a handle comes back once its work is done */
            fs[i].dead = 0;
            *out = (void *)fs[i].h;
            return 0;
        }
    uintptr_t h = fs_next;
    fs_next += 0x100;
    int i = fs_get(h);
    if (i < 0)
        return 2;
    *out = (void *)h;
    return 0;
}

int cuStreamDestroy_v2(void *stream)
{
    int i = fs_find((uintptr_t)stream);
    if (i < 0 || fs[i].dead)
        return 400;
    fs[i].dead = 1;                      /* queued work still completes, as on a real device */
    return 0;
}

void fake_stream_enqueue(uintptr_t stream)
{
    int i = fs_get(stream);
    if (i >= 0)
        fs[i].queued++;
}

/* Work queued on `stream` and not yet known complete (waited for by some sync). */
long long fake_stream_outstanding(uintptr_t stream)
{
    int i = fs_find(stream);
    return i < 0 ? 0 : fs[i].queued - fs[i].done;
}

long long fake_stream_misuse(void) { return fs_misuse; }

int cuStreamSynchronize(void *stream)
{
    record(2, (uintptr_t)stream);
    if (fs_dead((uintptr_t)stream))
        return 400;                      /* CUDA_ERROR_INVALID_HANDLE */
    int i = fs_get((uintptr_t)stream);
    if (i >= 0)
        fs[i].done = fs[i].queued;
    return 0;
}

/* The last cuLaunchKernel's arguments (fake_last_launch), and the first parameter's value as an
   int32 read through params, as a kernel would see it. A function handle of 0xbad fails the launch
   with CUDA_ERROR_INVALID_VALUE (1). */
static uintptr_t last_launch[9];
static int last_param0;
static uintptr_t ctx_current = 0;     /* cuCtxSetCurrent's, below */
static uintptr_t last_launch_ctx;     /* the context current when the last launch was made */

int fake_last_launch(uintptr_t *out9, int *param0)
{
    memcpy(out9, last_launch, sizeof last_launch);
    *param0 = last_param0;
    return 0;
}

uintptr_t fake_last_launch_ctx(void) { return last_launch_ctx; }

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **params, void **extra)
{
    const uintptr_t a[9] = {(uintptr_t)f, gx, gy, gz, bx, by, bz, shared, (uintptr_t)stream};
    memcpy(last_launch, a, sizeof a);
    last_launch_ctx = ctx_current;
    last_param0 = params != NULL && params[0] != NULL ? *(const int *)params[0] : -1;
    return (uintptr_t)f == 0xbad ? 1 : 0;
}

int cuMemcpyHtoDAsync_v2(unsigned long long dst, const void *src, size_t bytes, void *stream)
{
    memmove((void *)(uintptr_t)dst, src, bytes);
    return 0;
}

int cuMemcpyDtoHAsync_v2(void *dst, unsigned long long src, size_t bytes, void *stream)
{
    memmove(dst, (const void *)(uintptr_t)src, bytes);
    return 0;
}

#define FE_MAX 256
static struct { int live, recorded; uintptr_t stream; long long upto; } fe[FE_MAX];
static long long fe_created = 0, fe_destroyed = 0, fe_records = 0, fe_syncs = 0;
#define FE_BASE ((uintptr_t)0xE7000)

static int fe_index(void *event)
{
    uintptr_t v = (uintptr_t)event;
    if (v < FE_BASE || v >= FE_BASE + FE_MAX)
        return -1;
    int i = (int)(v - FE_BASE);
    return fe[i].live ? i : -1;
}

int cuEventCreate(void **event, unsigned flags)
{
    (void)flags;
    for (int i = 0; i < FE_MAX; i++)
        if (!fe[i].live) {
            fe[i].live = 1, fe[i].recorded = 0;
            fe_created++;
            *event = (void *)(FE_BASE + (uintptr_t)i);
            return 0;
        }
    return 2;
}

int cuEventDestroy_v2(void *event)
{
    int i = fe_index(event);
    if (i < 0)
        return 400;
    fe[i].live = 0;
    fe_destroyed++;
    return 0;
}

int cuEventRecord(void *event, void *stream)
{
    if (fs_dead((uintptr_t)stream))
        return 400;
    int i = fe_index(event);
    if (i < 0)
        return 0;                        /* a number the hot path's tests made up */
    int s = fs_get((uintptr_t)stream);
    fe[i].recorded = 1, fe[i].stream = (uintptr_t)stream, fe[i].upto = s >= 0 ? fs[s].queued : 0;
    fe_records++;
    return 0;
}

/* Completes the work queued on the event's stream before the record, destroyed or not. */
int cuEventSynchronize(void *event)
{
    int i = fe_index(event);
    if (i < 0)
        return 0;
    fe_syncs++;
    if (fe[i].recorded) {
        int s = fs_find(fe[i].stream);
        if (s >= 0 && fs[s].done < fe[i].upto)
            fs[s].done = fe[i].upto;
    }
    return 0;
}

/* out: events created, destroyed, records, syncs. */
void fake_event_counts(long long *out)
{
    out[0] = fe_created, out[1] = fe_destroyed, out[2] = fe_records, out[3] = fe_syncs;
}
/* The context last made current, and how many times one was (fake_ctx_current); the handle 0xbad
 * is refused with CUDA_ERROR_INVALID_CONTEXT (201). */
static int ctx_sets = 0;
int cuCtxSetCurrent(void *ctx)
{
    if ((uintptr_t)ctx == 0xbad)
        return 201;
    ctx_current = (uintptr_t)ctx;
    ctx_sets++;
    return 0;
}
uintptr_t fake_ctx_current(int *sets)
{
    *sets = ctx_sets;
    return ctx_current;
}

int cuGetErrorName(int code, const char **name)
{
    *name = code == 719 ? "CUDA_ERROR_LAUNCH_FAILED" : "CUDA_ERROR_UNKNOWN";
    return 0;
}

/* ---- Memory and the stream-ordered pool, on host memory --------------------------------------- */
static size_t fake_total = (size_t)8 << 30;
static long long pool_reserved = 0;      /* bytes live in the stream-ordered pool */

void fake_set_total(size_t total) { fake_total = total; }

static size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

int cuMemAlloc_v2(unsigned long long *d, size_t n)
{
    *d = (unsigned long long)(uintptr_t)aligned_alloc(65536, round_up(n, 65536));
    return *d ? 0 : 2;
}
int cuMemFree_v2(unsigned long long d) { free((void *)(uintptr_t)d); return 0; }
int cuMemGetInfo_v2(size_t *f, size_t *t) { *f = *t = fake_total; return 0; }
int cuMemPoolCreate(void **pool, const void *props) { *pool = (void *)0x9001; return 0; }
int cuMemPoolSetAttribute(void *pool, int attr, void *value) { return 0; }
int cuMemPoolGetAttribute(void *pool, int attr, void *value)
{
    /* Packed, growing in 2 MB steps: what the device pool's cap check assumes of the driver. */
    *(unsigned long long *)value = attr == 5 ? round_up((size_t)pool_reserved, (size_t)2 << 20) : 0;
    return 0;
}
int cuMemPoolTrimTo(void *pool, size_t keep) { return 0; }
int cuMemPoolDestroy(void *pool) { return 0; }

/* The pool's allocations carry their size in front, so a free knows what to take off "reserved". */
int cuMemAllocFromPoolAsync(unsigned long long *d, size_t n, void *pool, void *stream)
{
    size_t grown = round_up(n ? n : 1, 512);
    char *m = aligned_alloc(512, round_up(n + 512, 512));
    if (m == NULL)
        return 2;
    *(size_t *)m = grown;
    pool_reserved += (long long)grown;
    *d = (unsigned long long)(uintptr_t)(m + 512);
    return 0;
}
int cuMemFreeAsync(unsigned long long d, void *stream)
{
    if (fs_dead((uintptr_t)stream))
        return 400;
    char *m = (char *)(uintptr_t)d - 512;
    pool_reserved -= (long long)*(size_t *)m;
    free(m);
    return 0;
}
static long long ctx_syncs = 0;
int cuCtxSynchronize(void)
{
    ctx_syncs++;
    for (int i = 0; i < fs_n; i++)
        fs[i].done = fs[i].queued;
    return 0;
}
long long fake_ctx_syncs(void) { return ctx_syncs; }

/* ---- Virtual memory management ------------------------------------------------------------------ */
#define FV_HANDLES 8192
#define FV_RANGES 4096
static size_t fv_granule = (size_t)2 << 20;
static int fv_supported = 1, fv_create_not_supported = 0;
static struct { uintptr_t mapped_at; int live, accessible; } fv_h[FV_HANDLES + 1];   /* handle = index */
static struct { uintptr_t va; size_t size; void *base; size_t base_size; } fv_r[FV_RANGES];
static int fv_nr = 0;
static long long fv_count[8];   /* creates, releases, reserves, frees, maps, unmaps, set_access, errors */
enum { C_CREATE, C_RELEASE, C_RESERVE, C_FREE, C_MAP, C_UNMAP, C_ACCESS, C_ERROR };

void fake_vmm_configure(long long granule, int supported, int create_not_supported)
{
    fv_granule = (size_t)granule;
    fv_supported = supported;
    fv_create_not_supported = create_not_supported;
}

/* out[0..7]: the counters above; out[8] granules alive; out[9] ranges reserved; out[10] granules mapped. */
void fake_vmm_counts(long long *out)
{
    memcpy(out, fv_count, sizeof fv_count);
    out[8] = out[10] = 0;
    for (int i = 1; i <= FV_HANDLES; i++) {
        out[8] += fv_h[i].live;
        out[10] += fv_h[i].live && fv_h[i].mapped_at != 0;
    }
    out[9] = fv_nr;
}

static int fv_at(uintptr_t va)
{
    for (int i = 1; i <= FV_HANDLES; i++)
        if (fv_h[i].live && fv_h[i].mapped_at == va)
            return i;
    return 0;
}

static int fv_range(uintptr_t va, size_t n)
{
    for (int i = 0; i < fv_nr; i++)
        if (fv_r[i].va <= va && va + n <= fv_r[i].va + fv_r[i].size)
            return i;
    return -1;
}

/* 1 when [va, va + n) lies in granules that are mapped and accessible (the mock's check_range). */
int fake_vmm_accessible(uintptr_t va, long long n)
{
    uintptr_t start = va / fv_granule * fv_granule;
    for (uintptr_t g = start; g < va + (uintptr_t)n; g += fv_granule) {
        int h = fv_at(g);
        if (h == 0 || !fv_h[h].accessible)
            return 0;
    }
    return 1;
}

int cuDeviceGet(int *dev, int ordinal) { *dev = ordinal; return 0; }
int cuDeviceGetAttribute(int *value, int attr, int dev) { *value = attr == 102 ? fv_supported : 0; return 0; }
int cuMemGetAllocationGranularity(size_t *g, const void *prop, int option)
{
    if (!fv_supported)
        return 801;
    *g = fv_granule;
    return 0;
}
int cuMemCreate(unsigned long long *handle, size_t n, const void *prop, unsigned long long flags)
{
    if (fv_create_not_supported)
        return 801;
    if (n % fv_granule != 0) {
        fv_count[C_ERROR]++;
        return 1;
    }
    for (int i = 1; i <= FV_HANDLES; i++)
        if (!fv_h[i].live) {
            fv_h[i].live = 1;
            fv_h[i].mapped_at = 0;
            fv_h[i].accessible = 0;
            *handle = (unsigned long long)i;
            fv_count[C_CREATE]++;
            return 0;
        }
    return 2;
}
int cuMemRelease(unsigned long long h)
{
    if (h == 0 || h > FV_HANDLES || !fv_h[h].live || fv_h[h].mapped_at != 0) {
        fv_count[C_ERROR]++;
        return 1;
    }
    fv_h[h].live = 0;
    fv_count[C_RELEASE]++;
    return 0;
}
int cuMemAddressReserve(unsigned long long *va, size_t n, size_t align, unsigned long long addr,
                        unsigned long long flags)
{
    if (fv_nr == FV_RANGES || n == 0 || n % fv_granule != 0 || addr != 0 || flags != 0) {
        fv_count[C_ERROR]++;
        return 1;
    }
    size_t a = align ? align : fv_granule, total = n + a;
    void *base = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED)
        return 2;
    uintptr_t v = round_up((uintptr_t)base, a);
    fv_r[fv_nr].va = v, fv_r[fv_nr].size = n, fv_r[fv_nr].base = base, fv_r[fv_nr].base_size = total;
    fv_nr++;
    *va = v;
    fv_count[C_RESERVE]++;
    return 0;
}
int cuMemAddressFree(unsigned long long va, size_t n)
{
    int i = fv_range((uintptr_t)va, n);
    if (i < 0 || fv_r[i].va != va || fv_r[i].size != n) {
        fv_count[C_ERROR]++;
        return 1;
    }
    for (size_t off = 0; off < n; off += fv_granule)
        if (fv_at((uintptr_t)va + off))
            fv_count[C_ERROR]++;             /* freed while a granule is still mapped */
    munmap(fv_r[i].base, fv_r[i].base_size);
    fv_r[i] = fv_r[--fv_nr];
    fv_count[C_FREE]++;
    return 0;
}
int cuMemMap(unsigned long long va, size_t n, size_t offset, unsigned long long h, unsigned long long flags)
{
    if (h == 0 || h > FV_HANDLES || !fv_h[h].live || fv_h[h].mapped_at != 0 || n != fv_granule || offset != 0 ||
        flags != 0 || fv_range((uintptr_t)va, n) < 0 || fv_at((uintptr_t)va)) {
        fv_count[C_ERROR]++;
        return 1;
    }
    fv_h[h].mapped_at = (uintptr_t)va;
    fv_count[C_MAP]++;
    return 0;
}
int cuMemUnmap(unsigned long long va, size_t n)
{
    int h = fv_at((uintptr_t)va);
    if (h == 0 || n != fv_granule) {
        fv_count[C_ERROR]++;
        return 1;
    }
    fv_h[h].mapped_at = 0;
    fv_h[h].accessible = 0;
    mprotect((void *)(uintptr_t)va, n, PROT_NONE);
    madvise((void *)(uintptr_t)va, n, MADV_DONTNEED);
    fv_count[C_UNMAP]++;
    return 0;
}
int cuMemSetAccess(unsigned long long va, size_t n, const void *desc, size_t count)
{
    const int *d = desc;        /* CUmemAccessDesc: location {type, id}, flags */
    if (count != 1 || d[0] != 1 || d[2] != 3) {
        fv_count[C_ERROR]++;
        return 1;
    }
    for (size_t off = 0; off < n; off += fv_granule)
        if (!fv_at((uintptr_t)va + off)) {
            fv_count[C_ERROR]++;
            return 1;
        }
    for (size_t off = 0; off < n; off += fv_granule)
        fv_h[fv_at((uintptr_t)va + off)].accessible = 1;
    mprotect((void *)(uintptr_t)va, n, PROT_READ | PROT_WRITE);
    fv_count[C_ACCESS]++;
    return 0;
}
