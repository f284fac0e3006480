/*
 * Black-Scholes-Merton prices and greeks on the CPU, float64 and float32.
 *
 * With w = +1 for a call and -1 for a put, F = S e^{(r-q)t}, d1 = ln(F/K)/(sigma sqrt t) +
 * sigma sqrt(t)/2 and d2 = d1 - sigma sqrt t:
 *   price = w (S e^{-qt} N(w d1) - K e^{-rt} N(w d2))
 * and the greeks are its derivatives (see tickgpu.h for units). N is evaluated as
 * erfc(-x / sqrt 2) / 2 so that deep out-of-the-money tails keep their relative accuracy.
 *
 * One pass per element: one log, one sqrt, three exp, two erfc, shared by all ten outputs.
 * Elements are independent, so the multi-threaded result equals the single-threaded one bit for
 * bit.
 */
#include <math.h>

#include "tickgpu.h"
#include "internal.h"

/* Elements per block: the scratch block for unwanted outputs stays in L1. */
#define TG_GREEKS_BLOCK 256

typedef struct {
    const tg_bsm_inputs *in;
    void *out[10];
} greeks_ctx;

#define REAL double
#define M(name) name
#define C(x) (x)
#define KERNEL_RANGE greeks_range_f64
#define KERNEL_LIMIT greeks_limit_f64
#define KERNEL_ELEMENT greeks_element_f64
#include "greeks_kernel.h"
#undef REAL
#undef M
#undef C
#undef KERNEL_RANGE
#undef KERNEL_LIMIT
#undef KERNEL_ELEMENT

#define REAL float
#define M(name) name##f
#define C(x) (x##f)
#define KERNEL_RANGE greeks_range_f32
#define KERNEL_LIMIT greeks_limit_f32
#define KERNEL_ELEMENT greeks_element_f32
#include "greeks_kernel.h"
#undef REAL
#undef M
#undef C
#undef KERNEL_RANGE
#undef KERNEL_LIMIT
#undef KERNEL_ELEMENT

static int greeks_run(int64_t n, const tg_bsm_inputs *in, const tg_greeks_outputs *out,
                      int nthreads, tg_range_fn fn)
{
    if (n < 0 || in == NULL || out == NULL)
        return TG_EINVAL;
    if (n == 0)
        return TG_OK;
    if (!in->spot || !in->strike || !in->t || !in->rate || !in->vol || !in->div || !in->call)
        return TG_EINVAL;
    if (in->s_spot < 0 || in->s_strike < 0 || in->s_t < 0 || in->s_rate < 0 || in->s_vol < 0
        || in->s_div < 0 || in->s_call < 0)
        return TG_EINVAL;
    greeks_ctx ctx = {in, {out->price, out->delta, out->gamma, out->vega, out->theta, out->rho,
                           out->phi, out->vanna, out->volga, out->charm}};
    return tg_parallel_for(n, nthreads, fn, &ctx);
}

int tg_greeks_f64(int64_t n, const tg_bsm_inputs *in, const tg_greeks_outputs *out, int nthreads)
{
    return greeks_run(n, in, out, nthreads, greeks_range_f64);
}

int tg_greeks_f32(int64_t n, const tg_bsm_inputs *in, const tg_greeks_outputs *out, int nthreads)
{
    return greeks_run(n, in, out, nthreads, greeks_range_f32);
}
