/* The staging copies of the hot path (csrc/hot/copy.c) under sanitizers: every byte copied once
 * whatever the split, lists cut at odd places, several caller threads at once (one gets the copy
 * threads, the others copy alone), and bad lists refused before any byte moves.
 *
 * copy.c is compiled into this test directly: the sanitizer harness links the CPU core only, and
 * the rest of csrc/hot needs the driver library opened at run time. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../csrc/hot/copy.c"

#include "check.h"

#define BIG ((size_t)3 << 20)

static void fill(unsigned char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (unsigned char)(i * 131u + seed);
}

/* One list cut into `pieces` copies at uneven places, including empty ones. */
static int copy_pieces(unsigned char *dst, const unsigned char *src, size_t n, int pieces, unsigned seed)
{
    tg_hot_copy c[16];
    size_t at = 0;
    for (int i = 0; i < pieces; i++) {
        size_t left = n - at;
        size_t take = i == pieces - 1 ? left : (left / (pieces - i)) + (seed % 4099) - 2049 * (i % 2);
        if (take > left)
            take = left;
        c[i].dst = dst + at;
        c[i].src = src + at;
        c[i].bytes = i == 1 ? 0 : take;   /* one empty piece: nothing to copy, pointers unused */
        if (i == 1)
            c[i].dst = NULL;
        at += c[i].bytes;
    }
    c[pieces - 1].bytes += n - at;        /* whatever the uneven cuts left */
    return tg_hot_stage(c, pieces);
}

static void *caller(void *arg)
{
    unsigned id = (unsigned)(size_t)arg;
    unsigned char *src = malloc(BIG), *dst = malloc(BIG);
    for (unsigned it = 0; it < 12; it++) {
        fill(src, BIG, id * 97 + it);
        memset(dst, 0, BIG);
        CHECK(copy_pieces(dst, src, BIG - it * 4097, 3 + (int)(it % 9), id + it) == TG_OK);
        CHECK(memcmp(dst, src, BIG - it * 4097) == 0);
    }
    free(src);
    free(dst);
    return NULL;
}

int main(void)
{
    for (int threads = 1; threads <= 5; threads += 2) {
        tg_hot_set_copy_threads(threads);
        pthread_t t[3];
        for (size_t i = 0; i < 3; i++)
            pthread_create(&t[i], NULL, caller, (void *)i);
        for (int i = 0; i < 3; i++)
            pthread_join(t[i], NULL);
    }
    /* A bad list copies nothing. */
    unsigned char a[64], b[64];
    memset(a, 1, sizeof a);
    memset(b, 0, sizeof b);
    tg_hot_copy bad[2] = {{b, a, 32}, {NULL, a, 8}};
    CHECK(tg_hot_stage(bad, 2) == TG_EINVAL);
    CHECK(b[0] == 0);
    CHECK(tg_hot_stage(NULL, 1) == TG_EINVAL);
    CHECK(tg_hot_stage(NULL, 0) == TG_OK);
    CHECK(tg_hot_stage(bad, -1) == TG_EINVAL);
    tg_hot_set_copy_threads(0);
    if (failures)
        fprintf(stderr, "%d failure(s)\n", failures);
    else
        printf("test_hot_copy: ok\n");
    return failures != 0;
}
