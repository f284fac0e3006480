/*
 * mailbox.c -- the host side of a resident-kernel mailbox (layout and rules: mailbox_protocol.h).
 *
 * A call costs no driver call at all: the inputs go into mapped pinned memory, a sequence number
 * is bumped, and the caller spins until the persistent kernel (csrc/cuda/mailbox.cu) has written
 * its answer back into the same memory. Nothing here allocates, locks or reaches the driver, so it
 * runs with the GIL released. One caller at a time per mailbox: the Python owner serialises calls.
 *
 * Memory ordering. The host side uses C11-style __atomic builtins on the control words only; the
 * data areas are plain memory ordered by them (release on the word published after the data,
 * acquire on the word polled before the data). On x86 (TSO) a release store is a plain store and
 * an acquire load a plain load: the builtins cost nothing there but stop the compiler from moving
 * the data accesses across them, which is the hazard that remains on that architecture.
 */
#define _POSIX_C_SOURCE 200809L   /* clock_gettime under -std=c11 */

#include <stdint.h>
#include <string.h>
#include <time.h>

#include "tickgpu.h"
#include "mailbox_protocol.h"

#if defined(__x86_64__) || defined(__i386__)
#define TG_CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define TG_CPU_RELAX() __asm__ __volatile__("yield" ::: "memory")
#else
#define TG_CPU_RELAX() ((void)0)
#endif

/* Spins between clock reads while waiting: a read is ~20 ns (vDSO), a spin ~10-40 ns, and the
   answer takes microseconds, so the timeout costs well under one percent of the wait. */
#define TG_MB_CLOCK_EVERY 64

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t tg_mailbox_bytes(int64_t capacity, int32_t elem_size)
{
    if (capacity < 1 || capacity > TG_MB_MAX_CAPACITY || (elem_size != 4 && elem_size != 8))
        return -1;
    return (int64_t)tg_mb_bytes((uint64_t)capacity, (uint64_t)elem_size);
}

int tg_mailbox_init(void *box, int64_t bytes, int32_t elem_size, int64_t capacity,
                    int64_t idle_timeout_ns, int64_t spin_ns, int32_t sleep_max_ns)
{
    int64_t need = tg_mailbox_bytes(capacity, elem_size);
    if (box == NULL || need < 0 || idle_timeout_ns < 0 || spin_ns < 0 || sleep_max_ns < 0
        || ((uintptr_t)box % TG_MB_LINE) != 0)
        return TG_EINVAL;
    if (bytes < need)
        return TG_ERANGE;
    tg_mb_header *h = (tg_mb_header *)box;
    memset(h, 0, sizeof *h);
    h->config.magic = TG_MB_MAGIC;
    h->config.version = TG_MB_VERSION;
    h->config.elem_size = (uint32_t)elem_size;
    h->config.capacity = (uint32_t)capacity;
    h->config.idle_timeout_ns = (uint64_t)idle_timeout_ns;
    h->config.spin_ns = (uint64_t)spin_ns;
    h->config.sleep_max_ns = (uint32_t)sleep_max_ns;
    /* NOTE: a full fence: the whole header is in memory before the caller launches a kernel on it
       (the launch itself orders host writes before the kernel starts; this keeps the rule true
       for the CPU server of the tests too, which a thread start orders as well). */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    return TG_OK;
}

int tg_mailbox_rearm(void *box)
{
    if (box == NULL)
        return TG_EINVAL;
    tg_mb_header *h = (tg_mb_header *)box;
    uint64_t done = __atomic_load_n(&h->response.done, __ATOMIC_ACQUIRE);
    /* No request pending across a relaunch: one the old kernel never answered was withdrawn. */
    __atomic_store_n(&h->request.seq, done, __ATOMIC_RELAXED);
    __atomic_store_n(&h->request.ctl, (uint64_t)0, __ATOMIC_RELAXED);   /* quit cleared */
    __atomic_store_n(&h->response.served, (uint64_t)0, __ATOMIC_RELAXED);
    __atomic_store_n(&h->response.status, TG_MB_STATUS_OK, __ATOMIC_RELAXED);
    /* NOTE: release and last: a kernel (or test server) started after this sees every store above. */
    __atomic_store_n(&h->response.exited, TG_MB_RUNNING, __ATOMIC_RELEASE);
    return TG_OK;
}

int tg_mailbox_quit(void *box)
{
    if (box == NULL)
        return TG_EINVAL;
    tg_mb_header *h = (tg_mb_header *)box;
    /* NOTE: release: nothing the host wrote before asking to quit is left behind in its store buffer. */
    __atomic_fetch_or(&h->request.ctl, TG_MB_CTL_QUIT, __ATOMIC_RELEASE);
    return TG_OK;
}

int tg_mailbox_state(const void *box, uint64_t *seq, uint64_t *done, uint32_t *exited, uint64_t *served)
{
    if (box == NULL)
        return TG_EINVAL;
    const tg_mb_header *h = (const tg_mb_header *)box;
    if (seq)
        *seq = __atomic_load_n(&h->request.seq, __ATOMIC_ACQUIRE);
    if (done)
        *done = __atomic_load_n(&h->response.done, __ATOMIC_ACQUIRE);
    if (exited)
        *exited = __atomic_load_n(&h->response.exited, __ATOMIC_ACQUIRE);
    if (served)
        *served = __atomic_load_n(&h->response.served, __ATOMIC_ACQUIRE);
    return TG_OK;
}

/* Input k into its area: an array of n, or its one value at element 0 (returns the mask bit). */
static uint32_t stage_input(unsigned char *area, const void *src, int64_t stride, int64_t n, size_t elem)
{
    if (stride == 0) {
        memcpy(area, src, elem);
        return 0;
    }
    memcpy(area, src, (size_t)n * elem);
    return 1;
}

/* One request; the answer's ten rows go to dst[k] (NULL: skipped). */
static int mailbox_call(void *box, int64_t n, const tg_bsm_inputs *in, void *const dst[TG_MB_OUTPUTS],
                        int64_t timeout_ns, uint32_t *kernel_status)
{
    if (kernel_status)
        *kernel_status = TG_MB_STATUS_OK;
    if (box == NULL || in == NULL || timeout_ns < 0)
        return TG_EINVAL;
    tg_mb_header *h = (tg_mb_header *)box;
    const uint64_t cap = h->config.capacity, elem = h->config.elem_size;
    if (h->config.magic != TG_MB_MAGIC || (elem != 4 && elem != 8))
        return TG_EINVAL;
    if (n < 1 || (uint64_t)n > cap)
        return TG_ERANGE;
    const void *src[TG_MB_INPUTS] = {in->spot, in->strike, in->t, in->rate, in->vol, in->div, in->call};
    const int64_t stride[TG_MB_INPUTS] = {in->s_spot, in->s_strike, in->s_t, in->s_rate, in->s_vol,
                                          in->s_div, in->s_call};
    for (int k = 0; k < TG_MB_INPUTS; k++)
        if (src[k] == NULL || (stride[k] != 0 && stride[k] != 1))
            return TG_EINVAL;

    /* A kernel that returned by itself (idle) answers nothing: say so before staging anything. */
    if (__atomic_load_n(&h->response.exited, __ATOMIC_ACQUIRE) != TG_MB_RUNNING)
        return TG_MB_EXITED;

    unsigned char *base = (unsigned char *)box;
    uint32_t mask = 0;
    for (int k = 0; k < TG_MB_REALS; k++)
        mask |= stage_input(base + tg_mb_input_offset(k, cap, elem), src[k], stride[k], n, elem) << k;
    mask |= stage_input(base + tg_mb_input_offset(TG_MB_REALS, cap, elem), src[TG_MB_REALS],
                        stride[TG_MB_REALS], n, 1) << TG_MB_REALS;
    /* Only this caller writes seq, so a relaxed read of it is exact; quit is never set while a
       call is possible (the owner asks only a mailbox it no longer calls), so ctl is rewritten whole. */
    const uint64_t seq = __atomic_load_n(&h->request.seq, __ATOMIC_RELAXED) + 1;
    __atomic_store_n(&h->request.ctl, tg_mb_ctl((uint64_t)n, mask, seq), __ATOMIC_RELAXED);
    /* NOTE: release: the inputs, n and mask are visible to the kernel no later than the new seq.
       The kernel pairs it with an acquire fence after seeing the new seq (mailbox.cu). */
    __atomic_store_n(&h->request.seq, seq, __ATOMIC_RELEASE);

    int64_t deadline = -1;
    for (unsigned spins = 0;; spins++) {
        /* NOTE: acquire: the outputs the kernel wrote before publishing `done` are visible to the
           copies below. The kernel made them visible system-wide before its release of `done`. */
        if (__atomic_load_n(&h->response.done, __ATOMIC_ACQUIRE) == seq)
            break;
        if (__atomic_load_n(&h->response.exited, __ATOMIC_ACQUIRE) != TG_MB_RUNNING) {
            if (__atomic_load_n(&h->response.done, __ATOMIC_ACQUIRE) == seq)
                break;
            /* The kernel returned (idle) without taking this request, and none of its blocks will
               answer: withdraw it, so that a relaunched kernel does not see it pending. */
            __atomic_store_n(&h->request.seq, seq - 1, __ATOMIC_RELEASE);
            return TG_MB_EXITED;
        }
        if (spins % TG_MB_CLOCK_EVERY == 0) {
            int64_t t = now_ns();
            if (deadline < 0)   /* saturated: a timeout of "for ever" (INT64_MAX) must not overflow */
                deadline = timeout_ns > INT64_MAX - t ? INT64_MAX : t + timeout_ns;
            else if (t > deadline)
                return TG_MB_TIMEOUT;   /* the request stays pending: the mailbox is not reusable */
        }
        TG_CPU_RELAX();
    }

    uint32_t status = __atomic_load_n(&h->response.status, __ATOMIC_RELAXED);
    if (kernel_status)
        *kernel_status = status;
    if (status != TG_MB_STATUS_OK)
        return TG_MB_REFUSED;

    /* The answer is a (10, n) block; rows the caller holds back to back leave in one copy. */
    const unsigned char *res = base + tg_mb_output_offset(cap, elem);
    const size_t row = (size_t)n * elem;
    for (int k = 0; k < TG_MB_OUTPUTS;) {
        if (dst[k] == NULL) {
            k++;
            continue;
        }
        int run = 1;
        while (k + run < TG_MB_OUTPUTS && dst[k + run] == (unsigned char *)dst[k] + (size_t)run * row)
            run++;
        memcpy(dst[k], res + (size_t)k * row, (size_t)run * row);
        k += run;
    }
    return TG_OK;
}

int tg_mailbox_call(void *box, int64_t n, const tg_bsm_inputs *in, const tg_greeks_outputs *out,
                    int64_t timeout_ns, uint32_t *kernel_status)
{
    if (out == NULL) {
        if (kernel_status)
            *kernel_status = TG_MB_STATUS_OK;
        return TG_EINVAL;
    }
    void *const dst[TG_MB_OUTPUTS] = {out->price, out->delta, out->gamma, out->vega, out->theta, out->rho,
                                      out->phi, out->vanna, out->volga, out->charm};
    return mailbox_call(box, n, in, dst, timeout_ns, kernel_status);
}

int tg_mailbox_call_block(void *box, int64_t n, const tg_bsm_inputs *in, void *out, int64_t timeout_ns,
                          uint32_t *kernel_status)
{
    if (box == NULL || out == NULL) {
        if (kernel_status)
            *kernel_status = TG_MB_STATUS_OK;
        return TG_EINVAL;
    }
    const tg_mb_config *cfg = &((const tg_mb_header *)box)->config;
    if (n < 1 || (uint64_t)n > cfg->capacity)   /* mailbox_call says so too; no row address formed */
        return mailbox_call(box, n, in, NULL, timeout_ns, kernel_status);
    /* Rows of n elements of the mailbox's size, back to back: one copy (mailbox_call joins them). */
    const size_t row = (size_t)n * cfg->elem_size;
    void *dst[TG_MB_OUTPUTS];
    for (int k = 0; k < TG_MB_OUTPUTS; k++)
        dst[k] = (unsigned char *)out + (size_t)k * row;
    return mailbox_call(box, n, in, dst, timeout_ns, kernel_status);
}
