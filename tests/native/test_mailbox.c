/* The mailbox client (csrc/hot/mailbox.c) against the CPU stand-in of the resident kernel
 * (tests/cpu/mailbox_server.c) on its own thread, under AddressSanitizer / UBSan and
 * ThreadSanitizer: the protocol's release / acquire pairs must order every byte of the inputs and
 * outputs (a missing one is a data race TSan reports), answers must equal tg_greeks_f64 / _f32
 * exactly, and timeout, idle exit and quit must end without a hang.
 *
 * Both files are compiled into this test directly: the harness links the CPU core only. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../csrc/hot/mailbox.c"
#include "../cpu/mailbox_server.c"

#include "check.h"

#define CAP 96

static void *aligned_box(int64_t bytes)
{
    void *p = NULL;
    if (posix_memalign(&p, TG_MB_LINE, (size_t)bytes) != 0)
        return NULL;
    memset(p, 0, (size_t)bytes);
    return p;
}

static double uniform(unsigned *state, double lo, double hi)
{
    *state = *state * 1664525u + 1013904223u;
    return lo + (hi - lo) * (double)(*state >> 8) / (double)(1u << 24);
}

/* One round of calls of every size up to CAP, some inputs single values, against the CPU core. */
static void round_f64(void *box, unsigned seed)
{
    static double in[6][CAP], got[10][CAP], want[10][CAP];
    static uint8_t call[CAP];
    for (int n = 1; n <= CAP; n += 7) {
        for (int i = 0; i < n; i++) {
            in[0][i] = uniform(&seed, 50, 150);
            in[1][i] = uniform(&seed, 50, 150);
            in[2][i] = i % 11 == 0 ? 0.0 : uniform(&seed, 0.01, 2);
            in[3][i] = uniform(&seed, 0, 0.05);
            in[4][i] = uniform(&seed, 0.05, 0.9);
            in[5][i] = uniform(&seed, 0, 0.03);
            call[i] = (uint8_t)(i & 1);
        }
        int64_t s = n % 2;   /* rate and div: one value on odd sizes' complements */
        tg_bsm_inputs bi = {in[0], 1, in[1], 1, in[2], 1, in[3], s, in[4], 1, in[5], s, call, 1};
        tg_greeks_outputs go = {got[0], got[1], got[2], got[3], got[4], got[5], got[6], got[7], got[8], got[9]};
        tg_greeks_outputs wo = {want[0], want[1], want[2], want[3], want[4], want[5], want[6], want[7], want[8],
                                want[9]};
        uint32_t ks = 99;
        CHECK(tg_mailbox_call(box, n, &bi, &go, 5000000000LL, &ks) == TG_OK);
        CHECK(ks == TG_MB_STATUS_OK);
        CHECK(tg_greeks_f64(n, &bi, &wo, 1) == TG_OK);
        for (int k = 0; k < 10; k++)
            CHECK(memcmp(got[k], want[k], (size_t)n * sizeof(double)) == 0);
        /* the same answer as one (10, n) block */
        static double block[10 * CAP];
        CHECK(tg_mailbox_call_block(box, n, &bi, block, 5000000000LL, &ks) == TG_OK);
        for (int k = 0; k < 10; k++)
            CHECK(memcmp(block + (size_t)k * n, want[k], (size_t)n * sizeof(double)) == 0);
    }
}

static void test_f64_answers_and_quit(void)
{
    int64_t bytes = tg_mailbox_bytes(CAP, 8);
    void *box = aligned_box(bytes);
    CHECK(tg_mailbox_init(box, bytes, 8, CAP, 0, 0, 0) == TG_OK);
    void *server = tgms_start(box);
    CHECK(server != NULL);
    round_f64(box, 12345u);
    round_f64(box, 777u);
    {   /* the longest timeout there is: its deadline must saturate, not overflow */
        double x = 100.0;
        uint8_t c = 1;
        double out[10];
        tg_bsm_inputs one = {&x, 0, &x, 0, &x, 0, &x, 0, &x, 0, &x, 0, &c, 0};
        tg_greeks_outputs o = {&out[0], &out[1], &out[2], &out[3], &out[4], &out[5], &out[6], &out[7], &out[8],
                               &out[9]};
        CHECK(tg_mailbox_call(box, 1, &one, &o, INT64_MAX, NULL) == TG_OK);
    }
    /* capacity + 1 is refused before anything is posted */
    double x = 1.0;
    uint8_t c = 1;
    tg_bsm_inputs one = {&x, 0, &x, 0, &x, 0, &x, 0, &x, 0, &x, 0, &c, 0};
    tg_greeks_outputs none = {0};
    uint64_t seq0, seq1;
    tg_mailbox_state(box, &seq0, NULL, NULL, NULL);
    CHECK(tg_mailbox_call(box, CAP + 1, &one, &none, 1000000000LL, NULL) == TG_ERANGE);
    double block[10];
    CHECK(tg_mailbox_call_block(box, CAP + 1, &one, block, 1000000000LL, NULL) == TG_ERANGE);
    CHECK(tg_mailbox_call_block(box, 0, &one, block, 1000000000LL, NULL) == TG_ERANGE);
    CHECK(tg_mailbox_call_block(box, 1, &one, NULL, 1000000000LL, NULL) == TG_EINVAL);
    CHECK(tg_mailbox_call_block(NULL, 1, &one, block, 1000000000LL, NULL) == TG_EINVAL);
    tg_mailbox_state(box, &seq1, NULL, NULL, NULL);
    CHECK(seq0 == seq1);
    CHECK(tg_mailbox_quit(box) == TG_OK);
    tgms_join(server);
    free(box);
}

static void test_f32_answers(void)
{
    int64_t bytes = tg_mailbox_bytes(CAP, 4);
    void *box = aligned_box(bytes);
    CHECK(tg_mailbox_init(box, bytes, 4, CAP, 0, 0, 0) == TG_OK);
    void *server = tgms_start(box);
    static float in[6][CAP], got[10][CAP], want[10][CAP];
    static uint8_t call[CAP];
    unsigned seed = 99u;
    for (int i = 0; i < CAP; i++) {
        in[0][i] = (float)uniform(&seed, 50, 150);
        in[1][i] = (float)uniform(&seed, 50, 150);
        in[2][i] = (float)uniform(&seed, 0, 2);
        in[3][i] = 0.01f;
        in[4][i] = (float)uniform(&seed, 0.05, 0.9);
        in[5][i] = 0.0f;
        call[i] = (uint8_t)(i % 3 == 0);
    }
    tg_bsm_inputs bi = {in[0], 1, in[1], 1, in[2], 1, in[3], 0, in[4], 1, in[5], 0, call, 1};
    tg_greeks_outputs go = {got[0], got[1], got[2], got[3], got[4], got[5], got[6], got[7], got[8], got[9]};
    tg_greeks_outputs wo = {want[0], want[1], want[2], want[3], want[4], want[5], want[6], want[7], want[8], want[9]};
    for (int rep = 0; rep < 20; rep++) {
        in[0][rep] += 1.0f;
        CHECK(tg_mailbox_call(box, CAP, &bi, &go, 5000000000LL, NULL) == TG_OK);
        CHECK(tg_greeks_f32(CAP, &bi, &wo, 1) == TG_OK);
        for (int k = 0; k < 10; k++)
            CHECK(memcmp(got[k], want[k], sizeof got[k]) == 0);
    }
    tg_mailbox_quit(box);
    tgms_join(server);
    free(box);
}

static void test_timeout_idle_exit_and_relaunch(void)
{
    int64_t bytes = tg_mailbox_bytes(8, 8);
    void *box = aligned_box(bytes);
    double spot[8] = {90, 95, 100, 105, 110, 115, 120, 125}, k = 100, t = 0.5, r = 0.01, vol = 0.2, q = 0;
    double out[10][8];
    uint8_t c = 1;
    tg_bsm_inputs bi = {spot, 1, &k, 0, &t, 0, &r, 0, &vol, 0, &q, 0, &c, 0};
    tg_greeks_outputs go = {out[0], out[1], out[2], out[3], out[4], out[5], out[6], out[7], out[8], out[9]};

    /* A server that stops answering: the call returns TG_MB_TIMEOUT, the request left pending;
       a paused server still honours quit. */
    CHECK(tg_mailbox_init(box, bytes, 8, 8, 0, 0, 0) == TG_OK);
    void *server = tgms_start(box);
    CHECK(tg_mailbox_call(box, 8, &bi, &go, 5000000000LL, NULL) == TG_OK);
    tgms_pause(server, 1);
    CHECK(tg_mailbox_call(box, 8, &bi, &go, 1000000LL, NULL) == TG_MB_TIMEOUT);   /* 1 ms */
    uint64_t seq, done;
    uint32_t exited;
    tg_mailbox_state(box, &seq, &done, &exited, NULL);
    CHECK(seq == 2 && done == 1 && exited == TG_MB_RUNNING);
    tg_mailbox_quit(box);
    tgms_join(server);

    /* Idle timeout 50 ms: a paused server returns on idle while a request waits; the client
       withdraws it and says so. */
    CHECK(tg_mailbox_init(box, bytes, 8, 8, 50000000LL, 0, 0) == TG_OK);
    server = tgms_start(box);
    tgms_pause(server, 1);
    CHECK(tg_mailbox_call(box, 8, &bi, &go, 5000000000LL, NULL) == TG_MB_EXITED);
    tgms_join(server);
    tg_mailbox_state(box, &seq, &done, &exited, NULL);
    CHECK(exited == TG_MB_EXIT_IDLE && seq == done && done == 0);
    CHECK(tg_mailbox_call(box, 8, &bi, &go, 5000000000LL, NULL) == TG_MB_EXITED); /* told at once */
    CHECK(tg_mailbox_rearm(box) == TG_OK);
    server = tgms_start(box);
    CHECK(tg_mailbox_call(box, 8, &bi, &go, 5000000000LL, NULL) == TG_OK);
    CHECK(out[0][7] > 25 && out[0][7] < 26 && out[1][0] > 0 && out[1][0] < 0.5);  /* price, delta */
    tg_mailbox_quit(box);
    tgms_join(server);
    free(box);
}

int main(void)
{
    test_f64_answers_and_quit();
    test_f32_answers();
    test_timeout_idle_exit_and_relaunch();
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("mailbox: client and stand-in server thread agree\n");
    return 0;
}
