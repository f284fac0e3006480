/* Input batches of the quantized models staged for the GPU (tickgpu.quant): one pass that converts
 * to float32, checks and stores, instead of NumPy's astype, |x|, max and copy (four passes and three
 * temporaries, microseconds at a signal model's sizes). */
#include <float.h>
#include <math.h>

#include "tickgpu.h"

int tg_stage_rows_f32(const void *src, int src_f64, int64_t rows, int64_t cols, int64_t src_stride,
                      float *dst, int check, float limit, int64_t *bad, int *bad_kind)
{
    if (bad == NULL || bad_kind == NULL || rows < 0 || cols < 0)
        return TG_EINVAL;
    *bad = -1;
    *bad_kind = 0;
    if (rows == 0 || cols == 0)
        return TG_OK;
    if (src == NULL || dst == NULL || src_stride < cols)
        return TG_EINVAL;
    /* Beyond FLT_MAX means no limit: infinity must still fail the one comparison below. */
    const float lim = limit < FLT_MAX ? limit : FLT_MAX;
    int64_t first_nonfinite = -1, first_over = -1;
    for (int64_t i = 0; i < rows; i++) {
        float *out = dst + i * cols;
        if (src_f64) {
            const double *in = (const double *)src + i * src_stride;
            for (int64_t j = 0; j < cols; j++)
                out[j] = (float)in[j];
        } else {
            const float *in = (const float *)src + i * src_stride;
            for (int64_t j = 0; j < cols; j++)
                out[j] = in[j];
        }
        if (!check || first_nonfinite >= 0)
            continue;
        int any = 0;                              /* branch-free over the row (vectorised) */
        for (int64_t j = 0; j < cols; j++)
            any |= !(fabsf(out[j]) <= lim);       /* NaN, infinity, or beyond the limit */
        if (!any)
            continue;
        for (int64_t j = 0; j < cols; j++) {      /* the rare row with one: which, and what */
            if (fabsf(out[j]) <= lim)
                continue;
            if (!isfinite(out[j])) {
                first_nonfinite = i * cols + j;
                break;
            }
            if (first_over < 0)
                first_over = i * cols + j;
        }
    }
    if (first_nonfinite >= 0) {
        *bad = first_nonfinite;
        *bad_kind = 1;
    } else if (first_over >= 0) {
        *bad = first_over;
        *bad_kind = 2;
    }
    return TG_OK;
}
