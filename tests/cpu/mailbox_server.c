/*
 * A CPU thread that plays the resident kernel's side of the mailbox protocol
 * (csrc/hot/mailbox_protocol.h), so the host client (csrc/hot/mailbox.c) and the Python owner
 * (tickgpu.runtime.mailbox) can be tested without a GPU. Built by tests/cpu/test_mailbox.py as a
 * shared library and included by tests/native/test_mailbox.c (sanitizers).
 *
 * It follows the kernel's rules, not its code: acquire on the request sequence, the greeks of the
 * request (csrc/cpu/greeks_kernel.h, the one implementation, compiled here for the host) written
 * as a (10, n) block, status and served, then `done` with release ordering; quit; returning by
 * itself after config.idle_timeout_ns without a request, with `exited` set. Test switches: a
 * paused server ignores requests (a hung kernel) but still honours quit.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>

#include "../../csrc/hot/mailbox_protocol.h"

#include "../../csrc/cpu/greeks_instances.h"

typedef struct {
    tg_mb_header *box;
    pthread_t thread;
    int paused;        /* atomic: nonzero ignores requests */
    int finished;      /* atomic: set as the thread returns */
    int64_t answered;  /* atomic: requests answered */
} tgms_server;

static int64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void nap(long ns)
{
    struct timespec ts = {0, ns};
    nanosleep(&ts, NULL);
}

#define SERVE(REAL, ELEMENT, LIMIT)                                                             \
    do {                                                                                       \
        const REAL *in[TG_MB_REALS];                                                           \
        for (int k = 0; k < TG_MB_REALS; k++)                                                  \
            in[k] = (const REAL *)(base + tg_mb_input_offset(k, cap, sizeof(REAL)));           \
        const unsigned char *call = base + tg_mb_input_offset(TG_MB_REALS, cap, sizeof(REAL)); \
        REAL *out = (REAL *)(base + tg_mb_output_offset(cap, sizeof(REAL)));                   \
        for (uint32_t i = 0; i < n; i++) {                                                     \
            REAL v[TG_MB_REALS], o[TG_MB_OUTPUTS];                                             \
            for (int k = 0; k < TG_MB_REALS; k++)                                              \
                v[k] = in[k][((mask >> k) & 1u) ? i : 0];                                      \
            REAL w = call[((mask >> TG_MB_REALS) & 1u) ? i : 0] ? (REAL)1 : (REAL)-1;          \
            if (ELEMENT(v[0], v[1], v[2], v[3], v[4], v[5], w, o))                             \
                LIMIT(v[0], v[1], v[2], v[3], v[4], v[5], w, o);                               \
            for (int k = 0; k < TG_MB_OUTPUTS; k++)                                            \
                out[(size_t)k * n + i] = o[k];                                                 \
        }                                                                                      \
    } while (0)

static void *serve(void *arg)
{
    tgms_server *s = (tgms_server *)arg;
    tg_mb_header *h = s->box;
    unsigned char *base = (unsigned char *)h;
    const tg_mb_config cfg = h->config;
    if (cfg.magic != TG_MB_MAGIC || cfg.version != TG_MB_VERSION || (cfg.elem_size != 4 && cfg.elem_size != 8)) {
        __atomic_store_n(&h->response.status, TG_MB_STATUS_BAD_CONFIG, __ATOMIC_RELAXED);
        __atomic_store_n(&h->response.exited, TG_MB_EXIT_CONFIG, __ATOMIC_RELEASE);
        __atomic_store_n(&s->finished, 1, __ATOMIC_RELEASE);
        return NULL;
    }
    const uint64_t cap = cfg.capacity;
    uint64_t last = __atomic_load_n(&h->response.done, __ATOMIC_ACQUIRE);
    int64_t idle_from = mono_ns();
    for (;;) {
        if (__atomic_load_n(&h->request.ctl, __ATOMIC_ACQUIRE) & TG_MB_CTL_QUIT)
            break;
        uint64_t seq = __atomic_load_n(&h->request.seq, __ATOMIC_ACQUIRE);
        /* acquire on seq: the ctl written before it is this request's */
        uint64_t ctl = __atomic_load_n(&h->request.ctl, __ATOMIC_RELAXED);
        if (seq == last || !tg_mb_ctl_matches(ctl, seq) || __atomic_load_n(&s->paused, __ATOMIC_ACQUIRE)) {
            if (cfg.idle_timeout_ns && mono_ns() - idle_from > (int64_t)cfg.idle_timeout_ns) {
                __atomic_store_n(&h->response.exited, TG_MB_EXIT_IDLE, __ATOMIC_RELEASE);
                break;
            }
            nap(2000);   /* a CPU stand-in need not spin: the tests measure no latency */
            continue;
        }
        uint32_t n = tg_mb_ctl_n(ctl), mask = tg_mb_ctl_mask(ctl);
        uint32_t status = (n >= 1 && n <= cap) ? TG_MB_STATUS_OK : TG_MB_STATUS_BAD_REQUEST;
        if (status == TG_MB_STATUS_OK) {
            if (cfg.elem_size == 8)
                SERVE(double, greeks_element_f64, greeks_limit_f64);
            else
                SERVE(float, greeks_element_f32, greeks_limit_f32);
        }
        __atomic_store_n(&h->response.status, status, __ATOMIC_RELAXED);
        __atomic_store_n(&h->response.served, h->response.served + 1, __ATOMIC_RELAXED);
        /* release: outputs, status and served before done */
        __atomic_store_n(&h->response.done, seq, __ATOMIC_RELEASE);
        __atomic_fetch_add(&s->answered, 1, __ATOMIC_RELAXED);
        last = seq;
        idle_from = mono_ns();
    }
    __atomic_store_n(&s->finished, 1, __ATOMIC_RELEASE);
    return NULL;
}

/* Starts a server thread on `box`; NULL if the thread could not be started. */
void *tgms_start(void *box)
{
    tgms_server *s = (tgms_server *)calloc(1, sizeof *s);
    if (s == NULL)
        return NULL;
    s->box = (tg_mb_header *)box;
    if (pthread_create(&s->thread, NULL, serve, s) != 0) {
        free(s);
        return NULL;
    }
    return s;
}

void tgms_pause(void *server, int paused)
{
    __atomic_store_n(&((tgms_server *)server)->paused, paused, __ATOMIC_RELEASE);
}

int tgms_finished(void *server)
{
    return __atomic_load_n(&((tgms_server *)server)->finished, __ATOMIC_ACQUIRE);
}

int64_t tgms_answered(void *server)
{
    return __atomic_load_n(&((tgms_server *)server)->answered, __ATOMIC_RELAXED);
}

/* Waits for the thread (it must have been asked to quit, or be idle-bound) and frees it. */
void tgms_join(void *server)
{
    tgms_server *s = (tgms_server *)server;
    pthread_join(s->thread, NULL);
    free(s);
}
