/*
 * mailbox.cu -- resident (persistent) Black-Scholes-Merton greeks: a kernel that stays on the
 * GPU and answers requests posted in a mailbox of mapped pinned host memory, so that a call from
 * the host costs no launch at all (layout and rules: csrc/hot/mailbox_protocol.h; host side:
 * csrc/hot/mailbox.c; Python owner: tickgpu.runtime.mailbox).
 *
 * The greeks are the project's one implementation, csrc/cpu/greeks_kernel.h, compiled here as
 * device code: the same source lines the CPU backend runs, in the same order (results differ from
 * the CPU's only by the device's libm and FMA contraction).
 *
 * Launch: grid (blocks, 1, 1) with blocks >= 1 (a few: each block polls the mailbox over PCIe,
 * and one request of a few thousand options needs no more), block (TG_MB_BLOCK, 1, 1), on a
 * stream of its own. TG_MB_BLOCK is 1,024: a request of up to 1,024 options reads its inputs
 * across PCIe in one round, not one per 256 (float64 then keeps 64 registers a thread and spills
 * ~250 bytes, which costs less than a round trip). Arguments:
 *   box     device address of the mailbox (cuMemHostGetDevicePointer of the mapped allocation)
 *   arrive  two zeroed uint32 in device memory: [0] counts the blocks done with the current
 *           request (the last one to arrive publishes the answer), [1] is block 0's "stop" flag
 *           to the others when it returns on idle. The host zeroes both before every launch.
 *
 * Per request, each block: its thread 0 polls (seq, ctl) with one 16-byte volatile load; on a
 * new seq whose ctl carries its tag, an acquire fence (n and the input mask came with the poll);
 * the block's threads compute options blockIdx.x * blockDim.x + threadIdx.x, strided by the grid,
 * write status and served (every block the same values) and make it all visible system-wide;
 * thread 0 then takes a ticket from arrive[0]; the last block resets it and writes `done` with
 * release ordering (a lone block: straight after the fence). Per request the link carries the
 * poll, the inputs, the outputs and `done`, with one system-scope fence before `done`: each
 * extra read of mapped memory or fence waited on is a PCIe round trip (~1 us). Idle for longer
 * than spin_ns, the poll sleeps (__nanosleep, doubling up to sleep_max_ns) so that an idle
 * mailbox costs the link and the SM little; idle for idle_timeout_ns (globaltimer), block 0
 * returns and tells the others to, so a forgotten mailbox never holds SMs for ever.
 */
#include <stdint.h>
#include <math.h>

#include "../hot/mailbox_protocol.h"

#ifndef TG_MB_BLOCK
#define TG_MB_BLOCK 1024
#endif

/* Each dtype's instantiation of the greeks kernel, under one overloaded name for the template
   below (a build for one dtype compiles only that one). */
#ifndef TG_MB_ONLY_F32
#define REAL double
#define M(name) name
#define C(x) (x)
#define KERNEL_ELEMENT greeks_element_f64
#define KERNEL_LIMIT greeks_limit_f64
#include "../cpu/greeks_kernel.h"
#undef REAL
#undef M
#undef C
#undef KERNEL_ELEMENT
#undef KERNEL_LIMIT

__device__ static inline int greeks_element(double S, double K, double t, double r, double sig, double q,
                                            double w, double *o)
{
    return greeks_element_f64(S, K, t, r, sig, q, w, o);
}
__device__ static inline void greeks_limit(double S, double K, double t, double r, double sig, double q,
                                           double w, double *o)
{
    greeks_limit_f64(S, K, t, r, sig, q, w, o);
}
#endif

#ifndef TG_MB_ONLY_F64
#define REAL float
#define M(name) name##f
#define C(x) (x##f)
#define KERNEL_ELEMENT greeks_element_f32
#define KERNEL_LIMIT greeks_limit_f32
#include "../cpu/greeks_kernel.h"
#undef REAL
#undef M
#undef C
#undef KERNEL_ELEMENT
#undef KERNEL_LIMIT

__device__ static inline int greeks_element(float S, float K, float t, float r, float sig, float q,
                                            float w, float *o)
{
    return greeks_element_f32(S, K, t, r, sig, q, w, o);
}
__device__ static inline void greeks_limit(float S, float K, float t, float r, float sig, float q,
                                           float w, float *o)
{
    greeks_limit_f32(S, K, t, r, sig, q, w, o);
}
#endif

__device__ static inline uint64_t globaltimer_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* fence.acq_rel at system scope: with a relaxed (volatile) load before it, an acquire; with a
   relaxed store after it, a release -- each paired with the host's atomics (mailbox.c). */
__device__ static inline void fence_acq_rel_sys(void)
{
    asm volatile("fence.acq_rel.sys;" ::: "memory");
}

/* seq and ctl in one 16-byte volatile load: one PCIe read per poll, not two. Each 8-byte half is
   read whole; the two halves need not be one snapshot, which ctl's seq tag detects. */
__device__ static inline void poll_request(volatile tg_mb_request *req, uint64_t *seq, uint64_t *ctl)
{
    asm volatile("ld.volatile.v2.u64 {%0, %1}, [%2];" : "=l"(*seq), "=l"(*ctl) : "l"(req) : "memory");
}

template <typename REAL>
__device__ static void serve(tg_mb_header *box, unsigned int *arrive)
{
    __shared__ uint64_t s_seq, s_ctl;
    __shared__ int s_go;

    volatile tg_mb_request *req = &box->request;
    volatile tg_mb_response *resp = &box->response;
    /* The config was written before the launch, and a launch orders the host's earlier writes
       before the kernel: plain loads see it. */
    const tg_mb_config cfg = box->config;
    if (cfg.magic != TG_MB_MAGIC || cfg.version != TG_MB_VERSION || cfg.elem_size != sizeof(REAL)
        || cfg.capacity < 1 || cfg.capacity > TG_MB_MAX_CAPACITY) {
        if (blockIdx.x == 0 && threadIdx.x == 0) {
            resp->status = TG_MB_STATUS_BAD_CONFIG;
            /* NOTE: release: the status is visible before the exit it explains. */
            fence_acq_rel_sys();
            resp->exited = TG_MB_EXIT_CONFIG;
        }
        return;
    }
    const uint64_t cap = cfg.capacity;
    unsigned char *base = (unsigned char *)box;
    const REAL *in[TG_MB_REALS];
    for (int k = 0; k < TG_MB_REALS; k++)
        in[k] = (const REAL *)(base + tg_mb_input_offset(k, cap, sizeof(REAL)));
    const unsigned char *call = base + tg_mb_input_offset(TG_MB_REALS, cap, sizeof(REAL));
    REAL *out = (REAL *)(base + tg_mb_output_offset(cap, sizeof(REAL)));
    volatile unsigned int *stop = arrive + 1;
    const unsigned int sleep_max = cfg.sleep_max_ns;

    /* A relaunched kernel starts from the last answer; anything after it is a request to serve. */
    uint64_t last = resp->done;
    uint64_t served = 0;   /* requests answered since the launch: every block sees every one */
    for (;;) {
        if (threadIdx.x == 0) {
            int go = 0;
            uint64_t seq = last, ctl = 0;
            const uint64_t idle_from = globaltimer_ns();
            unsigned int sleep_ns = 0;
            for (;;) {
                if (blockIdx.x != 0 && *stop)
                    break;                            /* block 0 returned on idle: so do we */
                uint64_t w_seq, w_ctl;
                poll_request(req, &w_seq, &w_ctl);
                if (w_ctl & TG_MB_CTL_QUIT)
                    break;                            /* quit */
                if (w_seq != last && tg_mb_ctl_matches(w_ctl, w_seq)) {
                    seq = w_seq;
                    ctl = w_ctl;
                    go = 1;
                    break;
                }
                const uint64_t idle = globaltimer_ns() - idle_from;
                if (blockIdx.x == 0 && cfg.idle_timeout_ns != 0 && idle > cfg.idle_timeout_ns) {
                    *stop = 1u;
                    /* NOTE: the stop flag (device memory) reaches the other blocks before the host
                       can see `exited` and relaunch; the host zeroes it, stream-ordered, for the
                       next launch. */
                    __threadfence();
                    resp->exited = TG_MB_EXIT_IDLE;
                    /* NOTE: push the exit to the host now rather than whenever the write drains. */
                    __threadfence_system();
                    break;
                }
                if (idle > cfg.spin_ns) {
                    __nanosleep(sleep_ns);
                    sleep_ns = sleep_ns == 0 ? 32 : (2 * sleep_ns < sleep_max ? 2 * sleep_ns : sleep_max);
                }
            }
            if (go) {
                /* NOTE: acquire: pairs with the host's release of seq (mailbox.c), so the inputs
                   read after this are the ones written before that seq (and ctl, tagged with
                   it, is its own). The __syncthreads below carries the ordering to the block's
                   other threads. */
                fence_acq_rel_sys();
                s_seq = seq;
                s_ctl = ctl;
            }
            s_go = go;
        }
        __syncthreads();
        if (!s_go)
            return;
        const uint64_t seq = s_seq;
        const uint32_t n = tg_mb_ctl_n(s_ctl), mask = tg_mb_ctl_mask(s_ctl);
        last = seq;
        served++;
        const uint32_t status = (n >= 1 && n <= cap) ? TG_MB_STATUS_OK : TG_MB_STATUS_BAD_REQUEST;
        if (status == TG_MB_STATUS_OK) {
            for (uint32_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
                REAL v[TG_MB_INPUTS - 1];
                /* __ldcv: fetched again on every request, never from a line an earlier request
                   left in L1 (each input is read once per request, so caching would buy nothing). */
                for (int k = 0; k < TG_MB_REALS; k++)
                    v[k] = __ldcv(in[k] + (((mask >> k) & 1u) ? i : 0u));
                const unsigned char flag = __ldcv(call + (((mask >> TG_MB_REALS) & 1u) ? i : 0u));
                const REAL w = flag ? (REAL)1 : (REAL)-1;
                REAL o[TG_MB_OUTPUTS];
                if (greeks_element(v[0], v[1], v[2], v[3], v[4], v[5], w, o))
                    greeks_limit(v[0], v[1], v[2], v[3], v[4], v[5], w, o);
                /* The answer is a (10, n) block: output k of option i at k * n + i. */
                for (int k = 0; k < TG_MB_OUTPUTS; k++)
                    out[(size_t)k * n + i] = o[k];
            }
        }
        if (threadIdx.x == 0) {
            /* Known before the answer, the same in every block: written with the outputs, under
               the one fence below, never read back across the link. */
            resp->status = status;
            resp->served = served;
        }
        /* NOTE: every thread's outputs (and thread 0's status) are visible system-wide before its
           block takes a ticket, so `done` cannot overtake any block's outputs on the way to the
           host. */
        __threadfence_system();
        __syncthreads();
        if (threadIdx.x == 0) {
            if (gridDim.x == 1) {
                /* NOTE: release: the fence above and the barrier order every thread's writes before
                   this store (the fence is cumulative): no ticket, no second fence. */
                resp->done = seq;
            } else {
                const unsigned int ticket = atomicAdd(&arrive[0], 1u);
                if (ticket == gridDim.x - 1) {
                    /* The last block: no block takes a ticket again before the next request, which
                       the host posts only after it has seen the `done` below. */
                    atomicExch(&arrive[0], 0u);
                    /* NOTE: acquire the other blocks' arrivals (and with them their fenced writes),
                       release them before `done`; this block's own writes are fenced already. */
                    fence_acq_rel_sys();
                    resp->done = seq;
                }
            }
        }
        /* s_seq and s_ctl were read by every thread before the __syncthreads above, so thread 0
           may overwrite them in its next poll. */
    }
}

#ifndef TG_MB_ONLY_F32
extern "C" __global__ void __launch_bounds__(TG_MB_BLOCK)
tg_resident_greeks_f64_kernel(tg_mb_header *box, unsigned int *arrive)
{
    serve<double>(box, arrive);
}
#endif

#ifndef TG_MB_ONLY_F64
extern "C" __global__ void __launch_bounds__(TG_MB_BLOCK)
tg_resident_greeks_f32_kernel(tg_mb_header *box, unsigned int *arrive)
{
    serve<float>(box, arrive);
}
#endif
