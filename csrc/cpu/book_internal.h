/* Order-book internals shared by book.c and lobster.c; not part of the ABI. */
#ifndef TICKGPU_BOOK_INTERNAL_H
#define TICKGPU_BOOK_INTERNAL_H

#include <stdint.h>

#include "tickgpu.h"

/* LOBSTER's encoding of an empty level (with size 0). */
#define TG_BOOK_EMPTY_ASK INT64_C(9999999999)
#define TG_BOOK_EMPTY_BID INT64_C(-9999999999)
/* Prices must lie in (0, TG_BOOK_MAX_PRICE): sums of two prices then fit in int64. */
#define TG_BOOK_MAX_PRICE (INT64_C(1) << 62)

enum { TG_BID = 0, TG_ASK = 1 };

/* key = price on the bid side, -price on the ask side: larger key = better level. */
typedef struct {
    int64_t key;
    int64_t size;
} tg_level;

/* Levels sorted by ascending key: the best level is lv[n - 1]. */
typedef struct {
    tg_level *lv;
    int32_t n, cap;
} tg_side;

typedef struct {
    tg_side side[2];   /* [TG_BID], [TG_ASK] */
    int32_t state;     /* tg_trading_state */
} tg_instrument;

struct tg_book {
    int32_t n_instruments;
    int32_t max_levels;
    tg_instrument *inst;
};

/* Applies one message to `instrument` (ignoring m->instrument); returns a tg_book_code and sets
   *emptied when a level was removed. */
int tg_book_apply_one(tg_book *b, int32_t instrument, const tg_message *m, int *emptied);
/* Writes row `row` of the feature outputs for one instrument's state. */
void tg_book_features_row(const tg_instrument *in, const tg_book_features *f, int64_t row);
/* Keeps only the `levels` best levels of each side (instrument must be valid). */
void tg_book_truncate(tg_book *book, int32_t instrument, int32_t levels);

#endif
