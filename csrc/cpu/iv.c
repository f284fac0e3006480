/* Implied volatility on the CPU: the shared "Let's Be Rational" core over strided arrays, split
   across cores. The per-option work lives in lbr_core.h so that the GPU kernel runs the same code. */
#include <stddef.h>

#include "tickgpu.h"
#include "internal.h"
#include "lbr_core.h"

typedef struct {
    const tg_iv_inputs *in;
    void *vol;
    int8_t *status;
    int f32;
} iv_job;

static void iv_range_f64(void *ctx, int64_t begin, int64_t end)
{
    const iv_job *job = (const iv_job *)ctx;
    const tg_iv_inputs *in = job->in;
    double *vol = (double *)job->vol;
    for (int64_t i = begin; i < end; i++) {
        int st;
        double theta = TG_AT(uint8_t, in->call, in->s_call, i) ? 1.0 : -1.0;
        vol[i] = tg_lbr_implied_vol_bsm(TG_AT(double, in->price, in->s_price, i),
                                        TG_AT(double, in->spot, in->s_spot, i),
                                        TG_AT(double, in->strike, in->s_strike, i),
                                        TG_AT(double, in->t, in->s_t, i),
                                        TG_AT(double, in->rate, in->s_rate, i),
                                        TG_AT(double, in->div, in->s_div, i), theta, &st);
        if (job->status)
            job->status[i] = (int8_t)st;
    }
}

static void iv_range_f32(void *ctx, int64_t begin, int64_t end)
{
    const iv_job *job = (const iv_job *)ctx;
    const tg_iv_inputs *in = job->in;
    float *vol = (float *)job->vol;
    for (int64_t i = begin; i < end; i++) {
        int st;
        float theta = TG_AT(uint8_t, in->call, in->s_call, i) ? 1.0f : -1.0f;
        vol[i] = tg_lbr_implied_vol_bsm_f32(TG_AT(float, in->price, in->s_price, i),
                                            TG_AT(float, in->spot, in->s_spot, i),
                                            TG_AT(float, in->strike, in->s_strike, i),
                                            TG_AT(float, in->t, in->s_t, i),
                                            TG_AT(float, in->rate, in->s_rate, i),
                                            TG_AT(float, in->div, in->s_div, i), theta, &st);
        if (job->status)
            job->status[i] = (int8_t)st;
    }
}

static int check_inputs(int64_t n, const tg_iv_inputs *in, const void *vol)
{
    if (n < 0 || in == NULL || (n > 0 && vol == NULL))
        return TG_EINVAL;
    if (n == 0)
        return TG_OK;
    if (!in->price || !in->spot || !in->strike || !in->t || !in->rate || !in->div || !in->call)
        return TG_EINVAL;
    const int64_t strides[7] = {in->s_price, in->s_spot, in->s_strike, in->s_t,
                                in->s_rate, in->s_div, in->s_call};
    for (int k = 0; k < 7; k++)
        if (strides[k] != 0 && strides[k] != 1)
            return TG_EINVAL;
    return TG_OK;
}

int tg_implied_vol_f64(int64_t n, const tg_iv_inputs *in, double *vol, int8_t *status, int nthreads)
{
    int rc = check_inputs(n, in, vol);
    if (rc != TG_OK || n == 0)
        return rc;
    iv_job job = {in, vol, status, 0};
    return tg_parallel_for(n, nthreads, iv_range_f64, &job);
}

int tg_implied_vol_f32(int64_t n, const tg_iv_inputs *in, float *vol, int8_t *status, int nthreads)
{
    int rc = check_inputs(n, in, vol);
    if (rc != TG_OK || n == 0)
        return rc;
    iv_job job = {in, vol, status, 1};
    return tg_parallel_for(n, nthreads, iv_range_f32, &job);
}

double tg_normalised_black(double x, double s, double theta)
{
    return tg_lbr_normalised_black(x, s, theta);
}

double tg_normalised_implied_vol(double beta, double x, double theta, int *status)
{
    int st;
    double s = tg_lbr_normalised_implied_vol(beta, x, theta, &st);
    if (status)
        *status = st;
    return s;
}
