/* Order book and LOBSTER parser/replay under sanitizers: growth, bounds, many instruments.
 *
 * The book is checked against a dense reference (one size per tick over a fixed price range per
 * instrument) driven by a seeded pseudo-random stream that also sends invalid messages, whose
 * expected codes the reference decides. Every buffer handed to the parser is an exact-size heap
 * copy without a terminator, so AddressSanitizer sees any read past its end.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tickgpu.h"

#include "check.h"

#define EMPTY_ASK INT64_C(9999999999)
#define EMPTY_BID INT64_C(-9999999999)

static uint64_t rng_state = 0x9E3779B97F4A7C15u;
static uint64_t next_u64(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return rng_state = x;
}
static int64_t uniform(int64_t lo, int64_t hi) /* [lo, hi] */
{
    return lo + (int64_t)(next_u64() % (uint64_t)(hi - lo + 1));
}

/* ---- dense reference -------------------------------------------------------------------- */

#define NINST 64
#define BASE 1000
#define RANGE 512   /* bids in [BASE, BASE + RANGE/2), asks in [BASE + RANGE/2, BASE + RANGE) */

static int64_t ref_size[NINST][RANGE];   /* bid and ask regions never overlap */

static int ref_expected(const tg_message *m)
{
    if (m->instrument < 0 || m->instrument >= NINST)
        return TG_BOOK_BAD_INSTRUMENT;
    if (m->type < 1 || m->type > 7)
        return TG_BOOK_BAD_TYPE;
    if (m->type == 7 || m->type == 6)
        return TG_BOOK_OK;
    if (m->direction != 1 && m->direction != -1)
        return TG_BOOK_BAD_DIRECTION;
    if (m->type == 5)
        return TG_BOOK_OK;
    if (m->size <= 0)
        return TG_BOOK_BAD_SIZE;
    int64_t *lv = &ref_size[m->instrument][m->price - BASE];
    if (m->type == 1)
        return TG_BOOK_OK;
    if (*lv == 0)
        return TG_BOOK_NO_LEVEL;
    if (m->size > *lv)
        return TG_BOOK_OVERSIZE;
    if (m->type == 2 && m->size == *lv)
        return TG_BOOK_PARTIAL_EMPTIES;
    return TG_BOOK_OK;
}

static void ref_apply(const tg_message *m)
{
    if (m->type >= 1 && m->type <= 4)
        ref_size[m->instrument][m->price - BASE] += m->type == 1 ? m->size : -m->size;
}

static int ref_levels(int inst, int bid)
{
    int n = 0;
    for (int k = bid ? 0 : RANGE / 2; k < (bid ? RANGE / 2 : RANGE); k++)
        n += ref_size[inst][k] > 0;
    return n;
}

/* Compares the book's top `levels` with the reference, best first. */
static int snapshot_matches(const tg_book *book, int inst, int levels)
{
    int64_t *row = malloc((size_t)(4 * levels + 1) * sizeof *row);
    int ok = tg_book_snapshot(book, inst, levels, row, row + 1, row + 2, row + 3, 4) == TG_OK;
    int k = 0;
    for (int p = RANGE / 2; p < RANGE && ok; p++) {   /* asks ascending */
        if (ref_size[inst][p] == 0 || k >= levels)
            continue;
        ok = row[4 * k] == BASE + p && row[4 * k + 1] == ref_size[inst][p];
        k++;
    }
    for (; k < levels && ok; k++)
        ok = row[4 * k] == EMPTY_ASK && row[4 * k + 1] == 0;
    k = 0;
    for (int p = RANGE / 2 - 1; p >= 0 && ok; p--) {  /* bids descending */
        if (ref_size[inst][p] == 0 || k >= levels)
            continue;
        ok = row[4 * k + 2] == BASE + p && row[4 * k + 3] == ref_size[inst][p];
        k++;
    }
    for (; k < levels && ok; k++)
        ok = row[4 * k + 2] == EMPTY_BID && row[4 * k + 3] == 0;
    free(row);
    return ok;
}

static tg_message random_message(void)
{
    tg_message m = {0};
    m.instrument = (int32_t)uniform(0, NINST - 1);
    m.direction = uniform(0, 1) ? 1 : -1;
    int bid = m.direction == 1;
    int64_t r = uniform(0, 99);
    m.type = r < 45 ? 1 : r < 60 ? 2 : r < 78 ? 3 : r < 92 ? 4 : r < 96 ? 5 : r < 98 ? 6 : 7;
    m.price = BASE + (bid ? uniform(0, RANGE / 2 - 1) : uniform(RANGE / 2, RANGE - 1));
    m.size = uniform(1, 300);
    if (m.type >= 2 && m.type <= 4) {
        /* Mostly a live level with a fitting size; sometimes not (exercises the rejections). */
        for (int tries = 0; tries < 20 && ref_size[m.instrument][m.price - BASE] == 0; tries++)
            m.price = BASE + (bid ? uniform(0, RANGE / 2 - 1) : uniform(RANGE / 2, RANGE - 1));
        int64_t have = ref_size[m.instrument][m.price - BASE];
        if (have > 0 && uniform(0, 9) > 0)
            m.size = m.type == 3 ? have : uniform(1, have);
    }
    if (m.type == 7) {
        m.price = uniform(-1, 1);
        m.direction = -1;
        m.size = 0;
    }
    if (uniform(0, 199) == 0)
        m.instrument = uniform(0, 1) ? NINST : -1;   /* out of range */
    if (uniform(0, 199) == 0)
        m.type = uniform(0, 1) ? 0 : 8;
    if (uniform(0, 199) == 0 && m.type != 7 && m.type != 6)
        m.direction = 0;
    return m;
}

static void test_random_stream_many_instruments(void)
{
    tg_book *book = NULL;
    CHECK(tg_book_create(NINST, 1, RANGE, &book) == TG_OK);   /* 1 level preallocated: grows */
    CHECK(tg_book_instruments(book) == NINST);
    memset(ref_size, 0, sizeof ref_size);
    const int n = 200000, batch = 37;
    tg_message msgs[37];
    int8_t codes[37];
    double mid[37];
    int64_t bid_sz[37 * 3], ask_sz[37 * 3];
    tg_book_features f = {3, mid, NULL, NULL, NULL, NULL, bid_sz, ask_sz};
    for (int done = 0; done < n; done += batch) {
        int expect[37];
        int64_t expected_rejects = 0;
        for (int i = 0; i < batch; i++) {
            msgs[i] = random_message();
            /* Expected codes come from the reference state as it evolves within the batch. */
            expect[i] = ref_expected(&msgs[i]);
            if (expect[i] == TG_BOOK_OK)
                ref_apply(&msgs[i]);
            else
                expected_rejects++;
        }
        int64_t rejected = -1, first = -2;
        int st = tg_book_apply(book, batch, msgs, 0, codes, &f, &rejected, &first);
        CHECK(st == (expected_rejects ? TG_EDATA : TG_OK));
        CHECK(rejected == expected_rejects);
        for (int i = 0; i < batch; i++)
            if (codes[i] != expect[i]) {
                fprintf(stderr, "message %d: code %d, expected %d (type %d price %lld size %lld)\n",
                        done + i, codes[i], expect[i], msgs[i].type, (long long)msgs[i].price,
                        (long long)msgs[i].size);
                failures++;
                return;
            }
        int inst = msgs[batch - 1].instrument;
        if (inst >= 0 && inst < NINST && !snapshot_matches(book, inst, done % 2 ? 5 : RANGE)) {
            fprintf(stderr, "snapshot of instrument %d differs after message %d\n", inst, done + batch);
            failures++;
            return;
        }
    }
    for (int inst = 0; inst < NINST; inst++) {
        int32_t nb = -1, na = -1, state = -1;
        CHECK(tg_book_info(book, inst, &nb, &na, &state) == TG_OK);
        CHECK(nb == ref_levels(inst, 1) && na == ref_levels(inst, 0));
        CHECK(state >= TG_TRADING && state <= TG_QUOTING);
        CHECK(snapshot_matches(book, inst, RANGE));
    }
    tg_book_destroy(book);
}

static void test_growth_and_bounds(void)
{
    tg_book *book = NULL;
    CHECK(tg_book_create(0, 1, 1, &book) == TG_EINVAL && book == NULL);
    CHECK(tg_book_create(1, 0, 1, &book) == TG_EINVAL);
    CHECK(tg_book_create(1, 4, 2, &book) == TG_EINVAL);
    CHECK(tg_book_create(1, 1, 1, NULL) == TG_EINVAL);
    tg_book_destroy(NULL);

    const int N = 5000;
    CHECK(tg_book_create(2, 1, N, &book) == TG_OK);
    /* Bids inserted worst-first (each becomes the new best: appended at the end) and asks
       best-first (each new level is the worst: inserted at the front, the longest memmove). */
    for (int k = 0; k < N; k++) {
        tg_message b = {0, 1, k, 1 + k % 7, 100000 + k, 1, 0};
        tg_message a = {0, 1, k, 1 + k % 5, 200000 + k, -1, 0};
        int8_t code = -1;
        CHECK(tg_book_apply(book, 1, &b, 1, &code, NULL, NULL, NULL) == TG_OK && code == TG_BOOK_OK);
        CHECK(tg_book_apply(book, 1, &a, 1, &code, NULL, NULL, NULL) == TG_OK && code == TG_BOOK_OK);
    }
    int32_t nb, na;
    CHECK(tg_book_info(book, 0, &nb, &na, NULL) == TG_OK && nb == N && na == N);
    int64_t *px = malloc((size_t)N * sizeof *px), *sz = malloc((size_t)N * sizeof *sz);
    CHECK(tg_book_snapshot(book, 0, N, NULL, NULL, px, sz, 1) == TG_OK);
    for (int k = 0; k < N; k++)
        CHECK(px[k] == 100000 + N - 1 - k && sz[k] == 1 + (N - 1 - k) % 7);
    CHECK(tg_book_snapshot(book, 0, N, px, sz, NULL, NULL, 1) == TG_OK);
    for (int k = 0; k < N; k++)
        CHECK(px[k] == 200000 + k && sz[k] == 1 + k % 5);

    /* max_levels reached: a new level is refused and the book unchanged; existing levels take size. */
    tg_message deeper = {0, 1, 0, 5, 1, 1, 0};
    int8_t code = -1;
    int64_t first = -2, nrej = -2;
    CHECK(tg_book_apply(book, 1, &deeper, 1, &code, NULL, &nrej, &first) == TG_EDATA);
    CHECK(code == TG_BOOK_TOO_DEEP && nrej == 1 && first == 0);
    deeper.price = 100000;
    CHECK(tg_book_apply(book, 1, &deeper, 1, &code, NULL, NULL, NULL) == TG_OK);
    CHECK(tg_book_info(book, 0, &nb, NULL, NULL) == TG_OK && nb == N);

    /* The field-wise entry point agrees with tg_book_apply. */
    CHECK(tg_book_apply_fields(book, 1, 1, 10, 777, -1, &code) == TG_OK && code == TG_BOOK_OK);
    CHECK(tg_book_apply_fields(book, 1, 2, 11, 777, -1, &code) == TG_EDATA && code == TG_BOOK_OVERSIZE);
    CHECK(tg_book_apply_fields(book, 2, 1, 10, 777, -1, &code) == TG_EDATA && code == TG_BOOK_BAD_INSTRUMENT);
    CHECK(tg_book_apply_fields(book, 1, 3, 10, 777, -1, NULL) == TG_OK);
    CHECK(tg_book_apply_fields(NULL, 0, 1, 10, 777, -1, NULL) == TG_EINVAL);
    CHECK(tg_book_info(book, 1, &nb, &na, NULL) == TG_OK && nb == 0 && na == 0);

    /* Bounds of every entry point. */
    CHECK(tg_book_snapshot(book, 2, 1, px, sz, px, sz, 1) == TG_ERANGE);
    CHECK(tg_book_snapshot(book, -1, 1, px, sz, px, sz, 1) == TG_ERANGE);
    CHECK(tg_book_snapshot(book, 0, -1, px, sz, px, sz, 1) == TG_EINVAL);
    CHECK(tg_book_snapshot(NULL, 0, 1, px, sz, px, sz, 1) == TG_EINVAL);
    CHECK(tg_book_info(book, 5, NULL, NULL, NULL) == TG_ERANGE);
    CHECK(tg_book_clear(book, 2) == TG_ERANGE);
    CHECK(tg_book_apply(book, -1, &deeper, 0, NULL, NULL, NULL, NULL) == TG_EINVAL);
    CHECK(tg_book_apply(book, 1, NULL, 0, NULL, NULL, NULL, NULL) == TG_EINVAL);
    CHECK(tg_book_apply(book, 0, NULL, 0, NULL, NULL, NULL, NULL) == TG_OK);
    tg_book_features bad = {-1, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    CHECK(tg_book_apply(book, 1, &deeper, 0, NULL, &bad, NULL, NULL) == TG_EINVAL);
    CHECK(tg_book_features_now(book, 0, &bad) == TG_EINVAL);
    CHECK(tg_book_features_now(book, 3, NULL) == TG_EINVAL);
    CHECK(tg_book_set_side(book, 0, 0, 1, px, sz, 1) == TG_EINVAL);
    CHECK(tg_book_set_side(book, 7, 1, 1, px, sz, 1) == TG_ERANGE);
    CHECK(tg_book_set_side(book, 0, 1, N + 1, px, sz, 0) == TG_EDATA);   /* repeated price */

    /* A side longer than max_levels is refused whole. */
    int64_t *p2 = malloc((size_t)(N + 1) * sizeof *p2), *s2 = malloc((size_t)(N + 1) * sizeof *s2);
    for (int k = 0; k <= N; k++) {
        p2[k] = 900000 - k;
        s2[k] = 1;
    }
    CHECK(tg_book_set_side(book, 1, 1, N + 1, p2, s2, 1) == TG_ERANGE);
    CHECK(tg_book_set_side(book, 1, 1, N, p2, s2, 1) == TG_OK);
    CHECK(tg_book_info(book, 1, &nb, NULL, NULL) == TG_OK && nb == N);
    CHECK(tg_book_clear(book, -1) == TG_OK);
    CHECK(tg_book_info(book, 0, &nb, &na, NULL) == TG_OK && nb == 0 && na == 0);

    /* Features of an empty book are NaN; of a one-sided book, imbalance +1. */
    double mid = 0, imb = 0, dimb = 0;
    int64_t depth[3] = {7, 7, 7};
    tg_book_features f = {3, &mid, NULL, NULL, &imb, &dimb, depth, NULL};
    CHECK(tg_book_features_now(book, 0, &f) == TG_OK && isnan(mid) && isnan(imb) && isnan(dimb));
    CHECK(depth[0] == 0 && depth[2] == 0);
    tg_message b = {0, 1, 1, 10, 500, 1, 0};
    CHECK(tg_book_apply(book, 1, &b, 1, NULL, NULL, NULL, NULL) == TG_OK);
    CHECK(tg_book_features_now(book, 0, &f) == TG_OK && isnan(mid) && imb == 1.0 && depth[0] == 10);

    /* Prices and sizes at the edges are refused, not wrapped. */
    tg_message edge[4] = {
        {0, 1, 0, 1, 0, 1, 0},                          /* price 0 */
        {0, 1, 0, 1, INT64_C(1) << 62, -1, 0},          /* price too large */
        {0, 1, 0, INT64_MAX, 500, 1, 0},                /* level size would overflow */
        {0, 7, 0, 0, 5, -1, 0},                         /* halt price not -1/0/1 */
    };
    int8_t ec[4];
    CHECK(tg_book_apply(book, 4, edge, 0, ec, NULL, NULL, NULL) == TG_EDATA);
    CHECK(ec[0] == TG_BOOK_BAD_PRICE && ec[1] == TG_BOOK_BAD_PRICE && ec[2] == TG_BOOK_BAD_SIZE
          && ec[3] == TG_BOOK_BAD_PRICE);
    free(px);
    free(sz);
    free(p2);
    free(s2);
    tg_book_destroy(book);
}

static void test_sync_row(void)
{
    tg_book *book = NULL;
    CHECK(tg_book_create(1, 2, 100, &book) == TG_OK);
    int64_t row[12] = {101, 5, 99, 7, 102, 6, 98, 8, EMPTY_ASK, 0, 97, 9};
    CHECK(tg_book_sync_row(book, 0, 3, row) == TG_OK);
    int64_t out[12];
    CHECK(tg_book_snapshot(book, 0, 3, out, out + 1, out + 2, out + 3, 4) == TG_OK);
    CHECK(memcmp(out, row, sizeof row) == 0);
    int64_t bad[12];
    memcpy(bad, row, sizeof row);
    bad[10] = 99;   /* bid level 3 not worse than level 1 */
    CHECK(tg_book_sync_row(book, 0, 3, bad) == TG_EDATA);
    memcpy(bad, row, sizeof row);
    bad[4] = EMPTY_ASK;   /* ask level 2 empty, level 3 occupied */
    bad[5] = 0;
    bad[8] = 103;
    bad[9] = 1;
    CHECK(tg_book_sync_row(book, 0, 3, bad) == TG_EDATA);
    memcpy(bad, row, sizeof row);
    bad[5] = -1;    /* negative size */
    CHECK(tg_book_sync_row(book, 0, 3, bad) == TG_EDATA);
    CHECK(tg_book_snapshot(book, 0, 3, out, out + 1, out + 2, out + 3, 4) == TG_OK);
    CHECK(memcmp(out, row, sizeof row) == 0);   /* unchanged by the refused rows */
    CHECK(tg_book_sync_row(book, 1, 3, row) == TG_ERANGE);
    CHECK(tg_book_sync_row(book, 0, -1, row) == TG_EINVAL);
    tg_book_destroy(book);
}

/* tg_book_step: a message, the row check with its resync, and the features, in one call. */
static void test_step(void)
{
    tg_book *book = NULL;
    CHECK(tg_book_create(2, 2, 100, &book) == TG_OK);
    int64_t row[12] = {101, 5, 99, 7, 102, 6, 98, 8, EMPTY_ASK, 0, 97, 9};
    CHECK(tg_book_sync_row(book, 0, 3, row) == TG_OK);
    double mid = 0, spread = 0;
    int64_t bid_size[1] = {0}, ask_size[1] = {0};
    tg_book_features f = {1, &mid, NULL, &spread, NULL, NULL, bid_size, ask_size};
    int8_t code = -1;
    int32_t resynced = -1;

    /* 3 more shares at the best bid: the row that follows says so, no resync. */
    int64_t after[12];
    memcpy(after, row, sizeof row);
    after[3] = 10;
    CHECK(tg_book_step(book, 0, 1, 3, 99, 1, 3, after, &f, &code, &resynced) == TG_OK);
    CHECK(code == TG_BOOK_OK && resynced == 0);
    CHECK(mid == 100.0 && spread == 2.0 && bid_size[0] == 10 && ask_size[0] == 5);

    /* The row disagrees (an ask level the messages never showed): the book takes the row. */
    int64_t other[12];
    memcpy(other, after, sizeof after);
    other[0] = 100;
    other[1] = 4;
    CHECK(tg_book_step(book, 0, 5, 10, 100, 1, 3, other, &f, &code, &resynced) == TG_OK);
    CHECK(code == TG_BOOK_OK && resynced == 1 && mid == 99.5 && ask_size[0] == 4);
    int64_t out[12];
    CHECK(tg_book_snapshot(book, 0, 3, out, out + 1, out + 2, out + 3, 4) == TG_OK);
    CHECK(memcmp(out, other, sizeof other) == 0);

    /* A rejected message (cancel at a price with no level) leaves the book; the row check runs. */
    CHECK(tg_book_step(book, 0, 3, 1, 50, 1, 3, other, &f, &code, &resynced) == TG_OK);
    CHECK(code == TG_BOOK_NO_LEVEL && resynced == 0 && mid == 99.5);

    /* No row: the message and the features only. */
    CHECK(tg_book_step(book, 0, 4, 4, 100, -1, 0, NULL, &f, &code, &resynced) == TG_OK);
    CHECK(code == TG_BOOK_OK && resynced == 0 && mid == 100.5 && ask_size[0] == 6);   /* 100 gone */

    /* A row that is not a book: TG_EDATA, the book as the message left it. */
    int64_t bad[12];
    CHECK(tg_book_snapshot(book, 0, 3, bad, bad + 1, bad + 2, bad + 3, 4) == TG_OK);
    bad[11] = -1;
    CHECK(tg_book_step(book, 0, 1, 1, 99, 1, 3, bad, &f, &code, &resynced) == TG_EDATA);
    CHECK(code == TG_BOOK_OK && resynced == 0);
    CHECK(tg_book_snapshot(book, 0, 1, out, out + 1, out + 2, out + 3, 4) == TG_OK);
    CHECK(out[2] == 99 && out[3] == 11);   /* the message applied */

    /* Arguments. */
    CHECK(tg_book_step(book, 2, 1, 1, 99, 1, 0, NULL, &f, &code, NULL) == TG_ERANGE);
    CHECK(tg_book_step(book, 0, 1, 1, 99, 1, 3, NULL, &f, &code, NULL) == TG_EINVAL);
    CHECK(tg_book_step(book, 0, 1, 1, 99, 1, -1, row, &f, &code, NULL) == TG_EINVAL);
    CHECK(tg_book_step(NULL, 0, 1, 1, 99, 1, 0, NULL, &f, &code, NULL) == TG_EINVAL);
    CHECK(tg_book_step(book, 0, 1, 1, 99, 1, 0, NULL, NULL, NULL, NULL) == TG_OK);   /* outputs optional */
    tg_book_destroy(book);
}

static void test_replay(void)
{
    tg_book *book = NULL;
    CHECK(tg_book_create(2, 1, 16, &book) == TG_OK);
    const int64_t rows[5][8] = {
        {101, 5, 99, 7, 102, 6, 98, 8},
        {101, 5, 99, 7, 102, 6, 98, 8},   /* submit beyond the window */
        {102, 6, 99, 7, 105, 4, 98, 8},   /* delete 101: refill */
        {102, 6, 99, 7, 105, 4, 98, 8},   /* delete beyond the window */
        {102, 6, 99, 3, 105, 4, 98, 8},   /* wrong: message takes 7 */
    };
    tg_message m[5] = {
        {0, 1, 1, 5, 101, -1, 0},
        {0, 1, 2, 3, 97, 1, 0},
        {0, 3, 1, 5, 101, -1, 0},
        {0, 3, 2, 3, 97, 1, 0},
        {0, 3, 3, 7, 99, 1, 0},
    };
    int8_t reason[5];
    tg_replay_stats st;
    CHECK(tg_lobster_replay(book, 1, 5, m, 2, &rows[0][0], reason, &st) == TG_OK);
    CHECK(reason[0] == TG_RESYNC_INITIAL && reason[1] == TG_RESYNC_NONE && reason[2] == TG_RESYNC_WINDOW_REFILL
          && reason[3] == TG_RESYNC_OUTSIDE_WINDOW && reason[4] == TG_RESYNC_MISMATCH);
    CHECK(st.messages == 5 && st.exact == 1 && st.mismatches == 1 && st.first_mismatch == 4);
    CHECK(st.resyncs[1] == 1 && st.resyncs[2] == 1 && st.resyncs[3] == 1 && st.resyncs[4] == 1);
    CHECK(tg_lobster_replay(book, 2, 5, m, 2, &rows[0][0], reason, &st) == TG_ERANGE);
    CHECK(tg_lobster_replay(book, 0, 5, m, 0, &rows[0][0], reason, &st) == TG_EINVAL);
    CHECK(tg_lobster_replay(book, 0, 5, m, 2, &rows[0][0], reason, NULL) == TG_EINVAL);
    int64_t badrows[2][4] = {{101, 5, 99, 7}, {101, 5, 99, -7}};
    CHECK(tg_lobster_replay(book, 0, 2, m, 1, &badrows[0][0], NULL, &st) == TG_EDATA);
    CHECK(st.first_mismatch == 1);
    tg_book_destroy(book);
}

/* Parses `text` from an exact-size heap copy (no terminator). */
static int parse(const char *text, int32_t ncols, const uint8_t *is_float, int64_t max_rows,
                 double *f, int64_t *i, int64_t *n, tg_csv_error *err)
{
    size_t len = strlen(text);
    char *buf = malloc(len ? len : 1);
    memcpy(buf, text, len);
    int st = tg_csv_parse(buf, (int64_t)len, ncols, is_float, max_rows, f, i, n, err);
    free(buf);
    return st;
}

static void test_csv(void)
{
    const uint8_t kinds[3] = {1, 0, 0};
    double f[8];
    int64_t iv[16], n = -1;
    tg_csv_error err;
    CHECK(parse("1.5,2,-3\r\n\n 34200.004241176 , 9223372036854775807,-9223372036854775808", 3, kinds, 4,
                f, iv, &n, &err) == TG_OK);
    CHECK(n == 2 && f[0] == 1.5 && f[1] == 34200.004241176 && iv[0] == 2 && iv[1] == -3);
    CHECK(iv[2] == INT64_MAX && iv[3] == INT64_MIN);
    CHECK(parse("1,2,3\n1,2\n", 3, kinds, 4, f, iv, &n, &err) == TG_EDATA);
    CHECK(err.kind == TG_CSV_FIELDS && err.line == 2 && err.fields == 2);
    CHECK(parse("1,2,3\n\n1,x,3", 3, kinds, 4, f, iv, &n, &err) == TG_EDATA);
    CHECK(err.kind == TG_CSV_NUMBER && err.line == 3 && err.column == 2);
    CHECK(parse("1,2,3", 3, kinds, 4, f, iv, &n, &err) == TG_OK && n == 1);
    CHECK(parse("1,2,3-", 3, kinds, 4, f, iv, &n, &err) == TG_EDATA && err.column == 3);
    CHECK(parse("1,2,9223372036854775808", 3, kinds, 4, f, iv, &n, &err) == TG_EDATA);
    CHECK(err.kind == TG_CSV_RANGE && err.column == 3);
    CHECK(parse("1e,2,3", 3, kinds, 4, f, iv, &n, &err) == TG_EDATA && err.column == 1);
    CHECK(parse(".,2,3", 3, kinds, 4, f, iv, &n, &err) == TG_EDATA && err.column == 1);
    CHECK(parse("1,2,3\n4,5,6\n", 3, kinds, 1, f, iv, &n, &err) == TG_EDATA && err.kind == TG_CSV_ROWS);
    CHECK(parse("", 3, kinds, 0, NULL, NULL, &n, &err) == TG_OK && n == 0);
    CHECK(parse("0.1234567890123456789012,2,3", 3, kinds, 1, f, iv, &n, &err) == TG_OK);
    CHECK(f[0] == 0.1234567890123456789012);
    CHECK(parse("1,2,3", 0, kinds, 1, f, iv, &n, &err) == TG_EINVAL);
}

int main(void)
{
    test_random_stream_many_instruments();
    test_growth_and_bounds();
    test_sync_row();
    test_step();
    test_replay();
    test_csv();
    if (failures)
        fprintf(stderr, "test_book: %d failure(s)\n", failures);
    else
        printf("test_book: all passed\n");
    return failures != 0;
}
