/*
 * resident.cuh -- device-side pieces every resident (persistent) kernel shares: the clock, the
 * system-scope fence, and the wait for the next request in a mailbox (layout and rules:
 * csrc/hot/mailbox_protocol.h). Included by csrc/cuda/mailbox.cu (greeks) and
 * csrc/cuda/resident_mlp.cu (quantized models).
 */
#ifndef TICKGPU_RESIDENT_CUH
#define TICKGPU_RESIDENT_CUH

#include <stdint.h>

#include "../hot/mailbox_protocol.h"

__device__ static inline uint64_t tg_globaltimer_ns(void)
{
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

/* fence.acq_rel at system scope: with a relaxed (volatile) load before it, an acquire; with a
   relaxed store after it, a release -- each paired with the host's atomics (mailbox.c). */
__device__ static inline void tg_fence_acq_rel_sys(void)
{
    asm volatile("fence.acq_rel.sys;" ::: "memory");
}

/* seq and ctl in one 16-byte volatile load: one PCIe read per poll, not two. Each 8-byte half is
   read whole; the two halves need not be one snapshot, which ctl's seq tag detects. */
__device__ static inline void tg_mb_poll(volatile tg_mb_request *req, uint64_t *seq, uint64_t *ctl)
{
    asm volatile("ld.volatile.v2.u64 {%0, %1}, [%2];" : "=l"(*seq), "=l"(*ctl) : "l"(req) : "memory");
}

/* Polling that backs off: flat out for cfg.spin_ns after `from`, then __nanosleep doubling up to
   cfg.sleep_max_ns, so that an idle kernel costs the link and the SM little. */
struct tg_backoff {
    uint64_t from;
    unsigned int sleep_ns;
};

__device__ static inline tg_backoff tg_backoff_start(void)
{
    tg_backoff b = {tg_globaltimer_ns(), 0u};
    return b;
}

/* One pause; returns the nanoseconds idle since the start. */
__device__ static inline uint64_t tg_backoff_pause(tg_backoff *b, const tg_mb_config &cfg)
{
    const uint64_t idle = tg_globaltimer_ns() - b->from;
    if (idle > cfg.spin_ns) {
        __nanosleep(b->sleep_ns);
        const unsigned int most = cfg.sleep_max_ns;
        b->sleep_ns = b->sleep_ns == 0 ? 32 : (2 * b->sleep_ns < most ? 2 * b->sleep_ns : most);
    }
    return idle;
}

/* Thread 0 of a polling block: wait for the request after `last`. Returns 1 with *seq and *ctl of
 * a new request, acquired (the inputs the host wrote before it are visible to loads after this and,
 * through a __syncthreads, to the block's other threads); 0 when the kernel must return: quit was
 * asked, or `*stop` was set (watched unless `times_out`), or, where `times_out`, no request came for
 * cfg.idle_timeout_ns (nonzero): this block then sets `*stop` for the others and writes `exited`. */
__device__ static inline int tg_mb_wait_request(tg_mb_header *box, const tg_mb_config &cfg, uint64_t last,
                                                volatile unsigned int *stop, bool times_out, uint64_t *seq,
                                                uint64_t *ctl)
{
    volatile tg_mb_request *req = &box->request;
    tg_backoff b = tg_backoff_start();
    for (;;) {
        if (!times_out && *stop)
            return 0;                             /* the block that times out returned: so do we */
        uint64_t w_seq, w_ctl;
        tg_mb_poll(req, &w_seq, &w_ctl);
        if (w_ctl & TG_MB_CTL_QUIT)
            return 0;
        if (w_seq != last && tg_mb_ctl_matches(w_ctl, w_seq)) {
            /* NOTE: acquire: pairs with the host's release of seq (mailbox.c), so the inputs read
               after this are the ones written before that seq (and ctl, tagged with it, is its own). */
            tg_fence_acq_rel_sys();
            *seq = w_seq;
            *ctl = w_ctl;
            return 1;
        }
        const uint64_t idle = tg_backoff_pause(&b, cfg);
        if (times_out && cfg.idle_timeout_ns != 0 && idle > cfg.idle_timeout_ns) {
            *stop = 1u;
            /* NOTE: the stop flag (device memory) reaches the other blocks before the host can see
               `exited` and relaunch; the host zeroes it, stream-ordered, for the next launch. */
            __threadfence();
            ((volatile tg_mb_response *)&box->response)->exited = TG_MB_EXIT_IDLE;
            /* NOTE: push the exit to the host now rather than whenever the write drains. */
            __threadfence_system();
            return 0;
        }
    }
}

#endif /* TICKGPU_RESIDENT_CUH */
