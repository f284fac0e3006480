/*
 * devpool.c -- tickgpu's device memory pool (three levels) (declarations: tickgpu.h, "Device pool").
 *
 * Why a pool: cuMemAlloc costs tens of microseconds and synchronizes the device, and the driver's
 * stream-ordered pool, though cheaper, still costs a driver call per buffer. Trading code makes many
 * small short-lived buffers; level 1 serves those from size-class slabs in a few large blocks held
 * for the life of the pool, with no driver call at all. Level 2 (everything larger) uses the driver's
 * stream-ordered pool with its release threshold raised, so freed memory stays cached there too.
 *
 * Level 3 (vmm.c): requests of at least vmm_min_bytes (2 MB) get their own virtual range with
 * physical granules mapped into it, freed ranges cached mapped by size, and granules of cached
 * ranges of other sizes remapped when neither the cache nor the free list serves a request. Why:
 * on an H200 a churn ending with every other 4 MB buffer of 3.5 GiB freed, then one 1 GiB request,
 * left the driver pool at 76 % utilization (4.93 GB reserved for 3.76 GB in use): it cannot give
 * back holes between live buffers. Granules can be mapped anywhere, so large blocks cannot fragment.
 *
 * Why lazy frees: a buffer freed by the host may still be in use by queued GPU work. Frees are
 * batched: pending until a flush, which waits once for the work involved and then returns everything
 * (coalescing free page ranges).
 *
 * Why events, not streams: a stream named at free() may be destroyed before the flush (CuPy frees on
 * the stream current at allocation, and a garbage-collected cupy.cuda.Stream destroys its handle);
 * cuStreamSynchronize or cuMemFreeAsync on a dead handle fails, or, where the handle value was reused
 * by a new stream, waits on the wrong one. So free() records an event on the stream while it is
 * known to be alive, and the flush waits on the event, which completes when the work queued before it
 * does whatever became of the stream. Cheap: one event per distinct stream per pending batch, re-
 * recorded by each later free on that stream (a record captures all work queued so far, so it covers
 * the earlier frees too), taken from a small free list the pool owns and reused after each flush: no
 * cuEventCreate once warm. TG_DEVPOOL_ANY_STREAM (memory usable on any stream), a 17th distinct
 * stream in one batch, or a stream the driver refuses to record on, make the flush wait for the whole
 * context instead (cuCtxSynchronize), unless context waits are held off (tg_devpool_hold_context_waits:
 * a resident kernel never finishes, so such a wait would stall): those blocks then stay pending.
 * Level 2 is freed at the flush, after its event, with cuMemFreeAsync on CU_STREAM_PER_THREAD (the
 * flushing thread's default stream, alive as long as the thread): never on a remembered stream.
 *
 * Why C: PyTorch's CUDAPluggableAllocator calls plain C function pointers from any thread, without
 * the GIL; the same code serves tickgpu's Python API through CFFI. One mutex guards a pool.
 *
 * Why dlopen (csrc/hot/libcuda.h): the core must build and load without CUDA; the driver is reached
 * through a private table of function pointers, and the host backend never touches it.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tickgpu.h"
#include "hot/libcuda.h"
#include "vmm.h"

/* ---- The driver ABI, restated from cuda.h (CUDA 12/13) for the calls used ------------------ */
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef void *CUstream;
typedef void *CUmemoryPool;
typedef void *CUcontext;
typedef void *CUevent;

typedef struct {            /* CUmemPoolProps_v1 */
    int alloc_type;         /* CU_MEM_ALLOCATION_TYPE_PINNED = 1 */
    int handle_types;       /* CU_MEM_HANDLE_TYPE_NONE = 0 */
    int location_type;      /* CUmemLocation.type: CU_MEM_LOCATION_TYPE_DEVICE = 1 */
    int location_id;        /* CUmemLocation.id: the device ordinal */
    void *win32_security_attributes;
    size_t max_size;
    unsigned short usage;
    unsigned char reserved[54];
} cu_pool_props;

enum {
    CU_OUT_OF_MEMORY = 2,                 /* CUDA_ERROR_OUT_OF_MEMORY */
    CU_POOL_RELEASE_THRESHOLD = 4,        /* CU_MEMPOOL_ATTR_RELEASE_THRESHOLD (cuuint64_t) */
    CU_POOL_RESERVED_MEM_CURRENT = 5      /* CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT (cuuint64_t) */
};

static struct {
    CUresult (*mem_alloc)(CUdeviceptr *, size_t);
    CUresult (*mem_free)(CUdeviceptr);
    CUresult (*mem_get_info)(size_t *, size_t *);
    CUresult (*pool_create)(CUmemoryPool *, const cu_pool_props *);
    CUresult (*pool_set_attribute)(CUmemoryPool, int, void *);
    CUresult (*pool_get_attribute)(CUmemoryPool, int, void *);
    CUresult (*pool_trim_to)(CUmemoryPool, size_t);
    CUresult (*pool_destroy)(CUmemoryPool);
    CUresult (*alloc_from_pool_async)(CUdeviceptr *, size_t, CUmemoryPool, CUstream);
    CUresult (*free_async)(CUdeviceptr, CUstream);
    CUresult (*stream_sync)(CUstream);
    CUresult (*ctx_sync)(void);
    CUresult (*ctx_set_current)(CUcontext);
    CUresult (*error_name)(CUresult, const char **);
    CUresult (*event_create)(CUevent *, unsigned int);
    CUresult (*event_record)(CUevent, CUstream);
    CUresult (*event_sync)(CUevent);
    CUresult (*event_destroy)(CUevent);
} cu;

static pthread_once_t cu_once = PTHREAD_ONCE_INIT;
static int cu_status = TG_ENODRIVER;

/* The driver's names of the entries of `cu`, in its field order (the _v2 names are what cuda.h
 * maps the plain ones to). */
static const char *const cu_names[] = {
    "cuMemAlloc_v2", "cuMemFree_v2", "cuMemGetInfo_v2", "cuMemPoolCreate", "cuMemPoolSetAttribute",
    "cuMemPoolGetAttribute", "cuMemPoolTrimTo", "cuMemPoolDestroy", "cuMemAllocFromPoolAsync",
    "cuMemFreeAsync", "cuStreamSynchronize", "cuCtxSynchronize", "cuCtxSetCurrent", "cuGetErrorName",
    "cuEventCreate", "cuEventRecord", "cuEventSynchronize", "cuEventDestroy_v2",
};
_Static_assert(sizeof cu == sizeof cu_names / sizeof cu_names[0] * sizeof(void *), "a name per entry of cu");

static void cu_load(void)
{
    if (tg_libcuda_load(&cu, cu_names, sizeof cu_names / sizeof cu_names[0]) == 0)
        __atomic_store_n(&cu_status, TG_OK, __ATOMIC_RELEASE);
}

static int cu_ready(void)
{
    pthread_once(&cu_once, cu_load);
    return __atomic_load_n(&cu_status, __ATOMIC_ACQUIRE);
}

/* ---- Pool structures ------------------------------------------------------------------------- */
#define PAGE ((int64_t)64 << 10)        /* level-1 blocks are managed in pages of this size */
#define MIN_CLASS ((int64_t)512)
#define MAX_BLOCKS 64
#define MAX_SYNC_STREAMS 16             /* more distinct streams than this: one context sync instead */
#define CU_EVENT_DISABLE_TIMING 0x2u
#define CU_STREAM_PER_THREAD ((CUstream)0x2)
#define DRIVER_GRANULE ((int64_t)2 << 20) /* the driver pool grows in 2 MB steps: the cap check counts so */
#define MAX_REQUEST ((int64_t)1 << 56)

typedef struct { int64_t start, pages; } page_range;

typedef struct {
    uintptr_t base;                     /* 0: an empty slot */
    int64_t pages;
    page_range *free;                   /* free ranges sorted by start, never adjacent (coalesced) */
    int64_t nfree, capfree;
} block;

/* A run of pages cut into chunks of one class; at most max(64 KB / 512, 8) = 128 chunks. */
typedef struct slab {
    struct slab *prev, *next;           /* the class's list of slabs with a free chunk */
    int blk, cls, nchunks, nfree, listed;
    int64_t page, pages, chunk;
    uint64_t free_bits[2];              /* bit set: chunk free */
} slab;

enum { ST_EMPTY = 0, ST_LIVE = 1, ST_PENDING = 2 };

typedef struct {
    uintptr_t ptr;
    int64_t size;                       /* rounded */
    slab *sl;                           /* level 1: its slab */
    tg_vmm_range *vr;                   /* level 3: its mapped range */
    uint8_t level, state;
    uint8_t any;                        /* pending: the flush waits for the whole context */
} entry;

struct tg_devpool {
    pthread_mutex_t mu;
    tg_devpool_config cfg;
    int64_t cap;
    block blocks[MAX_BLOCKS];
    int64_t nblocks;
    slab *partial[256];                 /* per class */
    entry *table;                       /* open addressing, linear probing, power-of-two size */
    int64_t table_size, table_used;
    uintptr_t *pending;
    int64_t npending, cap_pending;
    CUmemoryPool driver_pool;
    int64_t l2_bytes;                   /* level-2 buffers live or pending (rounded) */
    int64_t l2_reserved;                /* driver: pool's RESERVED_MEM_CURRENT as last read */
    tg_vmm vmm;                         /* level 3: large blocks on virtual memory management */
    struct { uintptr_t stream; CUevent ev; } batch[MAX_SYNC_STREAMS];   /* this batch's events */
    int nbatch;
    CUevent idle[MAX_SYNC_STREAMS];     /* events not in use: batch + idle never pass MAX_SYNC_STREAMS */
    int nidle;
    int64_t npending_any;               /* pending blocks the flush waits for the whole context for */
    int64_t context_holds;              /* > 0: no cuCtxSynchronize (a resident kernel is open) */
    tg_devpool_stats st;
};

/* ---- Size classes ---------------------------------------------------------------------------- */
static int floor_log2(uint64_t x) { return 63 - __builtin_clzll(x); }

/* 512, 1024, 1536, 2048, then 4 per power of two (2560, 3072, 3584, 4096, 5120, ...). */
static int64_t class_size(int64_t n)
{
    if (n <= MIN_CLASS)
        return MIN_CLASS;
    int p = floor_log2((uint64_t)(n - 1));
    int64_t step = p >= 11 ? ((int64_t)1 << (p - 2)) : MIN_CLASS;
    return (n + step - 1) / step * step;
}

static int class_index(int64_t size)
{
    if (size <= 2048)
        return (int)(size / MIN_CLASS) - 1;
    int p = floor_log2((uint64_t)(size - 1));
    return 4 + (p - 11) * 4 + (int)((size - ((int64_t)1 << p)) >> (p - 2)) - 1;
}

int64_t tg_devpool_rounded(const tg_devpool *pool, int64_t nbytes)
{
    if (pool == NULL || nbytes < 0 || nbytes > MAX_REQUEST)
        return -1;
    if (tg_vmm_wants(&pool->vmm, nbytes))
        return tg_vmm_rounded(&pool->vmm, nbytes);
    if (nbytes <= pool->cfg.small_max)
        return class_size(nbytes);
    return (nbytes + MIN_CLASS - 1) / MIN_CLASS * MIN_CLASS;
}

/* ---- Live-pointer table ---------------------------------------------------------------------- */
static uint64_t slot_of(const tg_devpool *p, uintptr_t ptr)
{
    return ((uint64_t)(ptr >> 9) * 0x9E3779B97F4A7C15ull) >> 20 & (uint64_t)(p->table_size - 1);
}

static entry *table_find(tg_devpool *p, uintptr_t ptr)
{
    for (uint64_t i = slot_of(p, ptr);; i = (i + 1) & (uint64_t)(p->table_size - 1)) {
        entry *e = &p->table[i];
        if (e->state == ST_EMPTY)
            return NULL;
        if (e->ptr == ptr)
            return e;
    }
}

static int table_grow(tg_devpool *p)
{
    int64_t n = p->table_size * 2;
    entry *t = calloc((size_t)n, sizeof(entry));
    if (t == NULL)
        return TG_ENOMEM;
    entry *old = p->table;
    int64_t old_n = p->table_size;
    p->table = t;
    p->table_size = n;
    for (int64_t i = 0; i < old_n; i++)
        if (old[i].state != ST_EMPTY) {
            uint64_t j = slot_of(p, old[i].ptr);
            while (t[j].state != ST_EMPTY)
                j = (j + 1) & (uint64_t)(n - 1);
            t[j] = old[i];
        }
    free(old);
    return TG_OK;
}

/* Room for one more entry, made before anything is allocated so an insert cannot fail after. */
static int table_reserve(tg_devpool *p)
{
    return (p->table_used + 1) * 2 > p->table_size ? table_grow(p) : TG_OK;
}

static void table_insert(tg_devpool *p, entry e)
{
    uint64_t i = slot_of(p, e.ptr);
    while (p->table[i].state != ST_EMPTY)
        i = (i + 1) & (uint64_t)(p->table_size - 1);
    p->table[i] = e;
    p->table_used++;
}

/* Backward-shift deletion: no tombstones, so lookups of foreign pointers stay short. */
static void table_remove(tg_devpool *p, entry *e)
{
    uint64_t mask = (uint64_t)(p->table_size - 1), i = (uint64_t)(e - p->table), j = i;
    p->table[i].state = ST_EMPTY;
    for (;;) {
        j = (j + 1) & mask;
        if (p->table[j].state == ST_EMPTY)
            break;
        uint64_t home = slot_of(p, p->table[j].ptr);
        /* Move j back to the hole i unless its home lies cyclically in (i, j]. */
        int stays = i <= j ? (i < home && home <= j) : (i < home || home <= j);
        if (!stays) {
            p->table[i] = p->table[j];
            p->table[j].state = ST_EMPTY;
            i = j;
        }
    }
    p->table_used--;
}

/* ---- Raw memory per backend ------------------------------------------------------------------ */
static int report(CUresult r, int *cu_result)
{
    if (cu_result != NULL && r != 0)
        *cu_result = r;
    if (r == 0)
        return TG_OK;
    return r == CU_OUT_OF_MEMORY ? TG_ENOMEM : TG_ECUDA;
}

static int raw_block_alloc(tg_devpool *p, int64_t bytes, uintptr_t *out, int *cu_result)
{
    p->st.driver_allocs++;
    if (p->cfg.backend == TG_DEVPOOL_HOST) {
        void *m = aligned_alloc((size_t)PAGE, (size_t)bytes);
        *out = (uintptr_t)m;
        return m == NULL ? TG_ENOMEM : TG_OK;
    }
    CUdeviceptr d = 0;
    int st = report(cu.mem_alloc(&d, (size_t)bytes), cu_result);
    *out = (uintptr_t)d;
    return st;
}

static void raw_block_free(tg_devpool *p, uintptr_t base, int *cu_result)
{
    if (p->cfg.backend == TG_DEVPOOL_HOST)
        free((void *)base);
    else
        report(cu.mem_free((CUdeviceptr)base), cu_result);
}

static void refresh_l2_reserved(tg_devpool *p)
{
    if (p->cfg.backend == TG_DEVPOOL_HOST) {
        p->l2_reserved = p->l2_bytes;   /* host level 2 keeps no cache: reserved is what is out */
        return;
    }
    unsigned long long v = 0;
    if (p->driver_pool != NULL && cu.pool_get_attribute(p->driver_pool, CU_POOL_RESERVED_MEM_CURRENT, &v) == 0)
        p->l2_reserved = (int64_t)v;
}

/* Memory held outside level 2: level-1 blocks and level-3 granules (mapped or free). */
static int64_t held_outside_l2(const tg_devpool *p)
{
    return p->nblocks * p->cfg.slab_block_bytes + tg_vmm_held_bytes(&p->vmm);
}

static int64_t reserved_now(const tg_devpool *p) { return held_outside_l2(p) + p->l2_reserved; }

static void note_reserved(tg_devpool *p)
{
    int64_t r = reserved_now(p);
    if (r > p->st.peak_reserved)
        p->st.peak_reserved = r;
}

/* ---- Level 1: blocks of pages ---------------------------------------------------------------- */
static int block_add(tg_devpool *p, int *cu_result)
{
    int64_t bytes = p->cfg.slab_block_bytes;
    if (p->nblocks >= p->cfg.slab_blocks)
        return TG_ERANGE;
    if (reserved_now(p) + bytes > p->cap)
        return TG_ERANGE;
    int slot = 0;
    while (p->blocks[slot].base != 0)
        slot++;
    block *b = &p->blocks[slot];
    b->pages = bytes / PAGE;
    b->capfree = b->pages / 2 + 2;      /* the most ranges that can be free, never adjacent */
    b->free = malloc((size_t)b->capfree * sizeof(page_range));
    if (b->free == NULL)
        return TG_ENOMEM;
    int st = raw_block_alloc(p, bytes, &b->base, cu_result);
    if (st != TG_OK || b->base == 0) {
        free(b->free);
        memset(b, 0, sizeof *b);
        return st != TG_OK ? st : TG_ENOMEM;
    }
    b->free[0] = (page_range){0, b->pages};
    b->nfree = 1;
    p->nblocks++;
    note_reserved(p);
    return TG_OK;
}

/* Best fit over every block: the smallest free range that holds `pages`, cut from its start. */
static int pages_take(tg_devpool *p, int64_t pages, int *blk, int64_t *page)
{
    int best_b = -1;
    int64_t best_i = -1, best_len = INT64_MAX;
    for (int b = 0; b < MAX_BLOCKS; b++) {
        block *bl = &p->blocks[b];
        if (bl->base == 0)
            continue;
        for (int64_t i = 0; i < bl->nfree; i++)
            if (bl->free[i].pages >= pages && bl->free[i].pages < best_len) {
                best_b = b, best_i = i, best_len = bl->free[i].pages;
            }
    }
    if (best_b < 0)
        return 0;
    block *bl = &p->blocks[best_b];
    page_range *r = &bl->free[best_i];
    *blk = best_b;
    *page = r->start;
    r->start += pages;
    r->pages -= pages;
    if (r->pages == 0) {
        memmove(r, r + 1, (size_t)(bl->nfree - best_i - 1) * sizeof *r);
        bl->nfree--;
    }
    return 1;
}

/* Returns pages to their block, merged with the free ranges on either side. */
static void pages_give(tg_devpool *p, int blk, int64_t start, int64_t pages)
{
    block *bl = &p->blocks[blk];
    int64_t lo = 0, hi = bl->nfree;     /* first range starting after `start` */
    while (lo < hi) {
        int64_t mid = (lo + hi) / 2;
        if (bl->free[mid].start < start)
            lo = mid + 1;
        else
            hi = mid;
    }
    int joins_prev = lo > 0 && bl->free[lo - 1].start + bl->free[lo - 1].pages == start;
    int joins_next = lo < bl->nfree && start + pages == bl->free[lo].start;
    if (joins_prev && joins_next) {
        bl->free[lo - 1].pages += pages + bl->free[lo].pages;
        memmove(&bl->free[lo], &bl->free[lo + 1], (size_t)(bl->nfree - lo - 1) * sizeof(page_range));
        bl->nfree--;
    } else if (joins_prev) {
        bl->free[lo - 1].pages += pages;
    } else if (joins_next) {
        bl->free[lo].start = start;
        bl->free[lo].pages += pages;
    } else {
        memmove(&bl->free[lo + 1], &bl->free[lo], (size_t)(bl->nfree - lo) * sizeof(page_range));
        bl->free[lo] = (page_range){start, pages};
        bl->nfree++;
    }
}

/* ---- Level 1: slabs ---------------------------------------------------------------------------- */
static void slab_list(tg_devpool *p, slab *s)
{
    s->prev = NULL;
    s->next = p->partial[s->cls];
    if (s->next)
        s->next->prev = s;
    p->partial[s->cls] = s;
    s->listed = 1;
}

static void slab_unlist(tg_devpool *p, slab *s)
{
    if (s->prev)
        s->prev->next = s->next;
    else
        p->partial[s->cls] = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->prev = s->next = NULL;
    s->listed = 0;
}

/* Slab geometry: at least a page and 8 chunks; a class so large that 8 chunks would take more than
 * a quarter of a block gets slabs of one chunk (then level 1 is a plain range allocator for it). */
static int64_t slab_pages(const tg_devpool *p, int64_t chunk)
{
    int64_t bytes = chunk * 8 > PAGE ? chunk * 8 : PAGE;
    if (bytes > p->cfg.slab_block_bytes / 4)
        bytes = chunk;
    return (bytes + PAGE - 1) / PAGE;
}

static int slab_new(tg_devpool *p, int cls, int64_t chunk, int *cu_result)
{
    int64_t pages = slab_pages(p, chunk);
    if (pages * PAGE > p->cfg.slab_block_bytes)
        return TG_ERANGE;
    slab *s = calloc(1, sizeof *s);
    if (s == NULL)
        return TG_ENOMEM;
    int blk;
    int64_t page;
    if (!pages_take(p, pages, &blk, &page)) {
        int st = block_add(p, cu_result);
        if (st != TG_OK || !pages_take(p, pages, &blk, &page)) {
            free(s);
            return st != TG_OK ? st : TG_ERANGE;
        }
    }
    s->blk = blk, s->cls = cls, s->page = page, s->pages = pages, s->chunk = chunk;
    int64_t n = pages * PAGE / chunk;
    s->nchunks = s->nfree = (int)(n > 128 ? 128 : n);
    for (int i = 0; i < s->nchunks; i++)
        s->free_bits[i / 64] |= 1ull << (i % 64);
    slab_list(p, s);
    return TG_OK;
}

static int l1_alloc(tg_devpool *p, int64_t size, uintptr_t *ptr, slab **out, int *cu_result)
{
    int cls = class_index(size);
    if (p->partial[cls] == NULL) {
        int st = slab_new(p, cls, size, cu_result);
        if (st != TG_OK)
            return st;
    }
    slab *s = p->partial[cls];
    int w = s->free_bits[0] ? 0 : 1;
    int bit = __builtin_ctzll(s->free_bits[w]);
    s->free_bits[w] &= ~(1ull << bit);
    int i = w * 64 + bit;
    if (--s->nfree == 0)
        slab_unlist(p, s);
    *ptr = p->blocks[s->blk].base + (uintptr_t)(s->page * PAGE + i * s->chunk);
    *out = s;
    return TG_OK;
}

static void l1_release(tg_devpool *p, const entry *e)
{
    slab *s = e->sl;
    uintptr_t off = e->ptr - p->blocks[s->blk].base - (uintptr_t)(s->page * PAGE);
    int i = (int)(off / (uintptr_t)s->chunk);
    s->free_bits[i / 64] |= 1ull << (i % 64);
    s->nfree++;
    if (s->nfree == s->nchunks) {       /* wholly free: back to its block, coalesced */
        if (s->listed)
            slab_unlist(p, s);
        pages_give(p, s->blk, s->page, s->pages);
        free(s);
    } else if (!s->listed) {
        slab_list(p, s);
    }
}

/* ---- Level 2 ----------------------------------------------------------------------------------- */
static int l2_alloc(tg_devpool *p, int64_t size, uintptr_t stream, uintptr_t *ptr, int *cu_result)
{
    int64_t l1 = held_outside_l2(p);
    if (p->cfg.backend == TG_DEVPOOL_HOST) {
        if (l1 + p->l2_bytes + size > p->cap)
            return TG_ERANGE;
        p->st.driver_allocs++;
        void *m = aligned_alloc((size_t)MIN_CLASS, (size_t)size);
        if (m == NULL)
            return TG_ENOMEM;
        *ptr = (uintptr_t)m;
        p->l2_bytes += size;
        p->l2_reserved = p->l2_bytes;
        return TG_OK;
    }
    /* The pool may serve from memory it caches (reserved) or grow by the request, in 2 MB steps. */
    int64_t grown = p->l2_bytes + (size + DRIVER_GRANULE - 1) / DRIVER_GRANULE * DRIVER_GRANULE;
    int64_t packed = (p->l2_bytes + size + DRIVER_GRANULE - 1) / DRIVER_GRANULE * DRIVER_GRANULE;
    grown = packed > grown ? packed : grown;    /* a pool packing its buffers may still cross a step */
    if (l1 + (grown > p->l2_reserved ? grown : p->l2_reserved) > p->cap)
        return TG_ERANGE;
    p->st.driver_allocs++;
    CUdeviceptr d = 0;
    int st = report(cu.alloc_from_pool_async(&d, (size_t)size, p->driver_pool, (CUstream)stream), cu_result);
    if (st != TG_OK)
        return st;
    *ptr = (uintptr_t)d;
    p->l2_bytes += size;
    refresh_l2_reserved(p);
    return TG_OK;
}

static void l2_release(tg_devpool *p, const entry *e, int *cu_result)
{
    if (p->cfg.backend == TG_DEVPOOL_HOST)
        free((void *)e->ptr);
    else
        report(cu.free_async((CUdeviceptr)e->ptr, CU_STREAM_PER_THREAD), cu_result);  /* idle by now */
    p->l2_bytes -= e->size;
}

/* ---- Level 3: large blocks on the driver's virtual memory management (vmm.c) ------------------- */
static int l3_alloc(tg_devpool *p, int64_t size, uintptr_t *ptr, tg_vmm_range **vr, int *cu_result)
{
    /* New granules count against the cap like any reserved memory. */
    int st = tg_vmm_alloc(&p->vmm, size, p->cap - reserved_now(p), vr, cu_result);
    if (st == TG_OK)
        *ptr = (*vr)->va;
    return st;
}

/* ---- Flush and trim ------------------------------------------------------------------------------ */
static int flush_locked(tg_devpool *p, int *cu_result)
{
    if (p->npending == 0)
        return TG_OK;
    int st = TG_OK, context_waited = 0;
    if (p->cfg.backend == TG_DEVPOOL_DRIVER) {
        /* Every level is reused (or, level 2, freed) only once the work queued before its free is
           done: each batch event was last recorded at the last free on its stream. */
        for (int k = 0; k < p->nbatch && st == TG_OK; k++)
            st = report(cu.event_sync(p->batch[k].ev), cu_result);
        if (st == TG_OK && p->npending_any > 0 && p->context_holds == 0) {
            st = report(cu.ctx_sync(), cu_result);
            context_waited = st == TG_OK;
        }
    } else {
        context_waited = 1;     /* host memory: nothing queued */
    }
    int64_t kept = 0, returned = 0;
    for (int64_t i = 0; i < p->npending; i++) {
        entry *e = table_find(p, p->pending[i]);
        if (e == NULL)
            continue;
        if (st != TG_OK || (e->any && !context_waited)) {
            /* The wait failed (queued work may still use the memory: it stays pending, never
               handed out again, until a later flush manages), or the block may be in use on any
               stream and context waits are held off: kept for a flush that may wait for them. */
            p->pending[kept++] = p->pending[i];
            continue;
        }
        if (e->any)
            p->npending_any--;
        if (e->level == 1)
            l1_release(p, e);
        else if (e->level == 3)
            tg_vmm_cache(&p->vmm, e->vr, cu_result);     /* kept mapped for a request of its size */
        else
            l2_release(p, e, cu_result);
        p->st.pending_bytes -= e->size;
        table_remove(p, e);
        returned++;
    }
    p->npending = kept;
    if (st == TG_OK) {          /* every event waited on: back to the free list for the next batch */
        for (int k = 0; k < p->nbatch; k++)
            p->idle[p->nidle++] = p->batch[k].ev;
        p->nbatch = 0;
    }
    if (returned > 0)
        p->st.flushes++;
    refresh_l2_reserved(p);
    return st;
}

/* Gives back what is held but unused: wholly free blocks, the driver pool's cache, cached level-3
 * ranges and (unless keep_granules: a level-3 request is about to reuse them) free granules. */
static void trim_locked(tg_devpool *p, int keep_granules, int *cu_result)
{
    if (p->cfg.backend == TG_DEVPOOL_DRIVER)
        tg_vmm_trim(&p->vmm, keep_granules, cu_result);
    for (int b = 0; b < MAX_BLOCKS; b++) {
        block *bl = &p->blocks[b];
        if (bl->base != 0 && bl->nfree == 1 && bl->free[0].pages == bl->pages) {
            raw_block_free(p, bl->base, cu_result);
            free(bl->free);
            memset(bl, 0, sizeof *bl);
            p->nblocks--;
        }
    }
    if (p->cfg.backend == TG_DEVPOOL_DRIVER && p->driver_pool != NULL) {
        cu.pool_trim_to(p->driver_pool, 0);
        refresh_l2_reserved(p);
    }
}

/* ---- Public entry points ------------------------------------------------------------------------- */
static int enter(tg_devpool *p, int *cu_result)
{
    if (cu_result != NULL)
        *cu_result = 0;
    if (p->cfg.backend == TG_DEVPOOL_DRIVER && p->cfg.ctx != 0)
        return report(cu.ctx_set_current((CUcontext)p->cfg.ctx), cu_result);
    return TG_OK;
}

int tg_devpool_create(const tg_devpool_config *config, tg_devpool **pool, int *cu_result)
{
    if (cu_result != NULL)
        *cu_result = 0;
    if (config == NULL || pool == NULL)
        return TG_EINVAL;
    *pool = NULL;
    const tg_devpool_config *c = config;
    if ((c->backend != TG_DEVPOOL_DRIVER && c->backend != TG_DEVPOOL_HOST) || c->slab_blocks < 0 ||
        c->slab_blocks > MAX_BLOCKS || c->small_max < 0 || c->small_max > MAX_REQUEST || c->lazy_bytes < 0 ||
        (c->slab_blocks > 0 && (c->slab_block_bytes <= 0 || c->slab_block_bytes % PAGE != 0)) ||
        c->cap_bytes < 0 || (c->cap_bytes == 0 && !(c->fraction > 0.0 && c->fraction <= 1.0)) ||
        (c->backend == TG_DEVPOOL_HOST && c->cap_bytes == 0))
        return TG_EINVAL;
    if (c->backend == TG_DEVPOOL_DRIVER && cu_ready() != TG_OK)
        return TG_ENODRIVER;
    tg_devpool *p = calloc(1, sizeof *p);
    if (p == NULL)
        return TG_ENOMEM;
    p->cfg = *c;
    p->table_size = 1024;
    p->table = calloc((size_t)p->table_size, sizeof(entry));
    p->cap_pending = 256;
    p->pending = malloc((size_t)p->cap_pending * sizeof(uintptr_t));
    if (p->table == NULL || p->pending == NULL || pthread_mutex_init(&p->mu, NULL) != 0) {
        free(p->table);
        free(p->pending);
        free(p);
        return TG_ENOMEM;
    }
    int st = enter(p, cu_result);
    p->cap = c->cap_bytes;
    if (st == TG_OK && c->backend == TG_DEVPOOL_DRIVER) {
        size_t free_b = 0, total_b = 0;
        st = report(cu.mem_get_info(&free_b, &total_b), cu_result);
        if (st == TG_OK && p->cap == 0)
            p->cap = (int64_t)(c->fraction * (double)total_b);
        if (st == TG_OK) {
            cu_pool_props props;
            memset(&props, 0, sizeof props);
            props.alloc_type = 1;
            props.location_type = 1;
            props.location_id = c->device;
            st = report(cu.pool_create(&p->driver_pool, &props), cu_result);
        }
        if (st == TG_OK) {
            /* Raised so freed memory stays cached in the pool across synchronizations. */
            unsigned long long keep = (unsigned long long)(c->release_threshold >= 0 ? c->release_threshold : p->cap);
            st = report(cu.pool_set_attribute(p->driver_pool, CU_POOL_RELEASE_THRESHOLD, &keep), cu_result);
        }
    }
    tg_vmm_init(&p->vmm, c->backend == TG_DEVPOOL_HOST, c->device, c->vmm_min_bytes);
    for (int64_t b = 0; st == TG_OK && c->preallocate && b < c->slab_blocks; b++)
        st = block_add(p, cu_result);
    if (st != TG_OK) {
        tg_devpool_destroy(p, NULL, NULL, NULL);
        return st;
    }
    p->st.cap = p->cap;
    *pool = p;
    return TG_OK;
}

static pthread_mutex_t default_mu = PTHREAD_MUTEX_INITIALIZER;
static tg_devpool *default_pool = NULL;

int tg_devpool_destroy(tg_devpool *p, int64_t *outstanding, int64_t *outstanding_bytes, int *cu_result)
{
    if (outstanding != NULL)
        *outstanding = 0;
    if (outstanding_bytes != NULL)
        *outstanding_bytes = 0;
    if (p == NULL)
        return TG_EINVAL;
    pthread_mutex_lock(&default_mu);    /* no PyTorch call can be inside this pool after this */
    if (default_pool == p)
        default_pool = NULL;
    pthread_mutex_unlock(&default_mu);
    int st = enter(p, cu_result);
    if (st == TG_OK && p->cfg.backend == TG_DEVPOOL_DRIVER && (p->nblocks > 0 || p->vmm.held > 0 || p->table_used > 0))
        st = report(cu.ctx_sync(), cu_result);     /* queued work may still touch the memory */
    int64_t n = 0, bytes = 0;
    for (int64_t i = 0; i < p->table_size; i++) {
        entry *e = &p->table[i];
        if (e->state == ST_LIVE)
            n++, bytes += e->size;
        if (e->state != ST_EMPTY && e->level == 2)
            l2_release(p, e, cu_result);
        else if (e->state != ST_EMPTY && e->level == 3)
            tg_vmm_unmap(&p->vmm, e->vr, cu_result);
        else if (e->state != ST_EMPTY)
            l1_release(p, e);                /* the last chunk back frees its slab record */
    }
    for (int c = 0; c < 256; c++)           /* none expected: a wholly free slab is never kept */
        for (slab *s = p->partial[c], *next; s != NULL; s = next) {
            next = s->next;
            free(s);
        }
    for (int b = 0; b < MAX_BLOCKS; b++)
        if (p->blocks[b].base != 0) {
            raw_block_free(p, p->blocks[b].base, cu_result);
            free(p->blocks[b].free);
        }
    if (p->cfg.backend == TG_DEVPOOL_DRIVER)
        tg_vmm_close(&p->vmm, cu_result);   /* every granule released, every range freed */
    if (p->driver_pool != NULL) {
        cu.ctx_sync();                      /* the pool must be idle before it is destroyed */
        report(cu.pool_destroy(p->driver_pool), cu_result);
    }
    for (int k = 0; k < p->nbatch; k++)     /* complete: the context was synchronized above */
        report(cu.event_destroy(p->batch[k].ev), cu_result);
    for (int k = 0; k < p->nidle; k++)
        report(cu.event_destroy(p->idle[k]), cu_result);
    if (outstanding != NULL)
        *outstanding = n;
    if (outstanding_bytes != NULL)
        *outstanding_bytes = bytes;
    pthread_mutex_destroy(&p->mu);
    free(p->table);
    free(p->pending);
    free(p);
    return st;
}

static int alloc_locked(tg_devpool *p, int64_t nbytes, uintptr_t stream, uintptr_t *ptr, int *level,
                        int *cu_result)
{
    int64_t size = tg_devpool_rounded(p, nbytes);
    if (size < 0 || size > p->cap)
        return TG_ERANGE;
    int st = table_reserve(p);
    if (st != TG_OK)
        return st;
    int large = tg_vmm_wants(&p->vmm, nbytes);
    int small = !large && nbytes <= p->cfg.small_max && p->cfg.slab_blocks > 0;
    uintptr_t got = 0;
    slab *sl = NULL;
    tg_vmm_range *vr = NULL;
    /* Try each way in turn, then again after a flush (pending memory back), then after a trim
       (cached memory given back, which frees room under the cap for the other level). */
    for (int attempt = 0; attempt < 3; attempt++) {
        if (attempt == 1) {
            if (p->npending == 0)
                continue;
            int fs = flush_locked(p, cu_result);
            if (fs != TG_OK)
                return fs;
        }
        if (attempt == 2)
            trim_locked(p, large, cu_result);
        if (large) {
            st = l3_alloc(p, size, &got, &vr, cu_result);
            if (st == TG_OK) {
                *level = 3;
                break;
            }
            if (st == TG_VMM_UNSUPPORTED) {
                /* The driver refused VMM after all (vmm.c turned the path off and says why in
                   the stats): this request and all later ones take levels 1 and 2. */
                large = 0;
                size = tg_devpool_rounded(p, nbytes);
                if (size > p->cap)
                    return TG_ERANGE;
                small = nbytes <= p->cfg.small_max && p->cfg.slab_blocks > 0;
                if (cu_result != NULL)
                    *cu_result = 0;
                attempt--;
                continue;
            }
            if (st != TG_ERANGE && st != TG_ENOMEM)
                return st;
            continue;
        }
        if (small) {
            st = l1_alloc(p, size, &got, &sl, cu_result);
            if (st == TG_OK) {
                *level = 1;
                break;
            }
            if (st != TG_ERANGE && st != TG_ENOMEM)
                return st;
            /* Level 1 is full. Freed memory not yet returned beats a driver allocation (a hot
               path must make none once warm): flush first (attempt 1), spill to level 2 after. */
            if (attempt == 0 && p->npending > 0)
                continue;
        }
        st = l2_alloc(p, size, stream, &got, cu_result);
        if (st == TG_OK) {
            *level = 2;
            break;
        }
        if (st != TG_ERANGE && st != TG_ENOMEM)
            return st;
    }
    if (st != TG_OK)
        return st;
    table_insert(p, (entry){got, size, sl, vr, (uint8_t)*level, ST_LIVE, 0});
    *ptr = got;
    if (*level == 1)
        p->st.served_slab++;
    else if (*level == 2)
        p->st.served_driver++;
    p->st.in_use += size;
    if (p->st.in_use > p->st.peak_in_use)
        p->st.peak_in_use = p->st.in_use;
    note_reserved(p);
    return TG_OK;
}

int tg_devpool_alloc(tg_devpool *p, int64_t nbytes, uintptr_t stream, uintptr_t *ptr, int *level,
                     int *cu_result)
{
    if (cu_result != NULL)
        *cu_result = 0;
    if (p == NULL || ptr == NULL || nbytes < 0)
        return TG_EINVAL;
    *ptr = 0;
    int lv = 0;
    pthread_mutex_lock(&p->mu);
    int st = enter(p, cu_result);
    if (st == TG_OK)
        st = alloc_locked(p, nbytes, stream, ptr, &lv, cu_result);
    if (st != TG_OK)
        p->st.failed++;
    pthread_mutex_unlock(&p->mu);
    if (level != NULL)
        *level = lv;
    return st;
}

/* Records this batch's event of `stream` (created on first need, else from the free list, else the
 * one already recorded on that stream this batch, re-recorded). Returns 0 where the flush must wait
 * for the whole context instead: TG_DEVPOOL_ANY_STREAM, more distinct streams than the batch holds,
 * or the driver refusing (a stream already destroyed: then nothing says what used the memory). */
static int record_free(tg_devpool *p, uintptr_t stream)
{
    if (stream == (uintptr_t)TG_DEVPOOL_ANY_STREAM)
        return 0;
    int k = 0;
    while (k < p->nbatch && p->batch[k].stream != stream)
        k++;
    if (k == p->nbatch) {
        if (k == MAX_SYNC_STREAMS)
            return 0;
        CUevent ev = NULL;
        if (p->nidle > 0) {
            ev = p->idle[--p->nidle];
        } else if (cu.event_create(&ev, CU_EVENT_DISABLE_TIMING) == 0) {
            p->st.events_created++;
        } else {
            return 0;
        }
        p->batch[k].stream = stream;
        p->batch[k].ev = ev;
        p->nbatch++;
    }
    return cu.event_record(p->batch[k].ev, (CUstream)stream) == 0;
}

int tg_devpool_free(tg_devpool *p, uintptr_t ptr, uintptr_t stream, int *cu_result)
{
    if (cu_result != NULL)
        *cu_result = 0;
    if (p == NULL)
        return TG_EINVAL;
    pthread_mutex_lock(&p->mu);
    int st = TG_OK;
    entry *e = table_find(p, ptr);
    if (e == NULL) {
        st = TG_EINVAL;
    } else if (e->state == ST_PENDING) {
        st = TG_EDATA;
    } else if (p->npending == p->cap_pending) {
        uintptr_t *more = realloc(p->pending, (size_t)p->cap_pending * 2 * sizeof(uintptr_t));
        if (more == NULL)
            st = TG_ENOMEM;
        else
            p->pending = more, p->cap_pending *= 2;
    }
    if (st == TG_OK) {
        e->state = ST_PENDING;
        e->any = 0;
        if (p->cfg.backend == TG_DEVPOOL_DRIVER) {
            /* A free never fails once the pointer is known: what cannot be recorded waits for all. */
            e->any = !(enter(p, NULL) == TG_OK && record_free(p, stream));
            p->npending_any += e->any;
        }
        p->pending[p->npending++] = ptr;
        p->st.in_use -= e->size;
        p->st.pending_bytes += e->size;
        if (p->st.pending_bytes > p->cfg.lazy_bytes) {
            st = enter(p, cu_result);
            if (st == TG_OK)
                st = flush_locked(p, cu_result);
        }
    }
    pthread_mutex_unlock(&p->mu);
    return st;
}

int tg_devpool_flush(tg_devpool *p, int *cu_result)
{
    if (cu_result != NULL)
        *cu_result = 0;
    if (p == NULL)
        return TG_EINVAL;
    pthread_mutex_lock(&p->mu);
    int st = enter(p, cu_result);
    if (st == TG_OK)
        st = flush_locked(p, cu_result);
    pthread_mutex_unlock(&p->mu);
    return st;
}

int tg_devpool_get_stats(tg_devpool *p, tg_devpool_stats *out)
{
    if (p == NULL || out == NULL)
        return TG_EINVAL;
    pthread_mutex_lock(&p->mu);
    if (p->cfg.backend == TG_DEVPOOL_DRIVER && enter(p, NULL) == TG_OK)
        refresh_l2_reserved(p);
    int64_t largest = 0, free_bytes = 0, live = 0;
    for (int b = 0; b < MAX_BLOCKS; b++)
        for (int64_t i = 0; i < p->blocks[b].nfree; i++) {
            int64_t n = p->blocks[b].free[i].pages * PAGE;
            free_bytes += n;
            largest = n > largest ? n : largest;
        }
    for (int64_t i = 0; i < p->table_size; i++)
        live += p->table[i].state == ST_LIVE;
    *out = p->st;
    out->reserved = reserved_now(p);
    out->largest_free = largest;
    out->fragmentation = free_bytes > 0 ? 1.0 - (double)largest / (double)free_bytes : 0.0;
    out->live = live;
    out->blocks = p->nblocks;
    const tg_vmm *v = &p->vmm;
    out->served_vmm = v->served;
    out->vmm_cache_hits = v->cache_hits;
    out->vmm_granule = v->granule;
    out->vmm_granules = v->held;
    out->vmm_granules_free = v->nfree;
    out->vmm_granules_created = v->created;
    out->vmm_ranges_cached = v->cached_ranges;
    out->vmm_driver_calls = v->driver_calls;
    out->vmm_enabled = __atomic_load_n(&v->enabled, __ATOMIC_RELAXED);
    out->pending_any = p->npending_any;
    memcpy(out->vmm_reason, v->reason, sizeof out->vmm_reason);
    pthread_mutex_unlock(&p->mu);
    return TG_OK;
}

int tg_devpool_lookup(tg_devpool *p, uintptr_t ptr, int64_t *nbytes, int *level, int *state)
{
    if (p == NULL)
        return TG_EINVAL;
    pthread_mutex_lock(&p->mu);
    entry *e = table_find(p, ptr);
    if (e != NULL) {
        if (nbytes != NULL)
            *nbytes = e->size;
        if (level != NULL)
            *level = e->level;
        if (state != NULL)
            *state = e->state;
    }
    pthread_mutex_unlock(&p->mu);
    return e != NULL ? TG_OK : TG_EINVAL;
}

int64_t tg_devpool_hold_context_waits(tg_devpool *p, int hold)
{
    if (p == NULL)
        return -1;
    pthread_mutex_lock(&p->mu);
    if (hold)
        p->context_holds++;
    else if (p->context_holds > 0)
        p->context_holds--;
    int64_t n = p->context_holds;
    pthread_mutex_unlock(&p->mu);
    return n;
}

uintptr_t tg_devpool_driver_pool(tg_devpool *p)
{
    return p == NULL ? 0 : (uintptr_t)p->driver_pool;
}

tg_devpool *tg_devpool_set_default(tg_devpool *p)
{
    pthread_mutex_lock(&default_mu);
    tg_devpool *old = default_pool;
    default_pool = p;
    pthread_mutex_unlock(&default_mu);
    return old;
}

tg_devpool *tg_devpool_get_default(void)
{
    pthread_mutex_lock(&default_mu);
    tg_devpool *p = default_pool;
    pthread_mutex_unlock(&default_mu);
    return p;
}

/* default_mu is held across the call so that tg_devpool_destroy cannot free the pool under it. */
void *tg_torch_alloc(intptr_t size, int device, void *stream)
{
    uintptr_t ptr = 0;
    pthread_mutex_lock(&default_mu);
    tg_devpool *p = default_pool;
    if (p != NULL && size >= 0 && (p->cfg.backend == TG_DEVPOOL_HOST || device == p->cfg.device))
        tg_devpool_alloc(p, (int64_t)size, (uintptr_t)stream, &ptr, NULL, NULL);
    pthread_mutex_unlock(&default_mu);
    return (void *)ptr;
}

void tg_torch_free(void *ptr, intptr_t size, int device, void *stream)
{
    if (ptr == NULL)
        return;
    pthread_mutex_lock(&default_mu);
    if (default_pool != NULL)
        tg_devpool_free(default_pool, (uintptr_t)ptr, (uintptr_t)stream, NULL);
    pthread_mutex_unlock(&default_mu);
}
