/* The shipped signal model's features, one LOBSTER event at a time (tickgpu.h documents them;
 * tickgpu.app.signal has their whole-day form). The same operations, in the same order, as that
 * NumPy form and tickgpu.quant.EmaStandardizer, in IEEE double precision. */
#include <math.h>

#include "tickgpu.h"

static const int RETURNS[4] = {1, 5, 20, 100};
static const double FLOW_ALPHA[2] = {0.9, 0.99};
#define COUNT_ALPHA 0.95
#define STANDARDIZER_ALPHA 0.999
#define STD_FLOOR 1e-12
#define CLIP 8.0

static double log_or(double v, double fallback)
{
    return v > 0.0 ? log(v) : fallback;
}

/* EmaStandardizer's rule on one feature: z from the statistics of the events before, then the
 * statistics updated with this value; a non-finite value gives NaN and leaves them alone; a
 * feature's first finite value gives 0 (no past yet). */
static double standardize(double v, double *mean, double *var)
{
    const double a = STANDARDIZER_ALPHA;
    if (!isfinite(v))
        return NAN;
    if (isnan(*mean)) {
        *mean = v;
        *var = 0.0;
        return 0.0;
    }
    double z = (v - *mean) / fmax(sqrt(*var), STD_FLOOR);
    double d = v - *mean;
    *mean = *mean + (1.0 - a) * d;
    *var = a * (*var + (1.0 - a) * d * d);
    return fmin(fmax(z, -CLIP), CLIP);
}

int tg_signal_update(tg_signal_feed *feed, double time, int32_t type, double size, double direction,
                     double ask, double ask_size, double bid, double bid_size, float *x, double *log_mid)
{
    if (feed == NULL || x == NULL || log_mid == NULL)
        return TG_EINVAL;
    const int64_t n = ++feed->events;          /* events including this one */
    double *r = feed->raw;
    /* an empty side (LOBSTER writes a sentinel price and size 0) leaves no mid and no spread */
    const int quoted = ask_size > 0.0 && bid_size > 0.0;
    double lm = quoted ? log_or(0.5 * (ask + bid), NAN) : NAN;
    feed->history[(n - 1) % TG_SIGNAL_HISTORY] = lm;
    *log_mid = lm;

    /* an executed sell limit order (direction -1) is a buyer-initiated trade */
    double flow = (type == 4 || type == 5) ? -direction * size : 0.0;
    for (int j = 0; j < 2; j++)
        feed->flow[j] = FLOW_ALPHA[j] * feed->flow[j] + (1.0 - FLOW_ALPHA[j]) * flow;
    feed->submissions = COUNT_ALPHA * feed->submissions + (1.0 - COUNT_ALPHA) * (type == 1 ? 1.0 : 0.0);
    feed->deletions = COUNT_ALPHA * feed->deletions + (1.0 - COUNT_ALPHA) * (type == 3 ? 1.0 : 0.0);
    double gap = n > 1 ? time - feed->prev_time : 0.0;
    feed->prev_time = time;

    double total = bid_size + ask_size;
    r[0] = quoted ? (ask - bid) / 100.0 : NAN;
    r[1] = total != 0.0 ? (bid_size - ask_size) / total : NAN;
    r[2] = log_or(bid_size, -INFINITY) - log_or(ask_size, -INFINITY);
    for (int j = 0; j < 4; j++) {
        int k = RETURNS[j];
        r[3 + j] = n > k ? (lm - feed->history[(n - 1 - k) % TG_SIGNAL_HISTORY]) * 1e4 : 0.0;
    }
    r[7] = feed->flow[0];
    r[8] = feed->flow[1];
    r[9] = feed->submissions;
    r[10] = feed->deletions;
    r[11] = log1p(gap * 1e3);

    int ready = 1;
    for (int j = 0; j < TG_SIGNAL_FEATURES; j++) {
        if (n == 1) {
            /* the first event: statistics start (NaN for a feature that is not finite yet) */
            feed->mean[j] = isfinite(r[j]) ? r[j] : NAN;
            feed->var[j] = isfinite(r[j]) ? 0.0 : NAN;
            x[j] = isfinite(r[j]) ? 0.0f : NAN;
        } else {
            x[j] = (float)standardize(r[j], &feed->mean[j], &feed->var[j]);
        }
        ready &= isfinite(r[j]) ? 1 : 0;
    }
    return ready;
}
