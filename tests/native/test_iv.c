/*
 * Edge statuses and bounds of tg_implied_vol_f64 / tg_implied_vol_f32, tg_normalised_black and
 * tg_normalised_implied_vol, in plain C, for the sanitizer builds. Build it with every C file of
 * csrc/cpu:
 *   cc -Icsrc csrc/cpu/ALL.c tests/native/test_iv.c -lm -lpthread
 * Exit status 0 when every check holds; each failure is printed with its line.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tickgpu.h"

#include "check.h"

/* One option through the array entry point (all strides 0). */
static double iv1(double price, double S, double K, double t, double r, double q, int call, int *st)
{
    uint8_t c = (uint8_t)call;
    tg_iv_inputs in = {&price, 0, &S, 0, &K, 0, &t, 0, &r, 0, &q, 0, &c, 0};
    double vol = -1.0;
    int8_t status = -1;
    CHECK(tg_implied_vol_f64(1, &in, &vol, &status, 1) == TG_OK);
    *st = status;
    return vol;
}

static float iv1_f32(float price, float S, float K, float t, float r, float q, int call, int *st)
{
    uint8_t c = (uint8_t)call;
    tg_iv_inputs in = {&price, 0, &S, 0, &K, 0, &t, 0, &r, 0, &q, 0, &c, 0};
    float vol = -1.0f;
    int8_t status = -1;
    CHECK(tg_implied_vol_f32(1, &in, &vol, &status, 1) == TG_OK);
    *st = status;
    return vol;
}

/* BSM premium from the normalised Black function (independent of the solver). */
static double premium(double S, double K, double t, double r, double q, double sigma, int call)
{
    double fwd = S * exp(-q * t), strike = K * exp(-r * t);
    return sqrt(fwd * strike) * tg_normalised_black(log(fwd / strike), sigma * sqrt(t), call ? 1.0 : -1.0);
}

static void test_round_trips(void)
{
    const double strikes[] = {30, 70, 95, 100, 105, 140, 300};
    const double expiries[] = {1.0 / 365, 0.1, 1.0, 10.0};
    const double vols[] = {0.01, 0.2, 0.8, 3.0};
    int checked = 0;
    for (int i = 0; i < 7; i++)
        for (int j = 0; j < 4; j++)
            for (int k = 0; k < 4; k++)
                for (int call = 0; call <= 1; call++) {
                    double p = premium(100, strikes[i], expiries[j], 0.03, 0.01, vols[k], call);
                    int st;
                    double v = iv1(p, 100, strikes[i], expiries[j], 0.03, 0.01, call, &st);
                    CHECK(st == TG_IV_OK || st == TG_IV_AT_INTRINSIC || st == TG_IV_BELOW_INTRINSIC);
                    if (st != TG_IV_OK)
                        continue;
                    double back = premium(100, strikes[i], expiries[j], 0.03, 0.01, v, call);
                    CHECK(fabs(back - p) <= 1e-12 * p + 1e-300);
                    checked++;
                }
    CHECK(checked > 150);
    /* The normalised inverse, both sides of the money. */
    for (double x = -4; x <= 4; x += 0.5)
        for (double s = 0.05; s < 6; s *= 1.7)
            for (int th = -1; th <= 1; th += 2) {
                int st;
                double b = tg_normalised_black(x, s, th);
                double got = tg_normalised_implied_vol(b, x, th, &st);
                if (st == TG_IV_OK && th * x <= 0 && b > 1e-250)
                    CHECK(fabs(got - s) <= 1e-13 * s);
            }
}

static void test_bounds(void)
{
    int st;
    double S = 100, K = 80, t = 0.5, r = 0.04, q = 0.01;
    double fwd = S * exp(-q * t), strike = K * exp(-r * t);
    double intrinsic = fwd - strike;
    /* In the money, within 2^-50 max(S e^{-qt}, K e^{-rt}) of the intrinsic value is at it
       (TG_LBR_INTRINSIC_BAND in lbr_core.h); beyond that, below it or a vol. */
    double band = 0x1p-50 * fwd;
    CHECK(iv1(intrinsic, S, K, t, r, q, 1, &st) == 0.0 && st == TG_IV_AT_INTRINSIC);
    CHECK(iv1(nextafter(intrinsic, 0), S, K, t, r, q, 1, &st) == 0.0 && st == TG_IV_AT_INTRINSIC);
    CHECK(iv1(nextafter(intrinsic, INFINITY), S, K, t, r, q, 1, &st) == 0.0 && st == TG_IV_AT_INTRINSIC);
    CHECK(isnan(iv1(intrinsic - 2 * band, S, K, t, r, q, 1, &st)) && st == TG_IV_BELOW_INTRINSIC);
    double v = iv1(intrinsic + 2 * band, S, K, t, r, q, 1, &st);
    CHECK(st == TG_IV_OK && v > 0 && v < 0.1);
    CHECK(isnan(iv1(fwd, S, K, t, r, q, 1, &st)) && st == TG_IV_ABOVE_MAXIMUM);
    CHECK(isnan(iv1(1e300, S, K, t, r, q, 1, &st)) && st == TG_IV_ABOVE_MAXIMUM);
    v = iv1(fwd * (1 - 1e-12), S, K, t, r, q, 1, &st);
    CHECK(st == TG_IV_OK && v > 5 && isfinite(v));
    /* Puts: maximum K e^{-rt}; out of the money a zero premium is at intrinsic. */
    CHECK(isnan(iv1(strike, S, K, t, r, q, 0, &st)) && st == TG_IV_ABOVE_MAXIMUM);
    CHECK(iv1(0.0, S, K, t, r, q, 0, &st) == 0.0 && st == TG_IV_AT_INTRINSIC);
    v = iv1(1e-300, S, K, t, r, q, 0, &st);
    CHECK(st == TG_IV_OK && v > 0 && v < 0.1);
    /* The normalised inverse: intrinsic 2 sinh(|x|/2), maximum e^{theta x / 2}. */
    CHECK(tg_normalised_implied_vol(2 * sinh(0.25), 0.5, 1.0, &st) == 0.0 && st == TG_IV_AT_INTRINSIC);
    CHECK(isnan(tg_normalised_implied_vol(exp(0.25), 0.5, 1.0, &st)) && st == TG_IV_ABOVE_MAXIMUM);
    CHECK(isnan(tg_normalised_implied_vol(0.1, 0.5, 1.0, &st)) && st == TG_IV_BELOW_INTRINSIC);
    CHECK(isnan(tg_normalised_implied_vol(0.1, 0.5, 0.0, &st)) && st == TG_IV_BAD_INPUT);
    CHECK(tg_normalised_implied_vol(0.1, 0.5, 1.0, NULL) != 0.0);
}

static void test_bad_input(void)
{
    const double good[6] = {10, 100, 100, 1, 0.02, 0.01};
    const double bad[][2] = {
        {0, NAN}, {0, INFINITY}, {0, -1e-300}, {1, NAN}, {1, 0}, {1, -1}, {1, INFINITY},
        {2, 0}, {2, -3}, {2, NAN}, {3, 0}, {3, -1}, {3, NAN}, {3, INFINITY},
        {4, NAN}, {4, -INFINITY}, {5, NAN}, {5, INFINITY}, {4, -1e4},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        double a[6];
        memcpy(a, good, sizeof a);
        a[(int)bad[i][0]] = bad[i][1];
        int st;
        double v = iv1(a[0], a[1], a[2], a[3], a[4], a[5], 1, &st);
        CHECK(isnan(v) && st == TG_IV_BAD_INPUT);
    }
    /* normalised Black: s = 0 is intrinsic, s < 0 or NaN is NaN, s = inf the maximum. */
    CHECK(tg_normalised_black(0.5, 0.0, 1.0) == 2 * sinh(0.25));
    CHECK(tg_normalised_black(-0.5, 0.0, 1.0) == 0.0);
    CHECK(isnan(tg_normalised_black(0.5, -1.0, 1.0)));
    CHECK(isnan(tg_normalised_black(NAN, 1.0, 1.0)));
    CHECK(isnan(tg_normalised_black(0.5, 1.0, 2.0)));
    CHECK(fabs(tg_normalised_black(-0.5, INFINITY, 1.0) - exp(-0.25)) < 1e-16);
}

static void test_float32(void)
{
    int st;
    /* Ordinary option: float32 within 1e-5 of float64. */
    double p = premium(100, 105, 0.5, 0.02, 0.0, 0.25, 1);
    float v = iv1_f32((float)p, 100, 105, 0.5f, 0.02f, 0.0f, 1, &st);
    CHECK(st == TG_IV_OK && fabs(v - 0.25) < 1e-5);
    /* In the money, time value under 2^-21 max(S, K): PRECISION; the double path answers. */
    float ulp20 = nextafterf(20.0f, 30.0f) - 20.0f;
    v = iv1_f32(20.0f + 8 * ulp20, 100, 80, 0.5f, 0, 0, 1, &st);
    CHECK(isnan(v) && st == TG_IV_PRECISION);
    iv1((double)(20.0f + 8 * ulp20), 100, 80, 0.5, 0, 0, 1, &st);
    CHECK(st == TG_IV_OK);
    v = iv1_f32(20.0f + 64 * ulp20, 100, 80, 0.5f, 0, 0, 1, &st);
    CHECK(st == TG_IV_OK && v > 0);
    /* Bounds and bad input as in double. */
    CHECK(iv1_f32(20.0f, 100, 80, 0.5f, 0, 0, 1, &st) == 0.0f && st == TG_IV_AT_INTRINSIC);
    iv1_f32(19.0f, 100, 80, 0.5f, 0, 0, 1, &st);
    CHECK(st == TG_IV_BELOW_INTRINSIC);
    iv1_f32(100.0f, 100, 80, 0.5f, 0, 0, 1, &st);
    CHECK(st == TG_IV_ABOVE_MAXIMUM);
    iv1_f32(1.0f, 100, 80, 0.0f, 0, 0, 1, &st);
    CHECK(st == TG_IV_BAD_INPUT);
}

static void test_api_checks_and_threads(void)
{
    enum { N = 70001 };
    double *price = malloc(N * sizeof *price), *strike = malloc(N * sizeof *strike);
    double *v1 = malloc((N + 1) * sizeof *v1), *v4 = malloc((N + 1) * sizeof *v4);
    int8_t *s1 = malloc(N + 1), *s4 = malloc(N + 1);
    uint8_t call[2] = {1, 0};
    double S = 100, t = 0.75, r = 0.01, q = 0.0;
    for (int i = 0; i < N; i++) {
        strike[i] = 40 + 120.0 * i / N;
        price[i] = premium(S, strike[i], t, r, q, 0.05 + 0.9 * (i % 97) / 97.0, 1) * (1 + 1e-3 * (i % 3 - 1));
    }
    price[17] = NAN;
    v1[N] = v4[N] = 12345.0;  /* guard: nothing is written past n */
    s1[N] = s4[N] = 99;
    tg_iv_inputs in = {price, 1, &S, 0, strike, 1, &t, 0, &r, 0, &q, 0, call, 0};
    CHECK(tg_implied_vol_f64(N, &in, v1, s1, 1) == TG_OK);
    CHECK(tg_implied_vol_f64(N, &in, v4, s4, 4) == TG_OK);
    CHECK(memcmp(v1, v4, N * sizeof *v1) == 0 && memcmp(s1, s4, N) == 0);
    CHECK(v1[N] == 12345.0 && v4[N] == 12345.0 && s1[N] == 99 && s4[N] == 99);
    CHECK(s1[17] == TG_IV_BAD_INPUT && isnan(v1[17]));
    /* status may be NULL */
    CHECK(tg_implied_vol_f64(N, &in, v4, NULL, 0) == TG_OK);
    CHECK(memcmp(v1, v4, N * sizeof *v1) == 0);
    /* Calls the API refuses. */
    CHECK(tg_implied_vol_f64(-1, &in, v1, s1, 1) == TG_EINVAL);
    CHECK(tg_implied_vol_f64(1, NULL, v1, s1, 1) == TG_EINVAL);
    CHECK(tg_implied_vol_f64(1, &in, NULL, s1, 1) == TG_EINVAL);
    CHECK(tg_implied_vol_f64(0, &in, NULL, NULL, 1) == TG_OK);
    tg_iv_inputs strided = in;
    strided.s_price = 2;
    CHECK(tg_implied_vol_f64(1, &strided, v1, s1, 1) == TG_EINVAL);
    tg_iv_inputs missing = in;
    missing.call = NULL;
    CHECK(tg_implied_vol_f64(1, &missing, v1, s1, 1) == TG_EINVAL);
    CHECK(tg_implied_vol_f32(1, &missing, (float *)v1, s1, 1) == TG_EINVAL);
    free(price); free(strike); free(v1); free(v4); free(s1); free(s4);
}

int main(void)
{
    test_round_trips();
    test_bounds();
    test_bad_input();
    test_float32();
    test_api_checks_and_threads();
    if (failures)
        fprintf(stderr, "test_iv: %d check(s) failed\n", failures);
    else
        printf("test_iv: all checks passed\n");
    return failures != 0;
}
