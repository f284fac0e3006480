/*
 * vmm.h -- the device pool's large-block path on the driver's virtual memory management API
 * (internal to csrc/mem: devpool.c embeds a tg_vmm and calls these with its mutex held).
 *
 * Physical memory is held as granules (cuMemCreate of the device's minimum granularity, 2 MB on
 * current GPUs); each large allocation gets its own virtual range with granules mapped into it.
 * A freed range (after the pool's flush) stays mapped in a cache keyed by its size, so a request of
 * the same size reuses it with no driver call; a request that the cache and the free list cannot
 * serve unmaps cached ranges of other sizes and maps their granules into a new range. Memory freed
 * anywhere can therefore serve any large request: large blocks cannot fragment.
 */
#ifndef TICKGPU_MEM_VMM_H
#define TICKGPU_MEM_VMM_H

#include <stdint.h>

/* Internal status, never returned by a public entry point: the driver cannot do VMM after all
 * (CUDA_ERROR_NOT_SUPPORTED from cuMemCreate); the pool turns the path off and falls back. */
#define TG_VMM_UNSUPPORTED (-1000)

#define TG_VMM_DEFAULT_MIN_BYTES ((int64_t)2 << 20)

typedef struct tg_vmm_range {
    struct tg_vmm_range *next;          /* in its cache bucket, while cached */
    uintptr_t va;
    int64_t size;                       /* bytes, a multiple of the granule */
    int64_t ngranules;
    unsigned long long handles[];       /* granule i is mapped at va + i * granule */
} tg_vmm_range;

typedef struct {
    int64_t size;
    tg_vmm_range *head;                 /* most recently freed first */
} tg_vmm_bucket;

typedef struct {
    int enabled;                        /* read with __atomic (tg_devpool_rounded takes no lock) */
    char reason[128];                   /* why the path is off; "" when on */
    int device;
    int64_t min_bytes;                  /* requests of at least this many bytes take the path */
    int64_t granule;
    unsigned long long *free_handles;   /* granules unmapped and unused (a stack) */
    int64_t nfree, capfree;             /* capfree >= held always: a return never allocates */
    int64_t held;                       /* granules held: mapped (live, pending, cached) + free */
    tg_vmm_bucket *buckets;             /* one per distinct cached size; empty ones removed */
    int64_t nbuckets, capbuckets;
    int64_t cached_ranges, cached_granules;
    int64_t served, cache_hits, created, driver_calls;
} tg_vmm;

#if defined(__GNUC__)
#define TG_VMM_HIDDEN __attribute__((visibility("hidden")))
#else
#define TG_VMM_HIDDEN
#endif

/* Turns the path on when the driver and device support it, else records why not; never fails. */
TG_VMM_HIDDEN void tg_vmm_init(tg_vmm *v, int host_backend, int device, int64_t min_bytes);
TG_VMM_HIDDEN int tg_vmm_wants(const tg_vmm *v, int64_t nbytes);
TG_VMM_HIDDEN int64_t tg_vmm_rounded(const tg_vmm *v, int64_t nbytes);
TG_VMM_HIDDEN int64_t tg_vmm_held_bytes(const tg_vmm *v);
/* A mapped range of `size` bytes (a multiple of the granule); new granules only within `room`
 * bytes. TG_OK, TG_ERANGE (room), TG_ENOMEM, TG_ECUDA, or TG_VMM_UNSUPPORTED (path now off). */
TG_VMM_HIDDEN int tg_vmm_alloc(tg_vmm *v, int64_t size, int64_t room, tg_vmm_range **out, int *cu_result);
/* A freed range whose streams are done: kept mapped in the cache. */
TG_VMM_HIDDEN void tg_vmm_cache(tg_vmm *v, tg_vmm_range *r, int *cu_result);
/* Unmaps a range (live at close, or evicted): its granules go to the free list. */
TG_VMM_HIDDEN void tg_vmm_unmap(tg_vmm *v, tg_vmm_range *r, int *cu_result);
/* Unmaps every cached range; unless keep_free, releases every free granule to the driver. */
TG_VMM_HIDDEN void tg_vmm_trim(tg_vmm *v, int keep_free, int *cu_result);
/* Releases everything (live ranges must have been unmapped first) and the bookkeeping. */
TG_VMM_HIDDEN void tg_vmm_close(tg_vmm *v, int *cu_result);

#endif /* TICKGPU_MEM_VMM_H */
