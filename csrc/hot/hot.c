/*
 * hot.c -- the launch-and-wait path: a handful of CUDA driver calls through function pointers.
 *
 * Why C: a cuLaunchKernel through cuda.bindings costs ~12 us round trip, the same call from C
 * ~8.7 us, a graph replay ~6.4 us (DESIGN.md, measured floors). Python's share of a tick is the
 * argument marshalling, so the hot path takes prepared handles and a prepared void*[] and does
 * nothing else. CFFI releases the GIL around every call, so a thread waiting here on the GPU lets
 * the interpreter run.
 *
 * Why dlopen: see libcuda.h (the core builds and imports without CUDA).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tickgpu.h"
#include "copy.h"
#include "libcuda.h"

/* The driver ABI, restated for the few calls used (cuda.h is not needed to build the core). */
typedef int CUresult;
typedef void *CUfunction;
typedef void *CUstream;
typedef void *CUgraphExec;
typedef void *CUevent;
typedef unsigned long long CUdeviceptr;
typedef void *CUgraphNode;
typedef void *CUcontext;

/* CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h, CUDA 12+), the struct cuGraphExecKernelNodeSetParams_v2 takes. */
typedef struct {
    CUfunction func;
    unsigned int grid_x, grid_y, grid_z;
    unsigned int block_x, block_y, block_z;
    unsigned int shared_bytes;
    void **params;
    void **extra;
    void *kern;
    CUcontext ctx;
} kernel_node_params;

typedef CUresult (*fn_launch_kernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned,
                                     unsigned, unsigned, CUstream, void **, void **);
typedef CUresult (*fn_graph_launch)(CUgraphExec, CUstream);
typedef CUresult (*fn_stream_sync)(CUstream);
typedef CUresult (*fn_htod_async)(CUdeviceptr, const void *, size_t, CUstream);
typedef CUresult (*fn_dtoh_async)(void *, CUdeviceptr, size_t, CUstream);
typedef CUresult (*fn_event_record)(CUevent, CUstream);
typedef CUresult (*fn_event_sync)(CUevent);
typedef CUresult (*fn_error_name)(CUresult, const char **);
typedef CUresult (*fn_set_kernel)(CUgraphExec, CUgraphNode, const kernel_node_params *);
typedef CUresult (*fn_set_copy)(CUgraphExec, CUgraphNode, const void *, CUcontext);
typedef CUresult (*fn_ctx_set_current)(CUcontext);

static struct {
    fn_launch_kernel launch_kernel;
    fn_graph_launch graph_launch;
    fn_stream_sync stream_sync;
    fn_htod_async htod_async;
    fn_dtoh_async dtoh_async;
    fn_event_record event_record;
    fn_event_sync event_sync;
    fn_error_name error_name;
    fn_ctx_set_current ctx_set_current;
    fn_set_kernel set_kernel;   /* optional: graph updates fall back to the Python path without */
    fn_set_copy set_copy;
} cu;

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static int init_status = TG_ENODRIVER;

static void hot_load(void)
{
    void *lib = tg_libcuda_open();
    if (lib == NULL)
        return;
    /* The _v2 names are the 64-bit-pointer entry points cuda.h maps the plain names to. */
    cu.launch_kernel = (fn_launch_kernel)dlsym(lib, "cuLaunchKernel");
    cu.graph_launch = (fn_graph_launch)dlsym(lib, "cuGraphLaunch");
    cu.stream_sync = (fn_stream_sync)dlsym(lib, "cuStreamSynchronize");
    cu.htod_async = (fn_htod_async)dlsym(lib, "cuMemcpyHtoDAsync_v2");
    cu.dtoh_async = (fn_dtoh_async)dlsym(lib, "cuMemcpyDtoHAsync_v2");
    cu.event_record = (fn_event_record)dlsym(lib, "cuEventRecord");
    cu.event_sync = (fn_event_sync)dlsym(lib, "cuEventSynchronize");
    cu.error_name = (fn_error_name)dlsym(lib, "cuGetErrorName");
    cu.ctx_set_current = (fn_ctx_set_current)dlsym(lib, "cuCtxSetCurrent");
    cu.set_kernel = (fn_set_kernel)dlsym(lib, "cuGraphExecKernelNodeSetParams_v2");
    cu.set_copy = (fn_set_copy)dlsym(lib, "cuGraphExecMemcpyNodeSetParams");
    if (!cu.launch_kernel || !cu.graph_launch || !cu.stream_sync || !cu.htod_async ||
        !cu.dtoh_async || !cu.event_record || !cu.event_sync || !cu.error_name || !cu.ctx_set_current) {
        memset(&cu, 0, sizeof cu);
        return;   /* the library stays open: closing a driver other code may share is unsafe */
    }
    /* Release: a thread that sees TG_OK without passing through pthread_once (HOT_READY) also
       sees every function pointer stored above. */
    __atomic_store_n(&init_status, TG_OK, __ATOMIC_RELEASE);
}

int tg_hot_init(void)
{
    pthread_once(&init_once, hot_load);
    return __atomic_load_n(&init_status, __ATOMIC_ACQUIRE);
}

const char *tg_hot_error_name(int cu_result)
{
    const char *name = NULL;
    if (tg_hot_init() != TG_OK || cu.error_name(cu_result, &name) != 0 || name == NULL)
        return "CUDA_ERROR_UNRECOGNIZED";
    return name;
}

/* Every entry point: 0 in *cu_result unless the driver refused. */
static inline int report(CUresult r, int *cu_result)
{
    if (cu_result != NULL)
        *cu_result = r;
    return r == 0 ? TG_OK : TG_ECUDA;
}

#define HOT_READY(cu_result)                       \
    do {                                           \
        if (cu_result != NULL)                     \
            *(cu_result) = 0;                      \
        if (__atomic_load_n(&init_status, __ATOMIC_ACQUIRE) != TG_OK && tg_hot_init() != TG_OK) \
            return TG_ENODRIVER;                   \
    } while (0)

/* Every call makes the runtime's context current first: another library on this thread (PyTorch's
 * set_device) may have switched it, and cuCtxSetCurrent is a thread-local store, not a sync. */
int tg_hot_ctx_set_current(uintptr_t ctx, int *cu_result)
{
    HOT_READY(cu_result);
    return report(cu.ctx_set_current((CUcontext)ctx), cu_result);
}

int tg_hot_launch(uintptr_t func, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z,
                  uint32_t block_x, uint32_t block_y, uint32_t block_z, uint32_t shared_bytes,
                  uintptr_t stream, void **params, int *cu_result)
{
    HOT_READY(cu_result);
    if (func == 0 || params == NULL || grid_x == 0 || grid_y == 0 || grid_z == 0 || block_x == 0 ||
        block_y == 0 || block_z == 0)
        return TG_EINVAL;
    return report(cu.launch_kernel((CUfunction)func, grid_x, grid_y, grid_z, block_x, block_y, block_z,
                                   shared_bytes, (CUstream)stream, params, NULL),
                  cu_result);
}

int tg_hot_launch_sync(uintptr_t func, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z,
                       uint32_t block_x, uint32_t block_y, uint32_t block_z, uint32_t shared_bytes,
                       uintptr_t stream, void **params, int *cu_result)
{
    int st = tg_hot_launch(func, grid_x, grid_y, grid_z, block_x, block_y, block_z, shared_bytes, stream,
                           params, cu_result);
    if (st != TG_OK)
        return st;
    return report(cu.stream_sync((CUstream)stream), cu_result);
}

int tg_hot_launch_desc_run(const tg_hot_launch_desc *desc, int sync, int *cu_result)
{
    HOT_READY(cu_result);
    if (desc == NULL)
        return TG_EINVAL;
    if (desc->ctx != 0 && report(cu.ctx_set_current((CUcontext)desc->ctx), cu_result) != TG_OK)
        return TG_ECONTEXT;
    int st = tg_hot_launch(desc->func, desc->grid_x, desc->grid_y, desc->grid_z, desc->block_x, desc->block_y,
                           desc->block_z, desc->shared_bytes, desc->stream, desc->params, cu_result);
    if (st != TG_OK || !sync)
        return st;
    return report(cu.stream_sync((CUstream)desc->stream), cu_result);
}

int tg_hot_graph_launch(uintptr_t graph_exec, uintptr_t stream, int *cu_result)
{
    HOT_READY(cu_result);
    if (graph_exec == 0)
        return TG_EINVAL;
    return report(cu.graph_launch((CUgraphExec)graph_exec, (CUstream)stream), cu_result);
}

int tg_hot_graph_replay(uintptr_t graph_exec, uintptr_t stream, int *cu_result)
{
    int st = tg_hot_graph_launch(graph_exec, stream, cu_result);
    if (st != TG_OK)
        return st;
    return report(cu.stream_sync((CUstream)stream), cu_result);
}

int tg_hot_stream_sync(uintptr_t stream, int *cu_result)
{
    HOT_READY(cu_result);
    return report(cu.stream_sync((CUstream)stream), cu_result);
}

int tg_hot_event_record(uintptr_t event, uintptr_t stream, int *cu_result)
{
    HOT_READY(cu_result);
    if (event == 0)
        return TG_EINVAL;
    return report(cu.event_record((CUevent)event, (CUstream)stream), cu_result);
}

int tg_hot_event_sync(uintptr_t event, int *cu_result)
{
    HOT_READY(cu_result);
    if (event == 0)
        return TG_EINVAL;
    return report(cu.event_sync((CUevent)event), cu_result);
}

int tg_hot_copy_htod_async(uintptr_t dst_device, const void *src_host, size_t bytes, uintptr_t stream,
                           int *cu_result)
{
    HOT_READY(cu_result);
    if ((dst_device == 0 || src_host == NULL) && bytes > 0)
        return TG_EINVAL;
    if (bytes == 0)
        return TG_OK;
    return report(cu.htod_async((CUdeviceptr)dst_device, src_host, bytes, (CUstream)stream), cu_result);
}

int tg_hot_copy_dtoh_async(void *dst_host, uintptr_t src_device, size_t bytes, uintptr_t stream,
                           int *cu_result)
{
    HOT_READY(cu_result);
    if ((dst_host == NULL || src_device == 0) && bytes > 0)
        return TG_EINVAL;
    if (bytes == 0)
        return TG_OK;
    return report(cu.dtoh_async(dst_host, (CUdeviceptr)src_device, bytes, (CUstream)stream), cu_result);
}

int tg_hot_graph_set_kernel(uintptr_t graph_exec, uintptr_t node, uintptr_t func, uint32_t grid_x,
                            uint32_t grid_y, uint32_t grid_z, uint32_t block_x, uint32_t block_y,
                            uint32_t block_z, uint32_t shared_bytes, void **params, int *cu_result)
{
    HOT_READY(cu_result);
    if (cu.set_kernel == NULL)
        return TG_ENODRIVER;
    if (graph_exec == 0 || node == 0 || func == 0 || params == NULL || grid_x == 0 || grid_y == 0 ||
        grid_z == 0 || block_x == 0 || block_y == 0 || block_z == 0)
        return TG_EINVAL;
    kernel_node_params p = {(CUfunction)func, grid_x, grid_y, grid_z, block_x, block_y, block_z,
                            shared_bytes, params, NULL, NULL, NULL};
    return report(cu.set_kernel((CUgraphExec)graph_exec, (CUgraphNode)node, &p), cu_result);
}

int tg_hot_graph_set_copy(uintptr_t graph_exec, uintptr_t node, const void *copy_params, uintptr_t ctx,
                          int *cu_result)
{
    HOT_READY(cu_result);
    if (cu.set_copy == NULL)
        return TG_ENODRIVER;
    if (graph_exec == 0 || node == 0 || copy_params == NULL)
        return TG_EINVAL;
    return report(cu.set_copy((CUgraphExec)graph_exec, (CUgraphNode)node, copy_params, (CUcontext)ctx),
                  cu_result);
}

/* One tick: the caller's inputs into pinned staging, the graph (H2D copies, kernel, D2H copies)
 * replayed, then the results out of pinned staging into the caller's arrays. */
int tg_hot_roundtrip_begin(const tg_hot_copy *in, int n_in, uintptr_t graph_exec, uintptr_t stream,
                           int *cu_result)
{
    HOT_READY(cu_result);
    if (graph_exec == 0)
        return TG_EINVAL;
    int st = tg_hot_stage(in, n_in);
    if (st != TG_OK)
        return st;
    return tg_hot_graph_launch(graph_exec, stream, cu_result);
}

int tg_hot_roundtrip_end(uintptr_t stream, const tg_hot_copy *out, int n_out, int *cu_result)
{
    HOT_READY(cu_result);
    /* An out list that cannot be copied is refused after the wait: the graph launched by begin is
     * waited for whatever the list holds. */
    int st = report(cu.stream_sync((CUstream)stream), cu_result);
    if (st != TG_OK)
        return st;
    return tg_hot_stage(out, n_out);
}

int tg_hot_roundtrip(const tg_hot_copy *in, int n_in, uintptr_t graph_exec, uintptr_t stream,
                     const tg_hot_copy *out, int n_out, int *cu_result)
{
    HOT_READY(cu_result);
    if (graph_exec == 0 || copy_list_check(out, n_out) != TG_OK)
        return TG_EINVAL;
    int st = tg_hot_roundtrip_begin(in, n_in, graph_exec, stream, cu_result);
    if (st != TG_OK)
        return st;
    return tg_hot_roundtrip_end(stream, out, n_out, cu_result);
}

/* Many chunks through a few graph runners, host copies overlapping the GPU (see tickgpu.h). */
int tg_hot_pipeline(const tg_hot_chunk *chunks, int n_chunks, int *cu_result)
{
    HOT_READY(cu_result);
    if (n_chunks < 0 || (n_chunks > 0 && chunks == NULL))
        return TG_EINVAL;
    for (int k = 0; k < n_chunks; k++)
        if (chunks[k].graph_exec == 0 || copy_list_check(chunks[k].copies_in, chunks[k].n_in) != TG_OK ||
            copy_list_check(chunks[k].copies_out, chunks[k].n_out) != TG_OK)
            return TG_EINVAL;
    int collected = 0, launched = 0, st = TG_OK;
    copy_job job;
    for (int k = 0; k < n_chunks; k++) {
        const tg_hot_chunk *c = &chunks[k];
        /* The chunk's runner (its stream and staging) must be free: collect, in order, every chunk
         * up to the last one queued on the same stream. */
        int upto = -1;
        for (int j = collected; j < k; j++)
            if (chunks[j].stream == c->stream)
                upto = j;
        job.lists = 0;
        job.total = 0;
        for (int j = collected; j <= upto; j++) {
            st = report(cu.stream_sync((CUstream)chunks[j].stream), cu_result);
            if (st != TG_OK)
                goto fail;
            copy_job_add(&job, chunks[j].copies_out, chunks[j].n_out);
        }
        if (upto >= 0)
            collected = upto + 1;
        /* Results of the chunks collected and this chunk's inputs: one job for the copy threads. */
        copy_job_add(&job, c->copies_in, c->n_in);
        copy_job_run(&job);
        st = report(cu.graph_launch((CUgraphExec)c->graph_exec, (CUstream)c->stream), cu_result);
        if (st != TG_OK)
            goto fail;
        launched = k + 1;
    }
    job.lists = 0;
    job.total = 0;
    for (int j = collected; j < launched; j++) {
        st = report(cu.stream_sync((CUstream)chunks[j].stream), cu_result);
        if (st != TG_OK)
            goto fail;
        copy_job_add(&job, chunks[j].copies_out, chunks[j].n_out);
    }
    copy_job_run(&job);
    return TG_OK;
fail:
    /* Leave no copy in flight into staging that the next call reuses; the first error is kept. */
    for (int j = collected; j < launched; j++)
        cu.stream_sync((CUstream)chunks[j].stream);
    return st;
}
