/*
 * lbr_core.h -- implied Black volatility by "Let's Be Rational", shared by the CPU and GPU backends.
 *
 * Method: P. Jaeckel, "Let's Be Rational", Wilmott (2015), pp. 40-53. The price is reduced to the
 * normalised price b(x, s) of an out-of-the-money call, x = ln(F/K) <= 0, s = sigma sqrt(T):
 *     b(x, s) = e^{x/2} Phi(x/s + s/2) - e^{-x/2} Phi(x/s - s/2),   0 <= b < b_max = e^{x/2}.
 * The s axis is cut into four branches at s_l < s_c = sqrt(2|x|) (the inflection point) < s_u, the
 * points where the tangent at s_c meets 0 and b_max. In the two middle branches the initial guess is
 * a rational cubic interpolation of s(b); below s_l it interpolates the lower asymptotic
 * f_l(s) = (2 pi |x| / 3 sqrt 3) Phi(-|x| / (sqrt 3 s))^3 and inverts it in closed form; above s_u
 * it does the same with the upper asymptotic f_u(s) = Phi(-s/2). Two Householder(3) iterations
 * follow, on 1/ln b(s) - 1/ln(beta) below s_l, on b(s) - beta in the middle, and on
 * ln(b_max - beta) - ln(b_max - b(s)) above s_u, so that each objective is nearly linear in s.
 *
 * Accuracy of b: with h = x/s and t = s/2, b = P (M(h+t) - M(h-t)) where P = b'(s) =
 * exp(-(h^2+t^2)/2)/sqrt(2 pi) is the normalised vega and M(z) = Phi(z)/phi(z) is the Mills ratio.
 * The difference Delta = M(h+t) - M(h-t) = b/b' is what loses digits if taken naively, so it is
 * computed in three regions: an asymptotic series in 1/(h+t) where -(h+t) is large (deep out of the
 * money), a Taylor series in t about h where t is small, and the difference of two scaled
 * complementary error functions elsewhere. Above the inflection point b_max - b is a sum of two
 * positive terms and is used directly for the upper objective. Working with Delta and ln b keeps
 * prices down to the smallest doubles (and their logarithms) free of underflow.
 *
 * erfcx(x) = exp(x^2) erfc(x) uses W. J. Cody's rational Chebyshev approximations ("Rational
 * Chebyshev approximation for the error function", Math. Comp. 23 (1969) 631-637), with the
 * coefficients as published in netlib SPECFUN (CALERF). The inverse normal CDF used by the initial
 * guesses is P. J. Acklam's rational approximation (relative error < 1.2e-9, ample for a starting
 * point that two fourth-order iterations refine).
 *
 * Entry points: tg_lbr_implied_black_vol (undiscounted price, forward measure);
 * tg_lbr_implied_vol_bsm and tg_lbr_implied_vol_bsm_f32 (premiums with rate and dividend yield:
 * what csrc/cpu/iv.c runs per element, and what a GPU kernel runs to agree with it, bounds
 * included); tg_lbr_normalised_black and tg_lbr_normalised_implied_vol.
 *
 * Measured against 80-digit mpmath: b to within ~4 eps (4 + (h^2+t^2)/2) relative, the second term
 * being the rounding of the exponent, i.e. what one ulp of x or s changes; the solved s to within a
 * few ulps of what the conditioning of b(s) allows, everywhere, with the fixed two iterations.
 *
 * Portability: plain C usable from C11 and from CUDA C. Every function is TG_HD static inline; no
 * globals, no allocation, nothing from libc but <math.h>.
 */
#ifndef TICKGPU_LBR_CORE_H
#define TICKGPU_LBR_CORE_H

#include <math.h>

#include "../tickgpu.h"

#ifndef TG_HD
#ifdef __CUDACC__
#define TG_HD __host__ __device__
#else
#define TG_HD
#endif
#endif

/* Building GPU code with -DTG_LBR_OUTLINE keeps erfcx, Delta and Gamma out of line on the device
   (and the refinement loop rolled): about half the machine code, at the price of calls. Whether
   that pays depends on instruction-cache pressure; scripts/kernel-sweep measures it. No effect on
   host code or on results. */
#if defined(__CUDA_ARCH__) && defined(TG_LBR_OUTLINE)
#define TG_LBR_DEVICE_NOINLINE __noinline__
#else
#define TG_LBR_DEVICE_NOINLINE
#endif

#define TG_LBR_SQRT_2PI 2.50662827463100050242
#define TG_LBR_LN_SQRT_2PI 0.91893853320467274178
#define TG_LBR_SQRT_PI_OVER_2 1.25331413731550025121
#define TG_LBR_INV_SQRT_PI 0.56418958354775628695
#define TG_LBR_INV_SQRT_2 0.70710678118654752440
#define TG_LBR_SQRT_3 1.73205080756887729353
#define TG_LBR_DBL_EPSILON 2.2204460492503131e-16

/* Delta regions (see the header comment). Beyond -(h+t) = 10 the asymptotic series of the Mills
   ratio reaches double precision before it starts to diverge (its smallest term is ~e^{-50});
   below t = 0.21 the Taylor series in t needs at most eight terms. In between, the erfcx difference
   loses at most ~(|h|+t)/(2t) < 25 ulps to cancellation. */
#define TG_LBR_ASYMPTOTIC_U 10.0
#define TG_LBR_SMALL_T 0.21

/* ---- special functions ---------------------------------------------------------------------- */

/* exp(y*y) for y >= 0 without the relative error y^2 * eps that rounding y*y would cause: split y
   into a part with 4 fractional bits (whose square is exact) and the rest (as in Cody's CALERF). */
TG_HD static inline double tg_lbr_exp_square(double y)
{
    double yh = floor(16.0 * y) / 16.0;
    double del = (y - yh) * (y + yh);
    return exp(yh * yh) * exp(del);
}

/* Scaled complementary error function erfcx(x) = exp(x^2) erfc(x), full relative precision.
   For x < -26.6 the result overflows to +inf. */
TG_HD TG_LBR_DEVICE_NOINLINE static inline double tg_lbr_erfcx(double x)
{
    double y = fabs(x), r;
    if (y <= 0.46875) {
        double z = y * y;
        double num = (((1.85777706184603153e-1 * z + 3.16112374387056560e0) * z
                       + 1.13864154151050156e2) * z + 3.77485237685302021e2) * z
                     + 3.20937758913846947e3;
        double den = (((z + 2.36012909523441209e1) * z + 2.44024637934444173e2) * z
                      + 1.28261652607737228e3) * z + 2.84423683343917062e3;
        return exp(z) * (1.0 - x * num / den);
    }
    if (y <= 4.0) {
        /* Estrin's scheme: half the dependency chain of Horner's; with every coefficient and y
           positive, either order is accurate to a few ulps. */
        double y2 = y * y, y4 = y2 * y2;
        double num = ((1.23033935479799725e3 + 2.05107837782607147e3 * y)
                      + (1.71204761263407058e3 + 8.81952221241769090e2 * y) * y2)
                     + ((2.98635138197400131e2 + 6.61191906371416295e1 * y)
                        + (8.88314979438837594e0 + 5.64188496988670089e-1 * y) * y2) * y4
                     + 2.15311535474403846e-8 * (y4 * y4);
        double den = ((1.23033935480374942e3 + 3.43936767414372164e3 * y)
                      + (4.36261909014324716e3 + 3.29079923573345963e3 * y) * y2)
                     + ((1.62138957456669019e3 + 5.37181101862009858e2 * y)
                        + (1.17693950891312499e2 + 1.57449261107098347e1 * y) * y2) * y4
                     + y4 * y4;
        r = num / den;
    } else {
        /* z underflows to 0 for huge y, leaving the leading term 1/(sqrt(pi) y). */
        double z = 1.0 / (y * y);
        double num = ((((1.63153871373020978e-2 * z + 3.05326634961232344e-1) * z
                        + 3.60344899949804439e-1) * z + 1.25781726111229246e-1) * z
                      + 1.60837851487422766e-2) * z + 6.58749161529837803e-4;
        double den = ((((z + 2.56852019228982242e0) * z + 1.87295284992346047e0) * z
                       + 5.27905102951428412e-1) * z + 6.05183413124413191e-2) * z
                     + 2.33520497626869185e-3;
        r = (TG_LBR_INV_SQRT_PI - z * num / den) / y;
    }
    if (x < 0.0)
        r = (y < 26.6 ? 2.0 * tg_lbr_exp_square(y) : INFINITY) - r;
    return r;
}

/* Inverse normal CDF, P. J. Acklam's approximation (relative error < 1.2e-9 for 0 < p < 1). Used
   for initial guesses only. */
TG_HD static inline double tg_lbr_inv_norm_cdf(double p)
{
    if (!(p > 0.0))
        return -INFINITY;
    if (!(p < 1.0))
        return INFINITY;
    if (p < 0.02425 || p > 0.97575) {
        double q = sqrt(-2.0 * log(p < 0.5 ? p : 1.0 - p));
        double z = (((((-7.784894002430293e-03 * q - 3.223964580411365e-01) * q
                       - 2.400758277161838e+00) * q - 2.549732539343734e+00) * q
                     + 4.374664141464968e+00) * q + 2.938163982698783e+00)
                   / ((((7.784695709041462e-03 * q + 3.224671290700398e-01) * q
                        + 2.445134137142996e+00) * q + 3.754408661907416e+00) * q + 1.0);
        return p < 0.5 ? z : -z;
    }
    double q = p - 0.5, r = q * q;
    return (((((-3.969683028665376e+01 * r + 2.209460984245205e+02) * r - 2.759285104469687e+02) * r
              + 1.383577518672690e+02) * r - 3.066479806614716e+01) * r + 2.506628277459239e+00) * q
           / (((((-5.447609879822406e+01 * r + 1.615858368580409e+02) * r - 1.556989798598866e+02) * r
                + 6.680131188771972e+01) * r - 1.328068155288572e+01) * r + 1.0);
}

/* ---- the normalised Black function ---------------------------------------------------------- */

/* Mills ratio M(z) = Phi(z) / phi(z). */
TG_HD static inline double tg_lbr_mills(double z)
{
    return TG_LBR_SQRT_PI_OVER_2 * tg_lbr_erfcx(-z * TG_LBR_INV_SQRT_2);
}

/* Delta(h, t) = M(h+t) - M(h-t) = b(x, s) / b'(x, s) for h = x/s <= 0, t = s/2 > 0, h + t <= 1,
   with full relative precision. */
TG_HD TG_LBR_DEVICE_NOINLINE static inline double tg_lbr_delta(double h, double t)
{
    double u = -(h + t);
    if (u >= TG_LBR_ASYMPTOTIC_U) {
        /* M(-z) ~ sum_k (-1)^k (2k-1)!! / z^{2k+1}. With v = u + 2t and r = u/v,
           u^{-n} - v^{-n} = u^{-n} (1 - r) (1 + r + ... + r^{n-1}): every term is computed
           without cancellation, and the alternating sum converges until its k ~ u^2/2. */
        double v = t - h, r = u / v, r2 = r * r;
        double inv_u2 = 1.0 / (u * u);
        double c = 1.0, geo = 1.0, rpow = r; /* c = (2k-1)!!/u^{2k}, geo = S_{2k+1}(r), rpow = r^{2k+1} */
        double sum = 1.0;
        for (int k = 1; k <= 40; k++) {
            c *= (2.0 * k - 1.0) * inv_u2;
            geo += rpow * (1.0 + r);
            rpow *= r2;
            double term = c * geo;
            sum += (k & 1) ? -term : term;
            if (term < 1e-17 * sum)
                break;
        }
        return (2.0 * t / v) * sum / u;
    }
    if (t <= TG_LBR_SMALL_T) {
        /* Delta = 2 sum_{n odd} M^(n)(h) t^n / n!, with M' = 1 + hM and
           M^(n+1) = h M^(n) + n M^(n-1). */
        /* 1 / ((n+1)(n+2)) for n = 1, 3, 5, ...: t^n/n! from one step to the next. */
        const double inv_step[13] = {1.0 / 6, 1.0 / 20, 1.0 / 42, 1.0 / 72, 1.0 / 110, 1.0 / 156,
                                     1.0 / 210, 1.0 / 272, 1.0 / 342, 1.0 / 420, 1.0 / 506,
                                     1.0 / 600, 1.0 / 702};
        double y0 = tg_lbr_mills(h), y1 = 1.0 + h * y0;
        double t2 = t * t, tn = t, sum = y1 * t;
        for (int k = 0; k < 13; k++) {
            double n = 2.0 * k + 1.0;
            double y2 = h * y1 + n * y0;
            double y3 = h * y2 + (n + 1.0) * y1;
            tn *= t2 * inv_step[k];
            double term = y3 * tn;
            sum += term;
            if (term < 3e-17 * sum)  /* a quarter ulp: the tail is below rounding */
                break;
            y0 = y2;
            y1 = y3;
        }
        return 2.0 * sum;
    }
    return TG_LBR_SQRT_PI_OVER_2 * (tg_lbr_erfcx(u * TG_LBR_INV_SQRT_2)
                                    - tg_lbr_erfcx((t - h) * TG_LBR_INV_SQRT_2));
}

/* Gamma(h, t) = M(-(h+t)) + M(h-t) = (b_max - b) / b' for h + t > 0: a sum of positive terms. */
TG_HD TG_LBR_DEVICE_NOINLINE static inline double tg_lbr_gamma(double h, double t)
{
    return TG_LBR_SQRT_PI_OVER_2 * (tg_lbr_erfcx((h + t) * TG_LBR_INV_SQRT_2)
                                    + tg_lbr_erfcx((t - h) * TG_LBR_INV_SQRT_2));
}

/* ln b'(x, s) = ln P with h = x/s, t = s/2. */
TG_HD static inline double tg_lbr_log_vega(double h, double t)
{
    return -0.5 * (h * h + t * t) - TG_LBR_LN_SQRT_2PI;
}

/* Normalised price of an out-of-the-money call, x <= 0, s > 0. */
TG_HD static inline double tg_lbr_black_otm(double x, double s)
{
    double h = x / s, t = 0.5 * s;
    double vega = exp(tg_lbr_log_vega(h, t));
    if (h + t <= 1.0)
        return vega * tg_lbr_delta(h, t);
    /* Well above the inflection point b is within a factor ~3 of b_max, and b_max - b is accurate. */
    return exp(0.5 * x) - vega * tg_lbr_gamma(h, t);
}

/* b(x, s, theta) = Black(F, K, sigma, T, theta) / sqrt(F K), x = ln(F/K), s = sigma sqrt(T),
   theta = +1 call, -1 put. s = 0 gives the intrinsic value; NaN for non-finite x, s < 0 or s NaN. */
TG_HD static inline double tg_lbr_normalised_black(double x, double s, double theta)
{
    if (!(s >= 0.0) || x != x || (theta != 1.0 && theta != -1.0))
        return NAN;
    double ax = fabs(x);
    /* In-the-money: b(x, s, theta) = iota + b(-|x|, s, +1) by put-call parity and the symmetry
       b(x, s, theta) = b(-x, s, -theta). */
    double iota = theta * x > 0.0 ? 2.0 * sinh(0.5 * ax) : 0.0;
    if (s == 0.0 || ax == INFINITY)
        return iota;
    if (s == INFINITY)
        return iota + exp(-0.5 * ax);
    return iota + tg_lbr_black_otm(-ax, s);
}

/* ---- rational cubic interpolation (Delbourgo and Gregory, 1985) ------------------------------ */

/* The rational cubic through (xl, yl), (xr, yr) with slopes dl, dr and control parameter r > -1;
   r = 3 is the cubic Hermite interpolant, r -> infinity the straight line. */
TG_HD static inline double tg_lbr_rational_cubic(double x, double xl, double xr, double yl,
                                                 double yr, double dl, double dr, double r)
{
    double h = xr - xl;
    if (!(fabs(h) > 0.0))
        return 0.5 * (yl + yr);
    double s = (x - xl) / h, o = 1.0 - s;
    if (!(r < 1.0 / TG_LBR_DBL_EPSILON))
        return yl * o + yr * s;
    double s2 = s * s, o2 = o * o;
    return (yr * s2 * s + (r * yr - h * dr) * s2 * o + (r * yl + h * dl) * s * o2 + yl * o2 * o)
           / (1.0 + (r - 3.0) * s * o);
}

/* Smallest r keeping the interpolant convex (or concave) where the data are, and monotone where
   they are; -1 + eps (the pole-free limit) otherwise. */
TG_HD static inline double tg_lbr_rational_cubic_min_r(double dl, double dr, double slope)
{
    double rmin = -1.0 + 1e-8;
    if ((dl < slope && slope < dr) || (dl > slope && slope > dr)) {
        double a = (dr - dl) / (dr - slope), b = (dr - dl) / (slope - dl);
        rmin = fmax(rmin, fmax(a, b));
    }
    if (slope != 0.0 && dl * slope >= 0.0 && dr * slope >= 0.0)
        rmin = fmax(rmin, (dl + dr) / slope);
    return rmin;
}

/* Control parameter matching the second derivative d2 at the left (side < 0) or right end. */
TG_HD static inline double tg_lbr_rational_cubic_r(double xl, double xr, double yl, double yr,
                                                   double dl, double dr, double d2, int side)
{
    double h = xr - xl, slope = (yr - yl) / h;
    double r = side < 0 ? (0.5 * h * d2 + (dr - dl)) / (slope - dl)
                        : (0.5 * h * d2 + (dr - dl)) / (dr - slope);
    double rmin = tg_lbr_rational_cubic_min_r(dl, dr, slope);
    if (!(r >= rmin))  /* also catches NaN */
        r = rmin;
    return r;
}

/* ---- the solver ----------------------------------------------------------------------------- */

/* How far, relative to s, the root may lie outside its branch's bracket. The bracket ends are
   where b takes the values b_l, b_c, b_u that chose the branch, and those are known to the
   rounding of b there: a price within a few ulps of one of them has its root on either side of
   the end, up to ~1e4 eps (at |x| = 700; ~100 eps for ordinary x) beyond it. 2^-32 covers that
   with room to spare and is still far below any step that needs the halving safeguard. */
#define TG_LBR_BRACKET_SLACK 0x1p-32

/* One Householder(3) step s -> s + nu (1 + h2 nu / 2) / (1 + nu (h2 + h3 nu / 6)), falling back to
   Newton where the higher-order factor is not finite or not positive; then kept inside the bracket
   [lo, hi], widened by TG_LBR_BRACKET_SLACK, by halving the distance to the bracket end it would
   cross. The bracket is closed and slack because the root may be an end exactly, or an ulp or so
   beyond it (a price on a branch boundary): a step that lands there must stay there, where halving
   would leave the second iteration short of the root. Only s = 0 and s = inf, where b has no
   objective to evaluate, are excluded. */
TG_HD static inline double tg_lbr_householder_step(double s, double nu, double h2, double h3,
                                                   double lo, double hi)
{
    double num = 1.0 + 0.5 * h2 * nu, den = 1.0 + nu * (h2 + h3 * nu * (1.0 / 6.0));
    double step = nu * num / den;
    if (!(num > 0.0 && den > 0.0) || !isfinite(step))
        step = nu;
    double next = s + step;
    if (!(next >= lo * (1.0 - TG_LBR_BRACKET_SLACK) && next > 0.0))
        next = 0.5 * (s + lo);
    else if (!(next <= hi * (1.0 + TG_LBR_BRACKET_SLACK) && next < INFINITY))
        next = hi < INFINITY ? 0.5 * (s + hi) : 2.0 * s;
    return next;
}

/* The solver's state between its two stages: the initial guess s, the bracket (lo, hi) around the
   root and the branch (0 lowest, 1 lower middle, 2 upper middle, 3 upper) that picks the
   objective, for beta = b(x, s) with x <= 0 and b_max = e^{x/2}. The stages are separate functions
   so that a GPU kernel can regroup its threads by branch between them (threads of one warp then
   run one objective's code, not all of them in turn); run back to back they are the plain solver. */
typedef struct {
    double beta, x, b_max;
    double s, lo, hi;
    int branch;
} tg_lbr_otm_state;

/* Stage 1a: the inflection point s_c of b(s), where the price b_c decides between the lower
   branches (beta < b_c) and the upper ones. A stage of its own for the same reason as the split
   above: the lower and upper guesses are different code. */
typedef struct {
    double beta, x, b_max;
    double s_c, v_c, t_c, b_c;
} tg_lbr_otm_pivot;

TG_HD static inline void tg_lbr_otm_pivot_point(double beta, double x, double b_max, tg_lbr_otm_pivot *pv)
{
    double s_c = sqrt(-2.0 * x);
    /* At s_c: h = -t, b' = b_max / sqrt(2 pi), b'' = 0 (the inflection point), and
       Delta = M(0) - M(-2t). */
    double v_c = b_max * (1.0 / TG_LBR_SQRT_2PI);
    double t_c = 0.5 * s_c;
    pv->b_c = x < 0.0 ? v_c * (t_c <= TG_LBR_SMALL_T
                                   ? tg_lbr_delta(-t_c, t_c)
                                   : TG_LBR_SQRT_PI_OVER_2 * (1.0 - tg_lbr_erfcx(s_c * TG_LBR_INV_SQRT_2)))
                      : 0.0;
    pv->beta = beta;
    pv->x = x;
    pv->b_max = b_max;
    pv->s_c = s_c;
    pv->v_c = v_c;
    pv->t_c = t_c;
}

/* Stage 1b: the branch and the initial guess, from rational cubic interpolation of s(beta) or of
   the asymptotic forms (see the header comment). */
TG_HD static inline void tg_lbr_otm_guess_from(const tg_lbr_otm_pivot *pv, tg_lbr_otm_state *st)
{
    double beta = pv->beta, x = pv->x, b_max = pv->b_max;
    double s_c = pv->s_c, v_c = pv->v_c, t_c = pv->t_c, b_c = pv->b_c;
    double s, lo, hi;
    int branch; /* 0 lowest, 1 lower middle, 2 upper middle, 3 upper */

    if (beta < b_c) {
        double s_l;
        if (t_c <= TG_LBR_SMALL_T) {
            /* s_l = s_c - Delta_c = int_0^{2t} w M(-w) dw
                   = sum_n (-1)^n M^(n)(0) (2t)^{n+2} / ((n+2) n!), with M(0) = sqrt(pi/2),
               M'(0) = 1, M^(n+1)(0) = n M^(n-1)(0): the difference itself, free of the
               cancellation that leaves no correct digit once |x| < 1e-16. */
            double w = s_c, m0 = TG_LBR_SQRT_PI_OVER_2, m1 = 1.0;
            double wn = w * w, sum = 0.0; /* wn = w^{n+2} / n! */
            for (int n = 0; n < 40; n++) {
                double term = m0 * wn / (n + 2.0);
                sum += (n & 1) ? -term : term;
                if (term < 1e-17 * sum)
                    break;
                double m2 = (n + 1.0) * m0;
                m0 = m1;
                m1 = m2;
                wn *= w / (n + 1.0);
            }
            s_l = sum;
        } else {
            s_l = s_c - b_c / v_c;
        }
        if (!(s_l > 0.0)) {
            /* Only for subnormal |x|, where s_l (~ 1.25 |x|) underflows: b is then nearly linear in
               s up to s_c, and the iterations start from that line. */
            s = s_c * (beta / b_c);
            branch = 1;
            lo = 0.0;
            hi = s_c;
            goto iterate;
        }
        double h = x / s_l, t = 0.5 * s_l;
        double v_l = s_l > 0.0 ? exp(tg_lbr_log_vega(h, t)) : 0.0;
        double b_l = s_l > 0.0 ? v_l * tg_lbr_delta(h, t) : 0.0;
        double w2 = (h - t) * (h + t) / s_l;
        if (beta < b_l) {
            /* f(beta) = f_l(s(beta)), interpolated on [0, b_l] from f(0) = 0, f'(0) = 1. */
            double ax = fabs(x), c = 2.0 * 3.14159265358979323846 * ax / (3.0 * TG_LBR_SQRT_3);
            double z = -ax / (TG_LBR_SQRT_3 * s_l), g = -z / s_l;
            double gauss = exp(-0.5 * z * z);
            double Phi = 0.5 * tg_lbr_erfcx(-z * TG_LBR_INV_SQRT_2) * gauss;
            double phi = gauss * (1.0 / TG_LBR_SQRT_2PI);
            double f_l = c * Phi * Phi * Phi;
            double df = 3.0 * c * Phi * Phi * phi * g;
            double d2f = 3.0 * c * Phi * phi * g * ((2.0 * phi - z * Phi) * g - 2.0 * Phi / s_l);
            double f_b = df / v_l, f_bb = (d2f - df * w2) / (v_l * v_l);
            double r = tg_lbr_rational_cubic_r(0.0, b_l, 0.0, f_l, 1.0, f_b, f_bb, +1);
            double f = tg_lbr_rational_cubic(beta, 0.0, b_l, 0.0, f_l, 1.0, f_b, r);
            if (!(f > 0.0)) {
                /* Round-off for extreme |x|: the quadratic with f(0) = 0, f'(0) = 1, f(b_l) = f_l. */
                double q = beta / b_l;
                f = beta + (f_l - b_l) * q * q;
            }
            /* f / c may underflow where f is subnormal: then take the roots apart */
            double p = f > 1e-290 ? cbrt(f / c) : cbrt(f) / cbrt(c);
            double zi = tg_lbr_inv_norm_cdf(p);
            s = ax / (TG_LBR_SQRT_3 * fabs(zi));
            branch = 0;
            lo = 0.0;
            hi = s_l;
        } else {
            /* s(beta): s' = 1/b', s'' = -b''/b'^3 = -w2/b'^2. */
            double r = tg_lbr_rational_cubic_r(b_l, b_c, s_l, s_c, 1.0 / v_l, 1.0 / v_c,
                                               -w2 / (v_l * v_l), -1);
            s = tg_lbr_rational_cubic(beta, b_l, b_c, s_l, s_c, 1.0 / v_l, 1.0 / v_c, r);
            branch = 1;
            lo = s_l;
            hi = s_c;
        }
    } else {
        double s_u = s_c + (b_max - b_c) / v_c;
        double h = x / s_u, t = 0.5 * s_u;
        double v_u = exp(tg_lbr_log_vega(h, t));
        double b_u = b_max - v_u * tg_lbr_gamma(h, t);
        double w2 = (h - t) * (h + t) / s_u;
        if (beta <= b_u) {
            double r = tg_lbr_rational_cubic_r(b_c, b_u, s_c, s_u, 1.0 / v_c, 1.0 / v_u,
                                               -w2 / (v_u * v_u), +1);
            s = tg_lbr_rational_cubic(beta, b_c, b_u, s_c, s_u, 1.0 / v_c, 1.0 / v_u, r);
            branch = 2;
            lo = s_c;
            hi = s_u;
        } else {
            /* f(beta) = f_u(s(beta)) = Phi(-s/2), interpolated on [b_u, b_max] towards
               f(b_max) = 0, f'(b_max) = -1/2. */
            double gauss = exp(-0.5 * t * t);
            double phi = gauss * (1.0 / TG_LBR_SQRT_2PI);
            double f_u = 0.5 * tg_lbr_erfcx(t * TG_LBR_INV_SQRT_2) * gauss;
            double f_b = -0.5 * phi / v_u;
            double f_bb = phi * (0.125 * s_u + 0.5 * w2) / (v_u * v_u);
            double r = tg_lbr_rational_cubic_r(b_u, b_max, f_u, 0.0, f_b, -0.5, f_bb, -1);
            double f = tg_lbr_rational_cubic(beta, b_u, b_max, f_u, 0.0, f_b, -0.5, r);
            if (!(f > 0.0))
                f = 1e-300;  /* beyond the interpolation's resolution: start far up, iterate down */
            if (!(f < f_u))
                f = f_u;
            s = -2.0 * tg_lbr_inv_norm_cdf(f);
            branch = 3;
            lo = s_u;
            hi = INFINITY;
        }
    }
    /* The guess interpolates s(beta) between the bracket ends, so at a branch boundary (beta = b_l,
       b_c or b_u, exactly or within the rounding of the interpolant) it is that end or an ulp
       beyond it, and so is the root: snap it onto the closed bracket rather than restart from
       the middle, from where two iterations do not get back (see TG_LBR_BRACKET_SLACK). Only a
       guess with nothing to say (NaN, or one at s = 0 or s = inf, where b has no objective)
       restarts from inside. */
    if (s < lo)
        s = lo;
    else if (s > hi)
        s = hi;
    if (!(s > 0.0 && s < INFINITY))
        s = hi < INFINITY ? 0.5 * (lo + hi) : 2.0 * lo;
iterate:
    st->beta = beta;
    st->x = x;
    st->b_max = b_max;
    st->s = s;
    st->lo = lo;
    st->hi = hi;
    st->branch = branch;
}

/* Stage 2: two Householder(3) steps on the branch's objective; returns the total vol s. */
TG_HD static inline double tg_lbr_otm_refine(const tg_lbr_otm_state *st)
{
    double beta = st->beta, x = st->x, b_max = st->b_max;
    double s = st->s, lo = st->lo, hi = st->hi;
    int branch = st->branch;
    double ln_beta = branch == 0 ? log(beta) : 0.0;
    double ln_room = branch == 3 ? log(b_max - beta) : 0.0;
#if defined(__CUDA_ARCH__) && defined(TG_LBR_OUTLINE)
#pragma unroll 1
#endif
    for (int iter = 0; iter < 2; iter++) {
        double inv_s = 1.0 / s;
        double h = x / s, t = 0.5 * s, h_s = h * inv_s;  /* h rounded once: it sets exp(-h^2/2) */
        double w2 = (h - t) * (h + t) * inv_s;
        double w3 = w2 * w2 - 3.0 * h_s * h_s - 0.25;
        double nu, h2, h3;
        int above;  /* b(s) > beta */
        if (branch == 0) {
            /* g = 1/ln b - 1/ln beta */
            double delta = tg_lbr_delta(h, t);
            double L = tg_lbr_log_vega(h, t) + log(delta);
            double u = 1.0 / delta, k = 1.0 + 2.0 / L;
            nu = L * (ln_beta - L) / ln_beta * delta;
            h2 = w2 - u * k;
            h3 = w3 + u * u * (2.0 + 6.0 / L + 6.0 / (L * L)) - 3.0 * w2 * u * k;
            above = L > ln_beta;
        } else if (branch == 3) {
            /* g = ln(b_max - beta) - ln(b_max - b) */
            double gam = tg_lbr_gamma(h, t);
            double ln_d = tg_lbr_log_vega(h, t) + log(gam);
            double u = 1.0 / gam;
            nu = (ln_d - ln_room) * gam;
            h2 = w2 + u;
            h3 = w3 + 3.0 * w2 * u + 2.0 * u * u;
            above = ln_d < ln_room;
        } else {
            /* g = b - beta */
            double vega = exp(tg_lbr_log_vega(h, t));
            double b = h + t <= 1.0 ? vega * tg_lbr_delta(h, t) : b_max - vega * tg_lbr_gamma(h, t);
            nu = (beta - b) / vega;
            h2 = w2;
            h3 = w3;
            above = b > beta;
        }
        if (above)
            hi = s;
        else
            lo = s;
        s = tg_lbr_householder_step(s, nu, h2, h3, lo, hi);
    }
    return s;
}

/* Total implied vol s of a normalised out-of-the-money call: b(x, s) = beta for x <= 0 and
   0 < beta < e^{x/2}. */
TG_HD static inline double tg_lbr_normalised_vol_otm(double beta, double x, double b_max)
{
    tg_lbr_otm_pivot pv;
    tg_lbr_otm_state st;
    tg_lbr_otm_pivot_point(beta, x, b_max, &pv);
    tg_lbr_otm_guess_from(&pv, &st);
    return tg_lbr_otm_refine(&st);
}

/* Time values within TG_LBR_INTRINSIC_BAND * max(fwd, strike) of zero, either side, are "at the
   intrinsic value" (status AT_INTRINSIC, vol 0). The intrinsic value fwd - strike is computed from
   rounded exponentials and products: libm's and CUDA's exp differ by up to an ulp or so, and a
   fused multiply-add may skip a rounding, so two correct implementations disagree on it by an ulp
   or two of max(fwd, strike) typically, 4 * 2^-52 max(fwd, strike) at worst. A price that one of
   them finds exactly at the intrinsic value (common: deep in the money near expiry the time value
   is below the resolution of a double) is then inside the band for both, and CPU and GPU give it
   the same status instead of AT_INTRINSIC on one and BELOW_INTRINSIC or a noise vol on the other.
   A time value that small has no correct digit: its vol would be set by the rounding of the
   inputs. Out of the money (intrinsic 0) there is no band: a small price there is known to its own
   relative precision. */
#define TG_LBR_INTRINSIC_BAND 0x1p-50

/* The no-arbitrage checks and the normalisation of the shared solver (below). Returns 1 when the
   price has a vol to solve for: the normalised out-of-the-money price *beta at *xn = -|x| with
   maximum *b_max. Otherwise returns 0 with *status set and *vol the answer (NaN, or 0 at the
   intrinsic value). */
TG_HD static inline int tg_lbr_solve_setup(double price, double fwd, double strike, double x, double theta,
                                           int float32_resolution, double *vol, int *status,
                                           double *beta, double *xn, double *b_max)
{
    double intrinsic = theta > 0.0 ? fwd - strike : strike - fwd;
    double cap = theta > 0.0 ? fwd : strike;
    if (!(intrinsic > 0.0))
        intrinsic = 0.0;
    if (price == intrinsic
        || (intrinsic > 0.0 && fabs(price - intrinsic) <= TG_LBR_INTRINSIC_BAND * fmax(fwd, strike))) {
        *status = TG_IV_AT_INTRINSIC;
        *vol = 0.0;
        return 0;
    }
    /* float32: a price less than its resolution below the intrinsic value can be the correct
       rounding of one at or above it, so it is PRECISION (below), not BELOW_INTRINSIC: the float32
       counterpart of the band above, wide enough for float32 rounding. */
    double resolution = float32_resolution ? 0x1p-21 * fmax(fwd, strike) : 0.0;
    if (price < intrinsic && !(intrinsic - price < resolution)) {
        *status = TG_IV_BELOW_INTRINSIC;
        *vol = NAN;
        return 0;
    }
    if (price >= cap) {
        *status = TG_IV_ABOVE_MAXIMUM;
        *vol = NAN;
        return 0;
    }
    if (float32_resolution) {
        /* time values below the resolution, negative ones included (see above) */
        if ((intrinsic > 0.0 && price - intrinsic < resolution) || cap - price < resolution) {
            *status = TG_IV_PRECISION;
            *vol = NAN;
            return 0;
        }
    }
    /* By parity, an in-the-money option's time value is the price of its out-of-the-money twin;
       by symmetry that twin is an out-of-the-money call at x = -|x|. */
    double scale = fwd * strike;
    scale = scale > 1e-300 && scale < 1e300 ? sqrt(scale) : sqrt(fwd) * sqrt(strike);
    *beta = (price - intrinsic) / scale;
    *xn = -fabs(x);
    /* e^{-|x|/2} = min(F, K) / sqrt(F K), without an exp */
    *b_max = fmin(fwd, strike) / scale;
    if (!(*beta > 0.0)) {
        /* Positive time value too small for a normalised double: vol 0 at this resolution. */
        *status = TG_IV_AT_INTRINSIC;
        *vol = 0.0;
        return 0;
    }
    if (*beta >= *b_max) {
        /* Below the maximum by less than its rounding. */
        *status = TG_IV_ABOVE_MAXIMUM;
        *vol = NAN;
        return 0;
    }
    *status = TG_IV_OK;
    return 1;
}

/* The shared solver behind both entry points. fwd and strike are the forward and strike in one
   currency unit of the same date (discounted or not), x = ln(fwd/strike), price in that unit.
   float32_resolution != 0 adds the float32 resolvability rule (see tg_lbr_implied_vol_bsm_f32). */
TG_HD static inline double tg_lbr_solve(double price, double fwd, double strike, double x, double T,
                                        double theta, int float32_resolution, int *status)
{
    double vol, beta, xn, b_max;
    if (!tg_lbr_solve_setup(price, fwd, strike, x, theta, float32_resolution, &vol, status, &beta, &xn, &b_max))
        return vol;
    return tg_lbr_normalised_vol_otm(beta, xn, b_max) / sqrt(T);
}

/* Total implied vol s = sigma sqrt(T) from a normalised price beta = b(x, s, theta), x = ln(F/K),
   theta = +1 call / -1 put; statuses as tg_lbr_implied_black_vol, with the intrinsic value
   2 sinh(|x|/2) in the money and the maximum e^{theta x / 2}. */
TG_HD static inline double tg_lbr_normalised_implied_vol(double beta, double x, double theta,
                                                         int *status)
{
    if (!(isfinite(beta) && isfinite(x)) || beta < 0.0 || (theta != 1.0 && theta != -1.0)) {
        *status = TG_IV_BAD_INPUT;
        return NAN;
    }
    double iota = theta * x > 0.0 ? 2.0 * sinh(0.5 * fabs(x)) : 0.0;
    double b_max = exp(-0.5 * fabs(x));   /* of the out-of-the-money twin */
    if (beta < iota) {
        *status = TG_IV_BELOW_INTRINSIC;
        return NAN;
    }
    if (beta == iota) {
        *status = TG_IV_AT_INTRINSIC;
        return 0.0;
    }
    double otm = beta - iota;
    if (beta >= exp(0.5 * theta * x) || otm >= b_max) {
        *status = TG_IV_ABOVE_MAXIMUM;
        return NAN;
    }
    *status = TG_IV_OK;
    return tg_lbr_normalised_vol_otm(otm, -fabs(x), b_max);
}

/* Implied Black vol of an undiscounted price (forward measure): F forward, K strike, T years,
   theta +1 call / -1 put. Returns sigma (NaN if none, 0 at intrinsic) and sets *status to a
   tg_iv_status: BAD_INPUT (non-finite, F <= 0, K <= 0, T <= 0, price < 0, theta not +-1),
   BELOW_INTRINSIC (price < max(theta (F - K), 0)), AT_INTRINSIC (price equal to it),
   ABOVE_MAXIMUM (price >= F for a call, >= K for a put), else OK. */
TG_HD static inline double tg_lbr_implied_black_vol(double price, double F, double K, double T,
                                                    double theta, int *status)
{
    if (!(isfinite(price) && isfinite(F) && isfinite(K) && isfinite(T)) || price < 0.0
        || !(F > 0.0) || !(K > 0.0) || !(T > 0.0) || (theta != 1.0 && theta != -1.0)) {
        *status = TG_IV_BAD_INPUT;
        return NAN;
    }
    double x = log(F / K);
    if (!isfinite(x))
        x = log(F) - log(K);
    return tg_lbr_solve(price, F, K, x, T, theta, 0, status);
}

/* Black-Scholes-Merton implied vol from a premium: spot S, strike K, t years, continuous rate r and
   dividend yield q. The bounds are taken on discounted quantities, S e^{-qt} and K e^{-rt}:
   intrinsic max(theta (S e^{-qt} - K e^{-rt}), 0), maximum S e^{-qt} (call) or K e^{-rt} (put).
   This is tg_lbr_implied_black_vol with F = S e^{(r-q)t} and the price undiscounted by e^{rt},
   written so that each bound is the one a user computes from the same inputs.
   tg_lbr_bsm_setup is everything up to the solve: it returns 1 with the normalised problem
   (beta, xn, b_max; sigma = s / sqrt(t)) when there is a vol to solve for, else 0 with *status and
   *vol final (as tg_lbr_solve_setup). */
TG_HD static inline int tg_lbr_bsm_setup(double price, double S, double K, double t, double r, double q,
                                         double theta, int float32_resolution, double *vol, int *status,
                                         double *beta, double *xn, double *b_max)
{
    if (!(isfinite(price) && isfinite(S) && isfinite(K) && isfinite(t) && isfinite(r)
          && isfinite(q)) || price < 0.0 || !(S > 0.0) || !(K > 0.0) || !(t > 0.0)
        || (theta != 1.0 && theta != -1.0)) {
        *status = TG_IV_BAD_INPUT;
        *vol = NAN;
        return 0;
    }
    /* exp(0) = 1 exactly: skipping it changes no result and saves two exps where r = q = 0 */
    double fwd = q != 0.0 ? S * exp(-q * t) : S, strike = r != 0.0 ? K * exp(-r * t) : K;
    if (!(fwd > 0.0 && strike > 0.0 && fwd < INFINITY && strike < INFINITY)) {
        *status = TG_IV_BAD_INPUT;  /* rate or dividend times t beyond what a double can discount */
        *vol = NAN;
        return 0;
    }
    double x = log(fwd / strike);
    if (!isfinite(x))
        x = log(fwd) - log(strike);
    return tg_lbr_solve_setup(price, fwd, strike, x, theta, float32_resolution, vol, status, beta, xn, b_max);
}

/* tg_lbr_bsm_setup, then the solve: the per-option work of both backends. */
TG_HD static inline double tg_lbr_implied_vol_bsm_impl(double price, double S, double K, double t,
                                                       double r, double q, double theta,
                                                       int float32_resolution, int *status)
{
    double vol, beta, xn, b_max;
    if (!tg_lbr_bsm_setup(price, S, K, t, r, q, theta, float32_resolution, &vol, status, &beta, &xn, &b_max))
        return vol;
    return tg_lbr_normalised_vol_otm(beta, xn, b_max) / sqrt(t);
}

TG_HD static inline double tg_lbr_implied_vol_bsm(double price, double S, double K, double t,
                                                  double r, double q, double theta, int *status)
{
    return tg_lbr_implied_vol_bsm_impl(price, S, K, t, r, q, theta, 0, status);
}

/* float32 inputs, solved in double, narrowed. Status PRECISION (NaN) where float32 inputs cannot
   resolve the option's distance to a no-arbitrage bound: with scale = max(S e^{-qt}, K e^{-rt}),
   when the option is in the money and its time value (price - intrinsic) is below 2^-21 scale in
   magnitude (either side of the intrinsic value: a price that far below it is not known to be
   below it; only prices further below are BELOW_INTRINSIC, and those within TG_LBR_INTRINSIC_BAND
   remain AT_INTRINSIC as in double), or when the room below the maximum (maximum - price) is below
   2^-21 scale. 2^-21 is 4 float32 unit roundoffs (2 to 4 ulps): each of price, S and K carries
   half an ulp of rounding, so a smaller difference has no correct digit. Out-of-the-money prices
   carry their own relative precision and are never flagged for their size. */
TG_HD static inline float tg_lbr_implied_vol_bsm_f32(float price, float S, float K, float t,
                                                     float r, float q, float theta, int *status)
{
    double v = tg_lbr_implied_vol_bsm_impl(price, S, K, t, r, q, theta, 1, status);
    return (float)v;
}

#endif
