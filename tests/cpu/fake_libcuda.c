/*
 * fake_libcuda.c -- just enough of libcuda.so.1 for tickgpu's C hot path (csrc/hot/hot.c) to run
 * on a machine without a GPU, so that its round trip and pipeline are tested for real.
 *
 * A "graph exec" handle is the address of a fake_graph the test builds: a list of copies that a
 * launch performs at once (standing in for H2D copy -> kernel -> D2H copy), and an optional
 * failure. Streams are opaque numbers. Every launch and synchronisation is logged, so a test can
 * check the order of events (a runner's staging reused only after its stream was waited for).
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

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

int cuStreamSynchronize(void *stream)
{
    record(2, (uintptr_t)stream);
    return 0;
}

int cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                   unsigned shared, void *stream, void **params, void **extra)
{
    return 0;
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

int cuEventRecord(void *event, void *stream) { return 0; }
int cuEventSynchronize(void *event) { return 0; }
int cuCtxSetCurrent(void *ctx) { return 0; }

int cuGetErrorName(int code, const char **name)
{
    *name = code == 719 ? "CUDA_ERROR_LAUNCH_FAILED" : "CUDA_ERROR_UNKNOWN";
    return 0;
}
