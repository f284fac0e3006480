/*
 * The Black-Scholes-Merton greeks kernel, written once and instantiated for double and for float
 * (so that the float version computes in float: expf, erfcf, ... and does not pay for
 * conversions), on the CPU by greeks.c and on the GPU by csrc/cuda/mailbox.cu. Not a public
 * header: the includer defines, before each inclusion,
 *   REAL            the element type
 *   M(name)         the libm function of that type (M(exp) is exp or expf)
 *   C(x)            a literal of that type
 *   KERNEL_ELEMENT  the name of the one-option function to define
 *   KERNEL_LIMIT    the name of the zero-total-variance function to define
 *   KERNEL_RANGE    (CPU only, optional) the name of the range function over a greeks_ctx
 * TG_GREEKS_FN qualifies the per-option functions: `static` on the CPU, `static __device__` under
 * nvcc, so both backends compile the same source lines in the same order.
 */
#ifndef TG_GREEKS_FN
#ifdef __CUDACC__
#define TG_GREEKS_FN static __device__
#else
#define TG_GREEKS_FN static
#endif
#endif

/* The zero-total-variance limit (t == 0, or 1 / (sigma sqrt t) overflowing): the option is
   worth its (forward) intrinsic value. ITM / OTM are judged on the discounted forward, which at
   t == 0 is spot against strike. Exactly at the money the greeks take their one-sided limits as
   t -> 0 along S == K: delta +-1/2, gamma +inf, theta -inf, charm +-inf. Rare, so out of line. */
TG_GREEKS_FN void KERNEL_LIMIT(REAL S, REAL K, REAL t, REAL r, REAL sig, REAL q, REAL w, REAL *o)
{
    const REAL n0 = C(0.398942280401432677939946059934);    /* 1 / sqrt(2 pi) */
    t = M(fabs)(t);     /* t = -0.0 is t = 0 (sqrt(-0.0) = -0.0 would flip the signs of 1/sqt) */
    REAL Dq = M(exp)(-q * t), Dr = M(exp)(-r * t);
    REAL SDq = S * Dq, KDr = K * Dr;
    REAL m = w * (SDq - KDr);
    int atm = (m == 0);
    REAL itm = m > 0 ? C(1.0) : (atm ? C(0.5) : C(0.0));
    REAL sqt = M(sqrt)(t);
    const REAL huge = (REAL)INFINITY;
    /* At the money theta's time-decay term and charm's drift term diverge like 1/sqt: at
       sqt == 0 they are infinities of known sign, set as such (x / 0 is NaN where the product x
       has underflowed, as it does for tiny S, sigma in float32). drift_sig is
       (r - q + sigma^2/2) / sigma, formed without squaring sigma (which overflows for huge
       sigma in float32). */
    REAL decay = sqt > 0 ? -SDq * n0 * sig / (C(2.0) * sqt) : -huge;
    REAL drift_sig = (r - q) / sig + C(0.5) * sig;
    REAL drift_term = sqt > 0 ? n0 * Dq * drift_sig / (C(2.0) * sqt) : M(copysign)(huge, drift_sig);

    o[0] = m > 0 ? m : C(0.0);
    o[1] = w * Dq * itm;
    o[2] = atm ? huge : C(0.0);
    o[3] = atm ? SDq * n0 * sqt : C(0.0);
    /* itm weights first: out of the money the terms are 0 even where t S or t K overflows. */
    o[4] = (atm ? decay : C(0.0)) + w * (q * (SDq * itm) - r * (KDr * itm));
    o[5] = w * t * (KDr * itm);
    o[6] = -w * t * (SDq * itm);
    o[7] = C(0.0);
    o[8] = C(0.0);
    o[9] = w * q * Dq * itm;
    if (atm && drift_sig != 0)
        o[9] -= drift_term;
}

/* One option: its ten outputs into o[0..9] (price, delta, gamma, vega, theta, rho, phi, vanna,
   volga, charm; NaN in all ten when the option is invalid or out of range). Returns 1 when the
   option is valid but its total variance is zero (1 / (sigma sqrt t) overflows): the caller then
   takes KERNEL_LIMIT's values instead; 0 otherwise.
   Valid: S, K, sigma > 0, t >= 0 (-0.0 included), all finite. Out of range: the discounted spot
   S e^{-qt} or strike K e^{-rt} is 0 or overflows in REAL (rate or dividend times t beyond what
   REAL can discount) -- the option's value is then not a number of this type, and half its
   outputs would be inf - inf; the implied-vol solver reports the same options as BAD_INPUT. */
TG_GREEKS_FN int KERNEL_ELEMENT(REAL S, REAL K, REAL t, REAL r, REAL sig, REAL q, REAL w, REAL *o)
{
    const REAL inv_sqrt2 = C(0.707106781186547524400844362105);
    const REAL n0 = C(0.398942280401432677939946059934);
    const REAL nan = (REAL)NAN;
    const REAL huge = (REAL)INFINITY;

    /* Comparisons are false for NaN, so this also rejects NaN. */
    int valid = (S > 0) & (S < huge) & (K > 0) & (K < huge) & (t >= 0) & (t < huge)
              & (sig > 0) & (sig < huge) & (M(fabs)(r) < huge) & (M(fabs)(q) < huge);
    /* t = -0.0 passes t >= 0 and must be t = +0.0: sqrt(-0.0) = -0.0 would make 1/sst = -inf,
       which the zero-variance test below does not catch. (Invalid t < 0 gives NaN anyway.) */
    t = M(fabs)(t);

    REAL sqt = M(sqrt)(t);
    REAL sst = sig * sqt;                       /* total vol sigma sqrt(t) */
    REAL inv_sst = C(1.0) / sst;
    REAL Dq = M(exp)(-q * t), Dr = M(exp)(-r * t);
    REAL SDq = S * Dq, KDr = K * Dr;
    valid &= (SDq > 0) & (SDq < huge) & (KDr > 0) & (KDr < huge);
    /* ln(S/K). Near the money as log1p((S - K)/K): S - K is exact there (Sterbenz) and the log
       keeps its relative accuracy, where log(S / K) would carry the rounding of S / K (an
       absolute error of half an ulp of 1, amplified by 1/sst: visible in float32 vanna). Away
       from it log(S / K): the same absolute error is under an ulp of |ln(S/K)| >= ln 2 (log1p
       would lose the digits of S/K to (S - K)/K rounding towards -1, and give -inf once
       S/K < eps). Where S / K leaves [2^-100, 2^100] it may be subnormal or overflow, so
       log S - log K: |ln(S/K)| > 69 there and |ln S|, |ln K| < 745, so the cancellation costs
       under 11 ulps. */
    REAL ratio = S / K, lnSK;
    if (ratio > C(0.5) && ratio < C(2.0))
        lnSK = M(log1p)((S - K) / K);
    else if (ratio > C(0x1p-100) && ratio < C(0x1p100))
        lnSK = M(log)(ratio);
    else
        lnSK = M(log)(S) - M(log)(K);
    /* d1 and d2 each from the shared part, not d2 = d1 - sst: that is inf - inf where sst
       overflows, and one rounding fewer everywhere. */
    REAL dm = (lnSK + (r - q) * t) * inv_sst, half_sst = C(0.5) * sst;
    REAL d1 = dm + half_sst;
    REAL d2 = dm - half_sst;
    /* N(w d) through erfc: no 1 - N cancellation in either tail. */
    REAL Nd1 = C(0.5) * M(erfc)(-w * d1 * inv_sqrt2);
    REAL Nd2 = C(0.5) * M(erfc)(-w * d2 * inv_sqrt2);
    REAL pdf = n0 * M(exp)(C(-0.5) * d1 * d1);
    REAL SDq_N1 = SDq * Nd1, KDr_N2 = KDr * Nd2;
    REAL Dq_pdf = Dq * pdf;
    REAL vega = SDq * pdf * sqt;
    REAL inv_sig = C(1.0) / sig;

    REAL price = w * (SDq_N1 - KDr_N2);
    /* Far out of the money the two legs are tails of a few ulps each (or subnormal), and their
       difference may round below zero (-2e-322): a price is never negative, and implied_vol would
       refuse it; nor -0.0 (a put whose legs both underflow). NaN stays NaN. */
    price = price <= C(0.0) ? C(0.0) : price;
    REAL delta = w * Dq * Nd1;
    REAL gamma = Dq_pdf * inv_sst / S;
    REAL theta = C(-0.5) * SDq * pdf * sig / sqt + w * (q * SDq_N1 - r * KDr_N2);
    REAL rho = w * t * KDr_N2;
    REAL phi = -w * t * SDq_N1;
    /* The density terms of vanna, volga and charm: pdf(d1) decays faster than any power of d1,
       d2, 1/sigma or sst grows, so where it has underflowed to 0 the terms are 0 -- not
       0 * inf = NaN, which they would be where d1 or d2 is infinite (sst overflowing, or
       ln(S/K) / sst overflowing for a tiny sigma) or sst d2 overflows (a huge sigma). */
    int dense = pdf > 0;
    REAL vanna = dense ? -Dq_pdf * d2 * inv_sig : C(0.0);
    REAL volga = dense ? vega * d1 * d2 * inv_sig : C(0.0);
    REAL charm = w * q * Dq * Nd1
               - (dense ? Dq_pdf * (C(2.0) * (r - q) * t - d2 * sst) * inv_sst / (C(2.0) * t) : C(0.0));

    o[0] = valid ? price : nan;
    o[1] = valid ? delta : nan;
    o[2] = valid ? gamma : nan;
    o[3] = valid ? vega : nan;
    o[4] = valid ? theta : nan;
    o[5] = valid ? rho : nan;
    o[6] = valid ? phi : nan;
    o[7] = valid ? vanna : nan;
    o[8] = valid ? volga : nan;
    o[9] = valid ? charm : nan;
    /* 1/sst overflows where sst is 0 (t == 0) or subnormal: take the limit there. */
    return valid & !(inv_sst < huge);
}

#ifdef KERNEL_RANGE
/* Elements [begin, end) of one call, in blocks of TG_GREEKS_BLOCK: outputs the caller did not ask
   for go to a scratch block, so the element loop has no per-output NULL tests. */
static void KERNEL_RANGE(void *ctx_, int64_t begin, int64_t end)
{
    const greeks_ctx *ctx = (const greeks_ctx *)ctx_;
    const tg_bsm_inputs *in = ctx->in;
    REAL scratch[TG_GREEKS_BLOCK];

    for (int64_t b0 = begin; b0 < end; b0 += TG_GREEKS_BLOCK) {
        int64_t len = end - b0 < TG_GREEKS_BLOCK ? end - b0 : TG_GREEKS_BLOCK;
        REAL *o[10];
        for (int k = 0; k < 10; k++)
            o[k] = ctx->out[k] ? (REAL *)ctx->out[k] + b0 : scratch;
        int64_t nlimit = 0;
        unsigned char limit[TG_GREEKS_BLOCK];   /* KERNEL_ELEMENT's verdict: 1 = take the limit */

        for (int64_t j = 0; j < len; j++) {
            int64_t i = b0 + j;
            REAL S = TG_AT(REAL, in->spot, in->s_spot, i);
            REAL K = TG_AT(REAL, in->strike, in->s_strike, i);
            REAL t = TG_AT(REAL, in->t, in->s_t, i);
            REAL r = TG_AT(REAL, in->rate, in->s_rate, i);
            REAL sig = TG_AT(REAL, in->vol, in->s_vol, i);
            REAL q = TG_AT(REAL, in->div, in->s_div, i);
            REAL w = TG_AT(uint8_t, in->call, in->s_call, i) ? C(1.0) : C(-1.0);

            REAL v[10];
            limit[j] = (unsigned char)KERNEL_ELEMENT(S, K, t, r, sig, q, w, v);
            nlimit += limit[j];
            for (int k = 0; k < 10; k++)
                o[k][j] = v[k];
        }

        /* Zero total variance is rare: fix those elements up after the block rather than
           branching for them inside the loop above. */
        for (int64_t j = 0; nlimit > 0 && j < len; j++) {
            if (!limit[j])
                continue;
            int64_t i = b0 + j;
            REAL S = TG_AT(REAL, in->spot, in->s_spot, i);
            REAL K = TG_AT(REAL, in->strike, in->s_strike, i);
            REAL t = TG_AT(REAL, in->t, in->s_t, i);
            REAL r = TG_AT(REAL, in->rate, in->s_rate, i);
            REAL sig = TG_AT(REAL, in->vol, in->s_vol, i);
            REAL q = TG_AT(REAL, in->div, in->s_div, i);
            REAL w = TG_AT(uint8_t, in->call, in->s_call, i) ? C(1.0) : C(-1.0);
            REAL lim[10];
            KERNEL_LIMIT(S, K, t, r, sig, q, w, lim);
            for (int k = 0; k < 10; k++)
                o[k][j] = lim[k];
            nlimit--;
        }
    }
}
#endif /* KERNEL_RANGE */
