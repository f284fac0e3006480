/*
 * Volatility surface evaluation on a (expiry x strike) grid of Black vols.
 *
 * mode 0 follows QuantLib's BlackVarianceSurface: bilinear interpolation of total variance
 * w = sigma^2 t over (t, K), on the grid augmented with a zero-variance row at t = 0, so
 * that before the first expiry the variance is linear in t (the vol is that of the first
 * expiry). Beyond the last expiry the vol is held flat: w(t, K) = w(T_last, K) t / T_last.
 * mode 1 interpolates the vols themselves bilinearly, flat in t outside [T_first, T_last].
 * Both hold the vol flat in strike outside [K_first, K_last].
 *
 * A query with a non-finite strike or t, or t < 0, gives NaN. At t == 0 the variance is 0
 * and the vol is its limit (the first expiry's, in mode 0).
 * Strikes may span more than DBL_MAX (k[0] = -1e308, k[1] = 1e308): the interpolation weight is
 * then formed from halved differences (strike_weights).
 */
#include <math.h>

#include "tickgpu.h"
#include "internal.h"

typedef struct {
    const tg_surface *s;
    const double *strike, *t;
    int64_t s_strike, s_t;
    double *out;
    int32_t what;
} surface_ctx;

/* Largest i in [0, n - 2] with x[i] <= v (0 below x[0], n - 2 above x[n - 1]); n >= 2.
   Its interval [x[i], x[i+1]] contains v whenever x[0] <= v <= x[n-1]. */
static inline int32_t interval(const double *x, int32_t n, double v)
{
    int32_t lo = 0, hi = n - 1;     /* invariant: x[lo] <= v < x[hi] for interior v */
    if (v >= x[n - 1])
        return n - 2;
    while (hi - lo > 1) {
        int32_t mid = lo + (hi - lo) / 2;
        if (x[mid] <= v)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Strike column and weight: the value at K is (1 - u) col[j] + u col[j + 1], flat outside. */
static inline void strike_weights(const tg_surface *s, double K, int32_t *j, double *u)
{
    int32_t nk = s->nk;
    const double *k = s->strikes;
    if (nk == 1 || K <= k[0]) {
        *j = 0;
        *u = 0.0;
        return;
    }
    if (K >= k[nk - 1]) {
        *j = nk - 2;
        *u = 1.0;
        return;
    }
    *j = interval(k, nk, K);
    double lo = k[*j], hi = k[*j + 1], span = hi - lo;
    /* Strikes of both signs near +-DBL_MAX: the span (and K - lo with it) overflows, and the
       weight would be 0; halved, both differences are exact and finite. */
    if (span == INFINITY)
        *u = (0.5 * K - 0.5 * lo) / (0.5 * hi - 0.5 * lo);
    else
        *u = (K - lo) / span;
}

/* The vol of expiry row `it` at the strike given by (j, u), interpolated linearly in vol. */
static inline double row_vol(const tg_surface *s, int32_t it, int32_t j, double u)
{
    const double *row = s->vols + (int64_t)it * s->nk;
    if (s->nk == 1)
        return row[0];
    return (1.0 - u) * row[j] + u * row[j + 1];
}

/* The total variance of expiry row `it` at the strike given by (j, u), linear in variance. */
static inline double row_variance(const tg_surface *s, int32_t it, int32_t j, double u)
{
    const double *row = s->vols + (int64_t)it * s->nk;
    double T = s->expiries[it];
    if (s->nk == 1)
        return row[0] * row[0] * T;
    double w0 = row[j] * row[j] * T, w1 = row[j + 1] * row[j + 1] * T;
    return (1.0 - u) * w0 + u * w1;
}

/* Total variance at (K, t), t >= 0, in mode 0. */
static double variance_mode0(const tg_surface *s, double K, double t)
{
    int32_t j, nt = s->nt;
    double u;
    const double *T = s->expiries;
    strike_weights(s, K, &j, &u);
    if (t >= T[nt - 1]) {
        double w = row_variance(s, nt - 1, j, u), T_last = T[nt - 1];
        if (t == T_last)
            return w;
        double wt = w * t / T_last;
        /* w t can overflow where the variance w (t / T_last) does not (then w > 0: no 0 x inf). */
        return isinf(wt) ? w * (t / T_last) : wt;
    }
    if (t <= T[0])
        return row_variance(s, 0, j, u) * (t / T[0]);      /* the implicit zero row at t = 0 */
    int32_t i = interval(T, nt, t);
    double v = (t - T[i]) / (T[i + 1] - T[i]);
    return (1.0 - v) * row_variance(s, i, j, u) + v * row_variance(s, i + 1, j, u);
}

/* The vol of the last expiry row at K in mode 0 (the flat vol beyond the last expiry). */
static double last_row_vol(const tg_surface *s, double K)
{
    int32_t j;
    double u;
    strike_weights(s, K, &j, &u);
    return sqrt(row_variance(s, s->nt - 1, j, u) / s->expiries[s->nt - 1]);
}

/* Vol at (K, t), t >= 0, in mode 1. */
static double vol_mode1(const tg_surface *s, double K, double t)
{
    int32_t j, nt = s->nt;
    double u;
    const double *T = s->expiries;
    strike_weights(s, K, &j, &u);
    if (t >= T[nt - 1])
        return row_vol(s, nt - 1, j, u);
    if (t <= T[0])
        return row_vol(s, 0, j, u);
    int32_t i = interval(T, nt, t);
    double v = (t - T[i]) / (T[i + 1] - T[i]);
    return (1.0 - v) * row_vol(s, i, j, u) + v * row_vol(s, i + 1, j, u);
}

static void surface_range(void *ctx_, int64_t begin, int64_t end)
{
    const surface_ctx *c = (const surface_ctx *)ctx_;
    const tg_surface *s = c->s;
    for (int64_t i = begin; i < end; i++) {
        double K = TG_AT(double, c->strike, c->s_strike, i);
        double t = TG_AT(double, c->t, c->s_t, i);
        double r;
        if (!(isfinite(K) && isfinite(t) && t >= 0)) {
            r = NAN;
        } else if (s->mode == 0) {
            double T0 = s->expiries[0];
            if (t <= T0) {
                /* Before the first expiry the variance is linear in t from 0, so the vol is the
                   first row's for every t (and its limit at t = 0), taken from that row: from
                   w(t) / t it would carry w's rounding, and for subnormal t (w(t) underflowing)
                   come out 0 or garbage. */
                r = c->what ? variance_mode0(s, K, t) : sqrt(variance_mode0(s, K, T0) / T0);
            } else {
                double w = variance_mode0(s, K, t);
                r = c->what ? w : sqrt(w / t);
                /* Beyond the last expiry the vol is flat: the last row's. Where w(t) overflows
                   (a huge t) it is taken from that row directly; elsewhere as w / t, as the GPU. */
                if (isinf(r) && t > s->expiries[s->nt - 1])
                    r = c->what ? r : last_row_vol(s, K);
            }
        } else {
            double vol = vol_mode1(s, K, t);
            r = c->what ? vol * vol * t : vol;
        }
        c->out[i] = r;
    }
}

/* The grid's own checks; a bad grid is an error of the call, not NaN. */
static int surface_valid(const tg_surface *s)
{
    if (s->nk < 1 || s->nt < 1 || !s->strikes || !s->expiries || !s->vols)
        return 0;
    if (s->mode != 0 && s->mode != 1)
        return 0;
    for (int32_t j = 0; j < s->nk; j++) {
        if (!isfinite(s->strikes[j]) || (j > 0 && !(s->strikes[j] > s->strikes[j - 1])))
            return 0;
    }
    for (int32_t i = 0; i < s->nt; i++) {
        double T = s->expiries[i];
        if (!isfinite(T) || !(T > 0) || (i > 0 && !(T > s->expiries[i - 1])))
            return 0;
    }
    int64_t nv = (int64_t)s->nk * s->nt;
    for (int64_t k = 0; k < nv; k++) {
        if (!isfinite(s->vols[k]) || s->vols[k] < 0)
            return 0;
    }
    return 1;
}

int tg_surface_eval(const tg_surface *surf, int64_t n, const double *strike, int64_t s_strike,
                    const double *t, int64_t s_t, double *out, int32_t what, int nthreads)
{
    if (surf == NULL || n < 0 || (what != 0 && what != 1) || s_strike < 0 || s_t < 0)
        return TG_EINVAL;
    if (!surface_valid(surf))
        return TG_EINVAL;
    if (n == 0)
        return TG_OK;
    if (!strike || !t || !out)
        return TG_EINVAL;
    surface_ctx ctx = {surf, strike, t, s_strike, s_t, out, what};
    return tg_parallel_for(n, nthreads, surface_range, &ctx);
}
