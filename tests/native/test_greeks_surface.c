/*
 * Edge cases and bounds of tg_greeks_f64 / tg_greeks_f32 and tg_surface_eval, in plain C, for
 * the sanitizer builds. Build it with every C file of csrc/cpu:
 *   cc -Icsrc csrc/cpu/ALL.c tests/native/test_greeks_surface.c -lm -lpthread
 * Exit status 0 when every check holds; each failure is printed with its line.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tickgpu.h"

#include "check.h"

static int close_to(double a, double b, double rel, double abs_)
{
    return fabs(a - b) <= fmax(rel * fabs(b), abs_);
}

/* One option, all ten outputs, f64. */
static int greeks1(double S, double K, double t, double r, double sig, double q, int call, double o[10])
{
    uint8_t c = (uint8_t)call;
    tg_bsm_inputs in = {&S, 0, &K, 0, &t, 0, &r, 0, &sig, 0, &q, 0, &c, 0};
    tg_greeks_outputs out = {&o[0], &o[1], &o[2], &o[3], &o[4], &o[5], &o[6], &o[7], &o[8], &o[9]};
    return tg_greeks_f64(1, &in, &out, 1);
}

static void test_greeks_values(void)
{
    double o[10];
    /* Hull's textbook example: S = 42, K = 40, r = 10%, sigma = 20%, t = 0.5: call 4.76, put 0.81. */
    CHECK(greeks1(42, 40, 0.5, 0.1, 0.2, 0.0, 1, o) == TG_OK);
    CHECK(close_to(o[0], 4.7594, 0, 1e-4));
    CHECK(greeks1(42, 40, 0.5, 0.1, 0.2, 0.0, 0, o) == TG_OK);
    CHECK(close_to(o[0], 0.8086, 0, 1e-4));
    /* Haug p. 2-8 (QuantLib's testValues row 1): call 2.1334. */
    CHECK(greeks1(60, 65, 0.25, 0.08, 0.30, 0.0, 1, o) == TG_OK);
    CHECK(close_to(o[0], 2.1334, 0, 1e-4));
    /* Deep out of the money put keeps relative accuracy (erfc tail, no 1 - N(d)). */
    CHECK(greeks1(100, 20, 1.0, 0.0, 0.2, 0.0, 0, o) == TG_OK);
    CHECK(o[0] > 0 && o[0] < 1e-15 && o[1] < 0 && o[1] > -1e-15);
}

static void test_greeks_invalid_and_expiry(void)
{
    double o[10];
    const double bad[][6] = {
        {NAN, 100, 1, 0.05, 0.2, 0}, {0, 100, 1, 0.05, 0.2, 0}, {100, -1, 1, 0.05, 0.2, 0},
        {100, 100, -1e-300, 0.05, 0.2, 0}, {100, 100, 1, INFINITY, 0.2, 0},
        {100, 100, 1, 0.05, 0, 0}, {100, 100, 1, 0.05, 0.2, NAN}, {100, 100, INFINITY, 0.05, 0.2, 0},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        CHECK(greeks1(bad[k][0], bad[k][1], bad[k][2], bad[k][3], bad[k][4], bad[k][5], 1, o) == TG_OK);
        for (int j = 0; j < 10; j++)
            CHECK(isnan(o[j]));
    }
    /* t == 0: intrinsic value and limit greeks. */
    CHECK(greeks1(110, 100, 0, 0.05, 0.2, 0.01, 1, o) == TG_OK);
    CHECK(o[0] == 10 && o[1] == 1 && o[2] == 0 && o[3] == 0 && o[5] == 0 && o[6] == 0);
    CHECK(close_to(o[4], 0.01 * 110 - 0.05 * 100, 1e-15, 0));
    CHECK(greeks1(110, 100, 0, 0.05, 0.2, 0.01, 0, o) == TG_OK);
    CHECK(o[0] == 0 && o[1] == 0 && o[4] == 0 && o[9] == 0);
    CHECK(greeks1(100, 100, 0, 0.05, 0.2, 0.01, 0, o) == TG_OK);
    CHECK(o[0] == 0 && o[1] == -0.5 && isinf(o[2]) && o[2] > 0 && isinf(o[4]) && o[4] < 0);
    for (int j = 0; j < 10; j++)
        CHECK(!isnan(o[j]));
}

static void test_greeks_strides_null_outputs_and_threads(void)
{
    enum { N = 70001 };
    double *S = malloc(N * sizeof *S), *K = malloc(2 * N * sizeof *K);
    double *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b), *c1 = malloc(N * sizeof *c1);
    uint8_t *call = malloc(N);
    double t = 0.7, r = 0.03, sig = 0.25, q = 0.01;
    for (int i = 0; i < N; i++) {
        S[i] = 50 + 100.0 * i / N;
        K[2 * i] = 100;                 /* strike every other element: stride 2 */
        K[2 * i + 1] = -1;              /* would be NaN if read */
        call[i] = (uint8_t)(i & 1);
    }
    tg_bsm_inputs in = {S, 1, K, 2, &t, 0, &r, 0, &sig, 0, &q, 0, call, 1};
    tg_greeks_outputs only_delta = {0};
    only_delta.delta = a;
    CHECK(tg_greeks_f64(N, &in, &only_delta, 1) == TG_OK);
    only_delta.delta = b;
    CHECK(tg_greeks_f64(N, &in, &only_delta, 4) == TG_OK);
    CHECK(memcmp(a, b, N * sizeof *a) == 0);
    for (int i = 0; i < N; i++)
        CHECK(!isnan(a[i]) && (call[i] ? a[i] > 0 : a[i] < 0));

    /* float32 agrees with float64 to ~1e-5 here. */
    float *Sf = malloc(N * sizeof *Sf), *df = malloc(N * sizeof *df);
    float Kf = 100, tf = 0.7f, rf = 0.03f, sf = 0.25f, qf = 0.01f;
    for (int i = 0; i < N; i++)
        Sf[i] = (float)S[i];
    tg_bsm_inputs inf_ = {Sf, 1, &Kf, 0, &tf, 0, &rf, 0, &sf, 0, &qf, 0, call, 1};
    tg_greeks_outputs outf = {0};
    outf.price = df;
    CHECK(tg_greeks_f32(N, &inf_, &outf, 0) == TG_OK);
    double tt = tf, rr = rf, ss = sf, qq = qf, KK = Kf;
    double *Sd = malloc(N * sizeof *Sd);
    for (int i = 0; i < N; i++)
        Sd[i] = Sf[i];
    tg_bsm_inputs ind = {Sd, 1, &KK, 0, &tt, 0, &rr, 0, &ss, 0, &qq, 0, call, 1};
    tg_greeks_outputs outd = {0};
    outd.price = c1;
    CHECK(tg_greeks_f64(N, &ind, &outd, 0) == TG_OK);
    int f32_bad = 0;
    for (int i = 0; i < N; i++)
        f32_bad += !close_to(df[i], c1[i], 1e-5, 1e-5 * Sd[i]);
    CHECK(f32_bad == 0);

    /* Bad calls. */
    in.s_strike = -1;
    CHECK(tg_greeks_f64(N, &in, &only_delta, 1) == TG_EINVAL);
    in.s_strike = 2;
    in.call = NULL;
    CHECK(tg_greeks_f64(N, &in, &only_delta, 1) == TG_EINVAL);
    CHECK(tg_greeks_f64(-1, &in, &only_delta, 1) == TG_EINVAL);
    CHECK(tg_greeks_f64(0, &in, &only_delta, 1) == TG_OK);
    CHECK(tg_greeks_f32(1, NULL, &only_delta, 1) == TG_EINVAL);
    CHECK(tg_greeks_f32(1, &in, NULL, 1) == TG_EINVAL);
    free(S); free(K); free(a); free(b); free(c1); free(call); free(Sf); free(df); free(Sd);
}

static int surf_eval(const tg_surface *s, double K, double t, int what, double *out)
{
    return tg_surface_eval(s, 1, &K, 0, &t, 0, out, what, 1);
}

static void test_surface(void)
{
    const double strikes[] = {90, 100, 110}, expiries[] = {0.5, 2.0};
    const double vols[] = {0.30, 0.20, 0.25, 0.26, 0.21, 0.23};
    tg_surface s = {3, 2, strikes, expiries, vols, 0};
    double v;
    /* Nodes. */
    CHECK(surf_eval(&s, 100, 0.5, 0, &v) == TG_OK && close_to(v, 0.20, 1e-15, 0));
    CHECK(surf_eval(&s, 110, 2.0, 1, &v) == TG_OK && close_to(v, 0.23 * 0.23 * 2.0, 1e-15, 0));
    /* Bilinear in variance between nodes: (95, 1.25) by hand. */
    double w0 = 0.5 * (0.09 * 0.5) + 0.5 * (0.04 * 0.5), w1 = 0.5 * (0.26 * 0.26 * 2) + 0.5 * (0.21 * 0.21 * 2);
    CHECK(surf_eval(&s, 95, 1.25, 1, &v) == TG_OK && close_to(v, 0.5 * w0 + 0.5 * w1, 1e-15, 0));
    /* Extrapolation: flat in strike, flat vol after the last expiry, first row's vol before. */
    CHECK(surf_eval(&s, 1, 0.5, 0, &v) == TG_OK && close_to(v, 0.30, 1e-15, 0));
    CHECK(surf_eval(&s, 1e9, 10, 0, &v) == TG_OK && close_to(v, 0.23, 1e-15, 0));
    CHECK(surf_eval(&s, 100, 0, 0, &v) == TG_OK && close_to(v, 0.20, 1e-15, 0));
    CHECK(surf_eval(&s, 100, 0, 1, &v) == TG_OK && v == 0);
    CHECK(surf_eval(&s, 100, 0.1, 0, &v) == TG_OK && close_to(v, 0.20, 1e-15, 0));
    /* Bad queries: NaN, not an error. */
    CHECK(surf_eval(&s, NAN, 1, 0, &v) == TG_OK && isnan(v));
    CHECK(surf_eval(&s, 100, -1, 0, &v) == TG_OK && isnan(v));
    CHECK(surf_eval(&s, 100, INFINITY, 1, &v) == TG_OK && isnan(v));
    /* Vol mode. */
    s.mode = 1;
    CHECK(surf_eval(&s, 95, 1.25, 0, &v) == TG_OK && close_to(v, 0.5 * 0.25 + 0.5 * 0.235, 1e-15, 0));
    CHECK(surf_eval(&s, 95, 0.1, 0, &v) == TG_OK && close_to(v, 0.25, 1e-15, 0));
    /* One node. */
    tg_surface one = {1, 1, strikes, expiries, vols, 0};
    CHECK(surf_eval(&one, 1000, 5, 0, &v) == TG_OK && close_to(v, 0.30, 1e-15, 0));
    /* Bad grids and calls. */
    tg_surface bad = s;
    bad.mode = 2;
    CHECK(surf_eval(&bad, 100, 1, 0, &v) == TG_EINVAL);
    bad = s;
    bad.nk = 0;
    CHECK(surf_eval(&bad, 100, 1, 0, &v) == TG_EINVAL);
    const double unsorted[] = {90, 90, 110}, zero_t[] = {0, 1}, neg_vol[] = {0.3, -0.2, 0.25, 0.26, 0.21, 0.23};
    bad = s;
    bad.strikes = unsorted;
    CHECK(surf_eval(&bad, 100, 1, 0, &v) == TG_EINVAL);
    bad = s;
    bad.expiries = zero_t;
    CHECK(surf_eval(&bad, 100, 1, 0, &v) == TG_EINVAL);
    bad = s;
    bad.vols = neg_vol;
    CHECK(surf_eval(&bad, 100, 1, 0, &v) == TG_EINVAL);
    bad = s;
    bad.vols = NULL;
    CHECK(surf_eval(&bad, 100, 1, 0, &v) == TG_EINVAL);
    CHECK(surf_eval(&s, 100, 1, 2, &v) == TG_EINVAL);
    CHECK(tg_surface_eval(&s, -1, strikes, 1, expiries, 1, &v, 0, 1) == TG_EINVAL);
    CHECK(tg_surface_eval(&s, 1, strikes, -1, expiries, 1, &v, 0, 1) == TG_EINVAL);
    CHECK(tg_surface_eval(&s, 1, strikes, 1, expiries, 1, NULL, 0, 1) == TG_EINVAL);
    CHECK(tg_surface_eval(&s, 0, NULL, 0, NULL, 0, NULL, 0, 1) == TG_OK);
    CHECK(tg_surface_eval(NULL, 0, NULL, 0, NULL, 0, NULL, 0, 1) == TG_EINVAL);

    /* Many points, many threads, equal to one thread. */
    enum { N = 50000 };
    double *K = malloc(N * sizeof *K), *T = malloc(N * sizeof *T);
    double *a = malloc(N * sizeof *a), *b = malloc(N * sizeof *b);
    for (int i = 0; i < N; i++) {
        K[i] = 60 + 80.0 * ((i * 7919) % N) / N;
        T[i] = 3.0 * i / N;
    }
    s.mode = 0;
    CHECK(tg_surface_eval(&s, N, K, 1, T, 1, a, 0, 1) == TG_OK);
    CHECK(tg_surface_eval(&s, N, K, 1, T, 1, b, 0, 5) == TG_OK);
    CHECK(memcmp(a, b, N * sizeof *a) == 0);
    for (int i = 0; i < N; i++)
        CHECK(a[i] >= 0.20 - 1e-12 && a[i] <= 0.30 + 1e-12);
    free(K); free(T); free(a); free(b);
}

int main(void)
{
    test_greeks_values();
    test_greeks_invalid_and_expiry();
    test_greeks_strides_null_outputs_and_threads();
    test_surface();
    if (failures) {
        fprintf(stderr, "%d check(s) failed\n", failures);
        return 1;
    }
    printf("test_greeks_surface: all checks passed\n");
    return 0;
}
