/* The signal model's event-by-event features (csrc/cpu/signal.c) under sanitizers: NULL pointers
 * refused, a long run of events through the 101-slot history (every ring index read and written),
 * an empty side of the book (not ready, its features NaN, their statistics untouched), and the
 * values that can be computed by hand: the first event's zeros and a return 100 events back. */
#include <math.h>
#include <string.h>

#include "tickgpu.h"

#include "check.h"

int main(void)
{
    tg_signal_feed feed;
    float x[TG_SIGNAL_FEATURES];
    double lm = 0.0;
    memset(&feed, 0, sizeof feed);
    CHECK(tg_signal_update(NULL, 0, 1, 100, 1, 2000100, 50, 2000000, 40, x, &lm) == TG_EINVAL);
    CHECK(tg_signal_update(&feed, 0, 1, 100, 1, 2000100, 50, 2000000, 40, NULL, &lm) == TG_EINVAL);
    CHECK(tg_signal_update(&feed, 0, 1, 100, 1, 2000100, 50, 2000000, 40, x, NULL) == TG_EINVAL);
    CHECK(feed.events == 0);

    /* The first event: every feature finite, standardized to 0 (no past). */
    CHECK(tg_signal_update(&feed, 34200.0, 1, 100, 1, 2000100, 50, 2000000, 40, x, &lm) == 1);
    for (int j = 0; j < TG_SIGNAL_FEATURES; j++)
        CHECK(x[j] == 0.0f);
    CHECK(feed.raw[0] == 1.0);                          /* 100 units of 1e-4 = 1 cent */
    CHECK(fabs(feed.raw[1] - (40.0 - 50.0) / 90.0) < 1e-15);
    CHECK(fabs(lm - log(2000050.0)) < 1e-15);

    /* 300 more events, the mid rising one unit an event: the 100-event return is exact. */
    double first_lm[400];
    first_lm[0] = lm;
    for (int i = 1; i <= 300; i++) {
        double bid = 2000000.0 + i, ask = bid + 100.0;
        int ready = tg_signal_update(&feed, 34200.0 + 0.001 * i, i % 5 + 1, 10 + i % 7, i % 2 ? 1 : -1,
                                     ask, 50, bid, 40 + i % 3, x, &lm);
        first_lm[i] = lm;
        CHECK(ready == 1);
        for (int j = 0; j < TG_SIGNAL_FEATURES; j++)
            CHECK(isfinite(x[j]) && x[j] >= -8.0f && x[j] <= 8.0f);
    }
    CHECK(feed.events == 301);
    CHECK(fabs(feed.raw[6] - (first_lm[300] - first_lm[200]) * 1e4) < 1e-9);
    CHECK(fabs(feed.raw[3] - (first_lm[300] - first_lm[299]) * 1e4) < 1e-9);
    CHECK(fabs(feed.raw[11] - log1p(1.0)) < 1e-7);       /* 1 ms since the previous event (to the
                                                            times' own rounding near 34,200 s) */

    /* Both sides empty (LOBSTER's sentinel prices, size 0): no mid, spread, imbalance, size ratio
     * or return, so not ready; their statistics stay; the deletion EMA moves on. */
    double before_mean[TG_SIGNAL_FEATURES], before_var[TG_SIGNAL_FEATURES];
    memcpy(before_mean, feed.mean, sizeof before_mean);
    memcpy(before_var, feed.var, sizeof before_var);
    CHECK(tg_signal_update(&feed, 34200.4, 3, 10, 1, 9999999999.0, 0, -9999999999.0, 0, x, &lm) == 0);
    CHECK(isnan(lm));
    for (int j = 0; j < TG_SIGNAL_FEATURES; j++) {
        CHECK(isnan(x[j]) == (j <= 6));
        if (j <= 6)
            CHECK(feed.mean[j] == before_mean[j] && feed.var[j] == before_var[j]);
    }
    CHECK(feed.mean[10] != before_mean[10]);

    /* Next, a mid that is not positive: NaN too. Each return that reaches back to either event
     * is NaN, so the feed is not ready 1, 5, 20 and 100 events after each; otherwise it is. */
    CHECK(tg_signal_update(&feed, 34200.5, 1, 10, 1, 0, 50, 0, 40, x, &lm) == 0);
    CHECK(isnan(lm));
    for (int i = 1; i <= 120; i++) {
        double bid = 2000500.0 + i;
        int ready = tg_signal_update(&feed, 34201.0 + 0.001 * i, 1, 10, 1, bid + 100, 50, bid, 40, x, &lm);
        int back = (i == 1 || i == 5 || i == 20 || i == 100) || (i + 1 == 5 || i + 1 == 20 || i + 1 == 100);
        CHECK(ready == !back);
    }
    return failures != 0;
}
