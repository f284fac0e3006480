/*
 * vmm.c -- the device pool's large-block path (declarations and the why: vmm.h; the pool: devpool.c).
 *
 * Why a separate path for large blocks: the driver's stream-ordered pool cannot give back a hole
 * inside one of its own OS allocations while another buffer there is live, so a churn that frees
 * every other 4 MB buffer and then asks for 1 GiB makes it grow by the whole 1 GiB. Measured on an
 * H200 (src/tickgpu/bench/memory_device.py, churn workload): peak reserved 4.93 GB for a peak in
 * use of 3.76 GB, 76 % utilization; cuMemPoolTrimTo changed nothing. Here the holes are granules
 * that can be mapped anywhere, so the 1 GiB request is served from them.
 *
 * Driver calls go through a table of its own, loaded as devpool.c's (csrc/hot/libcuda.h: the core
 * builds without CUDA); the VMM symbols are optional: without them the pool keeps its level 2.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tickgpu.h"
#include "hot/libcuda.h"
#include "vmm.h"

/* ---- The driver ABI, restated from cuda.h (CUDA 12/13) for the calls used ------------------ */
typedef int CUresult;
typedef unsigned long long CUdeviceptr;
typedef int CUdevice;
typedef unsigned long long CUmemGenericAllocationHandle;

typedef struct {                /* CUmemLocation_v1: 8 bytes */
    int type;                   /* CU_MEM_LOCATION_TYPE_DEVICE = 1 */
    int id;                     /* the device ordinal */
} cu_mem_location;

typedef struct {                /* CUmemAllocationProp_v1: 32 bytes; location at 8, allocFlags at 24 */
    int type;                   /* CU_MEM_ALLOCATION_TYPE_PINNED = 1 */
    int requested_handle_types; /* CU_MEM_HANDLE_TYPE_NONE = 0 */
    cu_mem_location location;
    void *win32_handle_meta_data;
    unsigned char compression_type;
    unsigned char gpu_direct_rdma_capable;
    unsigned short usage;
    unsigned char reserved[4];
} cu_alloc_prop;

typedef struct {                /* CUmemAccessDesc_v1: 12 bytes; flags at 8 */
    cu_mem_location location;
    int flags;                  /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE = 3 */
} cu_access_desc;

_Static_assert(sizeof(cu_alloc_prop) == 32, "CUmemAllocationProp is 32 bytes in cuda.h");
_Static_assert(offsetof(cu_alloc_prop, win32_handle_meta_data) == 16, "CUmemAllocationProp layout");
_Static_assert(offsetof(cu_alloc_prop, usage) == 26, "CUmemAllocationProp layout");
_Static_assert(sizeof(cu_access_desc) == 12, "CUmemAccessDesc is 12 bytes in cuda.h");

enum {
    VCU_OUT_OF_MEMORY = 2,              /* CUDA_ERROR_OUT_OF_MEMORY */
    VCU_NOT_SUPPORTED = 801,            /* CUDA_ERROR_NOT_SUPPORTED */
    VCU_ATTR_VMM_SUPPORTED = 102,       /* CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED */
    VCU_ALLOC_PINNED = 1,               /* CU_MEM_ALLOCATION_TYPE_PINNED */
    VCU_LOCATION_DEVICE = 1,            /* CU_MEM_LOCATION_TYPE_DEVICE */
    VCU_PROT_READWRITE = 3,             /* CU_MEM_ACCESS_FLAGS_PROT_READWRITE */
    VCU_GRANULARITY_MINIMUM = 0         /* CU_MEM_ALLOC_GRANULARITY_MINIMUM */
};

static struct {
    CUresult (*device_get)(CUdevice *, int);
    CUresult (*device_get_attribute)(int *, int, CUdevice);
    CUresult (*get_granularity)(size_t *, const cu_alloc_prop *, int);
    CUresult (*create)(CUmemGenericAllocationHandle *, size_t, const cu_alloc_prop *, unsigned long long);
    CUresult (*release)(CUmemGenericAllocationHandle);
    CUresult (*address_reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long);
    CUresult (*address_free)(CUdeviceptr, size_t);
    CUresult (*map)(CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle, unsigned long long);
    CUresult (*unmap)(CUdeviceptr, size_t);
    CUresult (*set_access)(CUdeviceptr, size_t, const cu_access_desc *, size_t);
} vcu;

static pthread_once_t vcu_once = PTHREAD_ONCE_INIT;
static int vcu_status = TG_ENODRIVER;

/* The driver's names of the entries of `vcu`, in its field order. */
static const char *const vcu_names[] = {
    "cuDeviceGet", "cuDeviceGetAttribute", "cuMemGetAllocationGranularity", "cuMemCreate", "cuMemRelease",
    "cuMemAddressReserve", "cuMemAddressFree", "cuMemMap", "cuMemUnmap", "cuMemSetAccess",
};
_Static_assert(sizeof vcu == sizeof vcu_names / sizeof vcu_names[0] * sizeof(void *), "a name per entry of vcu");

static void vcu_load(void)
{
    if (tg_libcuda_load(&vcu, vcu_names, sizeof vcu_names / sizeof vcu_names[0]) == 0)
        __atomic_store_n(&vcu_status, TG_OK, __ATOMIC_RELEASE);
}

static int vmm_report(tg_vmm *v, CUresult r, int *cu_result)
{
    v->driver_calls++;
    if (cu_result != NULL && r != 0)
        *cu_result = r;
    if (r == 0)
        return TG_OK;
    if (r == VCU_NOT_SUPPORTED)
        return TG_VMM_UNSUPPORTED;
    return r == VCU_OUT_OF_MEMORY ? TG_ENOMEM : TG_ECUDA;
}

static void vmm_off(tg_vmm *v, const char *why, CUresult r)
{
    if (r != 0)
        snprintf(v->reason, sizeof v->reason, "%.80s (%s%d)", why,
                 r == VCU_NOT_SUPPORTED ? "CUDA_ERROR_NOT_SUPPORTED = " : "CUresult ", r);
    else
        snprintf(v->reason, sizeof v->reason, "%s", why);
    __atomic_store_n(&v->enabled, 0, __ATOMIC_RELAXED);
}

static cu_alloc_prop device_prop(const tg_vmm *v)
{
    cu_alloc_prop prop;
    memset(&prop, 0, sizeof prop);
    prop.type = VCU_ALLOC_PINNED;
    prop.location.type = VCU_LOCATION_DEVICE;
    prop.location.id = v->device;
    return prop;
}

void tg_vmm_init(tg_vmm *v, int host_backend, int device, int64_t min_bytes)
{
    memset(v, 0, sizeof *v);
    v->device = device;
    v->min_bytes = min_bytes == 0 ? TG_VMM_DEFAULT_MIN_BYTES : min_bytes;
    if (min_bytes < 0) {
        vmm_off(v, "turned off (vmm_min_bytes < 0)", 0);
        return;
    }
    if (host_backend) {
        vmm_off(v, "host backend: no virtual memory management", 0);
        return;
    }
    pthread_once(&vcu_once, vcu_load);
    if (__atomic_load_n(&vcu_status, __ATOMIC_ACQUIRE) != TG_OK) {
        vmm_off(v, "the driver lacks the virtual memory management calls (cuMemCreate, cuMemMap, ...)", 0);
        return;
    }
    CUdevice dev = 0;
    int supported = 0;
    CUresult r = vcu.device_get(&dev, device);
    if (r == 0)
        r = vcu.device_get_attribute(&supported, VCU_ATTR_VMM_SUPPORTED, dev);
    if (r != 0) {
        vmm_off(v, "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED) failed", r);
        return;
    }
    if (!supported) {
        vmm_off(v, "the device does not support virtual memory management", 0);
        return;
    }
    size_t g = 0;
    cu_alloc_prop prop = device_prop(v);
    r = vcu.get_granularity(&g, &prop, VCU_GRANULARITY_MINIMUM);
    if (r != 0 || g == 0) {
        vmm_off(v, "cuMemGetAllocationGranularity failed", r);
        return;
    }
    v->granule = (int64_t)g;
    __atomic_store_n(&v->enabled, 1, __ATOMIC_RELAXED);
}

int tg_vmm_wants(const tg_vmm *v, int64_t nbytes)
{
    return __atomic_load_n(&v->enabled, __ATOMIC_RELAXED) && nbytes >= v->min_bytes;
}

int64_t tg_vmm_rounded(const tg_vmm *v, int64_t nbytes)
{
    return (nbytes + v->granule - 1) / v->granule * v->granule;
}

int64_t tg_vmm_held_bytes(const tg_vmm *v) { return v->held * v->granule; }

/* ---- The cache of mapped ranges ---------------------------------------------------------------
 * A flat array of buckets, searched linearly: distinct large sizes in flight are few (tens), and
 * a bucket that empties is removed so the array does not keep every size ever seen. */
static tg_vmm_bucket *bucket_of(tg_vmm *v, int64_t size)
{
    for (int64_t i = 0; i < v->nbuckets; i++)
        if (v->buckets[i].size == size)
            return &v->buckets[i];
    return NULL;
}

static tg_vmm_range *cache_take(tg_vmm *v, tg_vmm_bucket *b)
{
    tg_vmm_range *r = b->head;
    b->head = r->next;
    r->next = NULL;
    v->cached_ranges--;
    v->cached_granules -= r->ngranules;
    if (b->head == NULL)
        *b = v->buckets[--v->nbuckets];     /* swap-remove the emptied bucket */
    return r;
}

void tg_vmm_unmap(tg_vmm *v, tg_vmm_range *r, int *cu_result)
{
    /* One cuMemUnmap per granule: the driver unmaps whole mappings, each granule being one. */
    for (int64_t i = 0; i < r->ngranules; i++) {
        vmm_report(v, vcu.unmap((CUdeviceptr)(r->va + (uintptr_t)(i * v->granule)), (size_t)v->granule), cu_result);
        v->free_handles[v->nfree++] = r->handles[i];
    }
    vmm_report(v, vcu.address_free((CUdeviceptr)r->va, (size_t)r->size), cu_result);
    free(r);
}

/* Unmaps cached ranges until `need` granules are free, smallest sizes first: a small range is the
 * cheapest to rebuild, a large one costs a map per granule. */
static void evict_until(tg_vmm *v, int64_t need, int *cu_result)
{
    while (v->nfree < need && v->nbuckets > 0) {
        int64_t best = 0;
        for (int64_t i = 1; i < v->nbuckets; i++)
            if (v->buckets[i].size < v->buckets[best].size)
                best = i;
        tg_vmm_unmap(v, cache_take(v, &v->buckets[best]), cu_result);
    }
}

void tg_vmm_cache(tg_vmm *v, tg_vmm_range *r, int *cu_result)
{
    tg_vmm_bucket *b = bucket_of(v, r->size);
    if (b == NULL) {
        if (v->nbuckets == v->capbuckets) {
            int64_t n = v->capbuckets ? v->capbuckets * 2 : 16;
            tg_vmm_bucket *more = realloc(v->buckets, (size_t)n * sizeof *more);
            if (more == NULL) {             /* no room to cache it: unmap it instead */
                tg_vmm_unmap(v, r, cu_result);
                return;
            }
            v->buckets = more;
            v->capbuckets = n;
        }
        b = &v->buckets[v->nbuckets++];
        *b = (tg_vmm_bucket){r->size, NULL};
    }
    r->next = b->head;
    b->head = r;
    v->cached_ranges++;
    v->cached_granules += r->ngranules;
}

/* ---- Allocation --------------------------------------------------------------------------------- */
static int grow_free_list(tg_vmm *v, int64_t held)
{
    if (held <= v->capfree)
        return TG_OK;
    int64_t n = v->capfree ? v->capfree : 64;
    while (n < held)
        n *= 2;
    unsigned long long *more = realloc(v->free_handles, (size_t)n * sizeof *more);
    if (more == NULL)
        return TG_ENOMEM;
    v->free_handles = more;
    v->capfree = n;
    return TG_OK;
}

int tg_vmm_alloc(tg_vmm *v, int64_t size, int64_t room, tg_vmm_range **out, int *cu_result)
{
    *out = NULL;
    tg_vmm_bucket *b = bucket_of(v, size);
    if (b != NULL) {                    /* the fast path: a cached range, still mapped */
        *out = cache_take(v, b);
        v->served++;
        v->cache_hits++;
        return TG_OK;
    }
    int64_t need = size / v->granule;
    tg_vmm_range *r = malloc(sizeof *r + (size_t)need * sizeof(unsigned long long));
    if (r == NULL)
        return TG_ENOMEM;
    evict_until(v, need, cu_result);
    int64_t create = need > v->nfree ? need - v->nfree : 0;
    if (create * v->granule > room) {
        free(r);
        return TG_ERANGE;
    }
    int st = grow_free_list(v, v->held + create);
    cu_alloc_prop prop = device_prop(v);
    for (int64_t i = 0; i < create && st == TG_OK; i++) {
        CUmemGenericAllocationHandle h = 0;
        st = vmm_report(v, vcu.create(&h, (size_t)v->granule, &prop, 0), cu_result);
        if (st == TG_OK) {
            v->free_handles[v->nfree++] = h;
            v->held++;
            v->created++;
        }
    }
    CUdeviceptr va = 0;
    if (st == TG_OK)
        st = vmm_report(v, vcu.address_reserve(&va, (size_t)size, (size_t)v->granule, 0, 0), cu_result);
    if (st != TG_OK) {                  /* granules made so far stay on the free list */
        free(r);
        if (st == TG_VMM_UNSUPPORTED)
            vmm_off(v, "cuMemCreate or cuMemAddressReserve refused", VCU_NOT_SUPPORTED);
        return st;
    }
    r->next = NULL;
    r->va = (uintptr_t)va;
    r->size = size;
    r->ngranules = 0;
    for (int64_t i = 0; i < need && st == TG_OK; i++) {
        unsigned long long h = v->free_handles[--v->nfree];
        st = vmm_report(v, vcu.map(va + (CUdeviceptr)(i * v->granule), (size_t)v->granule, 0, h, 0), cu_result);
        if (st == TG_OK)
            r->handles[r->ngranules++] = h;
        else
            v->free_handles[v->nfree++] = h;
    }
    if (st == TG_OK) {
        /* Access once for the whole range: mapping alone does not make memory accessible. */
        cu_access_desc desc = {{VCU_LOCATION_DEVICE, v->device}, VCU_PROT_READWRITE};
        st = vmm_report(v, vcu.set_access(va, (size_t)size, &desc, 1), cu_result);
    }
    if (st != TG_OK) {
        int64_t mapped = r->ngranules;
        for (int64_t i = 0; i < mapped; i++) {
            vmm_report(v, vcu.unmap(va + (CUdeviceptr)(i * v->granule), (size_t)v->granule), NULL);
            v->free_handles[v->nfree++] = r->handles[i];
        }
        vmm_report(v, vcu.address_free(va, (size_t)size), NULL);
        free(r);
        if (st == TG_VMM_UNSUPPORTED)
            vmm_off(v, "cuMemMap or cuMemSetAccess refused", VCU_NOT_SUPPORTED);
        return st;
    }
    v->served++;
    *out = r;
    return TG_OK;
}

/* ---- Trim and close ------------------------------------------------------------------------------ */
void tg_vmm_trim(tg_vmm *v, int keep_free, int *cu_result)
{
    while (v->nbuckets > 0)
        tg_vmm_unmap(v, cache_take(v, &v->buckets[v->nbuckets - 1]), cu_result);
    if (keep_free)
        return;
    while (v->nfree > 0) {
        vmm_report(v, vcu.release(v->free_handles[--v->nfree]), cu_result);
        v->held--;
    }
}

void tg_vmm_close(tg_vmm *v, int *cu_result)
{
    tg_vmm_trim(v, 0, cu_result);
    free(v->free_handles);
    free(v->buckets);
    v->free_handles = NULL;
    v->buckets = NULL;
    v->nfree = v->capfree = v->nbuckets = v->capbuckets = 0;
}
