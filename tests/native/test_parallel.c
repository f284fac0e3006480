/*
 * tg_parallel_for: every index of [0, n) is visited exactly once, by chunks that stay inside
 * the range, for every thread count (including <= 0 = "decide", more threads than elements and
 * more than TG_MAX_THREADS). Run under AddressSanitizer and ThreadSanitizer by
 * tests/native/test_native_sanitizers.py: chunks that overlapped would be a data race on
 * `visits`, which ThreadSanitizer reports even when the counts happen to come out right.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "tickgpu.h"
#include "cpu/internal.h"

typedef struct {
    int64_t n;
    unsigned char *visits;  /* one counter per index; written by exactly one chunk if correct */
    int bad_range;          /* set by a chunk outside [0, n) or with begin > end */
} visit_ctx;

static void visit(void *arg, int64_t begin, int64_t end)
{
    visit_ctx *c = (visit_ctx *)arg;
    if (begin < 0 || end > c->n || begin > end) {
        /* Only written on failure; a failing run is reported anyway. */
        c->bad_range = 1;
        return;
    }
    for (int64_t i = begin; i < end; i++)
        c->visits[i]++;
}

static int check_one(int64_t n, int nthreads)
{
    visit_ctx c = {n, calloc((size_t)(n > 0 ? n : 1), 1), 0};
    if (c.visits == NULL) {
        fprintf(stderr, "calloc(%lld) failed\n", (long long)n);
        return 1;
    }
    int failures = 0;
    int st = tg_parallel_for(n, nthreads, visit, &c);
    if (st != TG_OK) {
        fprintf(stderr, "n=%lld nthreads=%d: status %s\n", (long long)n, nthreads, tg_status_name(st));
        failures++;
    }
    if (c.bad_range) {
        fprintf(stderr, "n=%lld nthreads=%d: a chunk fell outside [0, n)\n", (long long)n, nthreads);
        failures++;
    }
    for (int64_t i = 0; i < n && failures < 5; i++) {
        if (c.visits[i] != 1) {
            fprintf(stderr, "n=%lld nthreads=%d: index %lld visited %d times\n", (long long)n, nthreads,
                    (long long)i, c.visits[i]);
            failures++;
        }
    }
    free(c.visits);
    return failures;
}

int main(void)
{
    static const int64_t sizes[] = {0, 1, 2, 3, 7, 64, 1000, TG_PARALLEL_MIN - 1, TG_PARALLEL_MIN,
                                    TG_PARALLEL_MIN + 1, 100003};
    static const int threads[] = {-5, -1, 0, 1, 2, 3, 4, 7, 8, 16, 63, 64, TG_MAX_THREADS - 1,
                                  TG_MAX_THREADS, TG_MAX_THREADS + 1, 1000};
    int failures = 0;
    for (size_t a = 0; a < sizeof sizes / sizeof sizes[0]; a++)
        for (size_t b = 0; b < sizeof threads / sizeof threads[0]; b++)
            failures += check_one(sizes[a], threads[b]);

    /* Bad arguments are refused, not run. */
    visit_ctx c = {1, NULL, 0};
    if (tg_parallel_for(-1, 2, visit, &c) != TG_EINVAL) {
        fprintf(stderr, "n = -1 was not refused with TG_EINVAL\n");
        failures++;
    }
    if (tg_parallel_for(10, 2, NULL, &c) != TG_EINVAL) {
        fprintf(stderr, "fn = NULL was not refused with TG_EINVAL\n");
        failures++;
    }
    if (tg_num_cores() < 1) {
        fprintf(stderr, "tg_num_cores() = %d\n", tg_num_cores());
        failures++;
    }
    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    else
        printf("tg_parallel_for: all %zu cases ok\n",
               (sizeof sizes / sizeof sizes[0]) * (sizeof threads / sizeof threads[0]));
    return failures ? 1 : 0;
}
