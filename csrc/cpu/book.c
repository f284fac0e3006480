/* Price-level order book for many instruments (the BOOK section of tickgpu.h).
 *
 * Layout: each side is one array of (key, size) levels sorted by ascending key with the best
 * level at the end. The key is the price on the bid side and minus the price on the ask side,
 * so "better" is "larger key" on both sides and one set of routines serves both. Keeping the
 * best level at the end means an update at the top (where most LOBSTER events land) moves at
 * most a few levels, and truncating to a window is a short memmove.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tickgpu.h"
#include "book_internal.h"

/* Levels scanned linearly from the top before falling back to a binary search: most events
   are within the first few levels, where a scan beats the search's unpredictable branches. */
#define TOP_SCAN 8

int tg_book_create(int32_t n_instruments, int32_t initial_levels, int32_t max_levels, tg_book **out)
{
    if (out == NULL)
        return TG_EINVAL;
    *out = NULL;
    if (n_instruments < 1 || initial_levels < 1 || max_levels < initial_levels)
        return TG_EINVAL;
    tg_book *b = calloc(1, sizeof *b);
    if (b == NULL)
        return TG_ENOMEM;
    b->n_instruments = n_instruments;
    b->max_levels = max_levels;
    b->inst = calloc((size_t)n_instruments, sizeof *b->inst);
    if (b->inst == NULL) {
        free(b);
        return TG_ENOMEM;
    }
    for (int32_t i = 0; i < n_instruments; i++) {
        for (int s = 0; s < 2; s++) {
            tg_side *side = &b->inst[i].side[s];
            side->lv = malloc((size_t)initial_levels * sizeof *side->lv);
            if (side->lv == NULL) {
                tg_book_destroy(b);
                return TG_ENOMEM;
            }
            side->cap = initial_levels;
        }
    }
    *out = b;
    return TG_OK;
}

void tg_book_destroy(tg_book *book)
{
    if (book == NULL)
        return;
    if (book->inst != NULL) {
        for (int32_t i = 0; i < book->n_instruments; i++) {
            free(book->inst[i].side[0].lv);
            free(book->inst[i].side[1].lv);
        }
        free(book->inst);
    }
    free(book);
}

int32_t tg_book_instruments(const tg_book *book)
{
    return book == NULL ? 0 : book->n_instruments;
}

/* Index of `key` in the side (*found = 1) or the index where it would be inserted (*found = 0). */
static int32_t find_level(const tg_side *s, int64_t key, int *found)
{
    int32_t j = s->n - 1;
    for (int k = 0; k < TOP_SCAN && j >= 0; k++, j--) {
        if (s->lv[j].key == key) {
            *found = 1;
            return j;
        }
        if (s->lv[j].key < key) {
            *found = 0;
            return j + 1;
        }
    }
    /* Binary search over [0, j]: the first index whose key is >= key. */
    int32_t lo = 0, hi = j + 1;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (s->lv[mid].key < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo <= j && s->lv[lo].key == key;
    return lo;
}

static int grow(tg_side *s, int32_t max_levels)
{
    if (s->cap >= max_levels)
        return TG_BOOK_TOO_DEEP;
    int64_t cap = (int64_t)s->cap * 2;
    if (cap > max_levels)
        cap = max_levels;
    tg_level *lv = realloc(s->lv, (size_t)cap * sizeof *lv);
    if (lv == NULL)
        return TG_BOOK_NO_MEMORY;
    s->lv = lv;
    s->cap = (int32_t)cap;
    return TG_BOOK_OK;
}

static int add_size(tg_side *s, int32_t max_levels, int64_t key, int64_t size)
{
    int found;
    int32_t j = find_level(s, key, &found);
    if (found) {
        if (s->lv[j].size > INT64_MAX - size)
            return TG_BOOK_BAD_SIZE;
        s->lv[j].size += size;
        return TG_BOOK_OK;
    }
    if (s->n == s->cap) {
        int code = grow(s, max_levels);
        if (code != TG_BOOK_OK)
            return code;
    }
    memmove(&s->lv[j + 1], &s->lv[j], (size_t)(s->n - j) * sizeof *s->lv);
    s->lv[j].key = key;
    s->lv[j].size = size;
    s->n++;
    return TG_BOOK_OK;
}

static int remove_size(tg_side *s, int64_t key, int64_t size, int partial, int *emptied)
{
    int found;
    int32_t j = find_level(s, key, &found);
    if (!found)
        return TG_BOOK_NO_LEVEL;
    if (size > s->lv[j].size)
        return TG_BOOK_OVERSIZE;
    if (size == s->lv[j].size) {
        /* A partial cancel leaves its order resting, so it cannot take a whole level. */
        if (partial)
            return TG_BOOK_PARTIAL_EMPTIES;
        memmove(&s->lv[j], &s->lv[j + 1], (size_t)(s->n - j - 1) * sizeof *s->lv);
        s->n--;
        *emptied = 1;
        return TG_BOOK_OK;
    }
    s->lv[j].size -= size;
    return TG_BOOK_OK;
}

int tg_book_apply_one(tg_book *b, int32_t instrument, const tg_message *m, int *emptied)
{
    *emptied = 0;
    if (instrument < 0 || instrument >= b->n_instruments)
        return TG_BOOK_BAD_INSTRUMENT;
    tg_instrument *in = &b->inst[instrument];
    int32_t type = m->type;
    if (type < TG_MSG_SUBMIT || type > TG_MSG_HALT)
        return TG_BOOK_BAD_TYPE;
    if (type == TG_MSG_HALT) {
        switch (m->price) {
        case -1: in->state = TG_HALTED; return TG_BOOK_OK;
        case 0: in->state = TG_QUOTING; return TG_BOOK_OK;
        case 1: in->state = TG_TRADING; return TG_BOOK_OK;
        default: return TG_BOOK_BAD_PRICE;
        }
    }
    if (type == TG_MSG_CROSS)
        return m->size < 0 ? TG_BOOK_BAD_SIZE : TG_BOOK_OK;
    if (m->direction != 1 && m->direction != -1)
        return TG_BOOK_BAD_DIRECTION;
    if (type == TG_MSG_EXECUTE_HIDDEN)
        return m->size < 0 ? TG_BOOK_BAD_SIZE : TG_BOOK_OK;
    if (m->size <= 0)
        return TG_BOOK_BAD_SIZE;
    if (m->price <= 0 || m->price >= TG_BOOK_MAX_PRICE)
        return TG_BOOK_BAD_PRICE;
    int s = m->direction == 1 ? TG_BID : TG_ASK;
    int64_t key = s == TG_BID ? m->price : -m->price;
    if (type == TG_MSG_SUBMIT)
        return add_size(&in->side[s], b->max_levels, key, m->size);
    return remove_size(&in->side[s], key, m->size, type == TG_MSG_CANCEL, emptied);
}

/* (b - a) / (b + a) for sums of level sizes b, a >= 0; NaN when both are 0. Sizes are int64 each
   and a depth sum runs over up to 2^31 levels, so the sums are 128-bit: exact, with the one
   rounding of each to double (int64 arithmetic would overflow for large sizes). */
static double ratio_or_nan(unsigned __int128 b, unsigned __int128 a)
{
    if (b + a == 0)
        return NAN;
    double num = b >= a ? (double)(b - a) : -(double)(a - b);
    return num / (double)(b + a);
}

void tg_book_features_row(const tg_instrument *in, const tg_book_features *f, int64_t row)
{
    const tg_side *bid = &in->side[TG_BID], *ask = &in->side[TG_ASK];
    int have_bid = bid->n > 0, have_ask = ask->n > 0;
    int64_t bp = have_bid ? bid->lv[bid->n - 1].key : 0, bs = have_bid ? bid->lv[bid->n - 1].size : 0;
    int64_t ap = have_ask ? -ask->lv[ask->n - 1].key : 0, as = have_ask ? ask->lv[ask->n - 1].size : 0;
    int both = have_bid && have_ask;
    /* Prices are below 2^62, so their sum cannot overflow int64. */
    if (f->mid)
        f->mid[row] = both ? 0.5 * (double)(bp + ap) : NAN;
    if (f->spread)
        f->spread[row] = both ? (double)(ap - bp) : NAN;
    if (f->microprice) {
        double w = (double)bs + (double)as;
        f->microprice[row] = both ? ((double)bp * (double)as + (double)ap * (double)bs) / w : NAN;
    }
    if (f->imbalance)
        f->imbalance[row] = ratio_or_nan((unsigned __int128)bs, (unsigned __int128)as);
    int32_t L = f->levels;
    if (L <= 0 || (f->depth_imbalance == NULL && f->bid_size == NULL && f->ask_size == NULL))
        return;
    unsigned __int128 bsum = 0, asum = 0;   /* level sizes are >= 0 */
    for (int32_t k = 0; k < L; k++) {
        int64_t b = k < bid->n ? bid->lv[bid->n - 1 - k].size : 0;
        int64_t a = k < ask->n ? ask->lv[ask->n - 1 - k].size : 0;
        bsum += b;
        asum += a;
        if (f->bid_size)
            f->bid_size[row * L + k] = b;
        if (f->ask_size)
            f->ask_size[row * L + k] = a;
    }
    if (f->depth_imbalance)
        f->depth_imbalance[row] = ratio_or_nan(bsum, asum);
}

int tg_book_apply(tg_book *book, int64_t n, const tg_message *msgs, int32_t stop_on_error,
                  int8_t *codes, const tg_book_features *features,
                  int64_t *n_rejected, int64_t *first_rejected)
{
    if (n_rejected)
        *n_rejected = 0;
    if (first_rejected)
        *first_rejected = -1;
    if (book == NULL || n < 0 || (n > 0 && msgs == NULL))
        return TG_EINVAL;
    if (features != NULL && features->levels < 0)
        return TG_EINVAL;
    int64_t rejected = 0, first = -1;
    int status = TG_OK;
    for (int64_t i = 0; i < n; i++) {
        int emptied;
        int code = tg_book_apply_one(book, msgs[i].instrument, &msgs[i], &emptied);
        if (codes)
            codes[i] = (int8_t)code;
        if (code != TG_BOOK_OK) {
            rejected++;
            if (first < 0)
                first = i;
            if (code == TG_BOOK_NO_MEMORY)
                status = TG_ENOMEM;
            else if (status == TG_OK)
                status = TG_EDATA;
            if (stop_on_error || code == TG_BOOK_NO_MEMORY)
                break;
        }
        /* A rejected message for a valid instrument still gets its (unchanged) state's row, so
           row i always describes the book after message i. */
        if (features && code != TG_BOOK_BAD_INSTRUMENT)
            tg_book_features_row(&book->inst[msgs[i].instrument], features, i);
    }
    if (n_rejected)
        *n_rejected = rejected;
    if (first_rejected)
        *first_rejected = first;
    return status;
}

int tg_book_apply_fields(tg_book *book, int32_t instrument, int32_t type, int64_t size, int64_t price,
                         int32_t direction, int8_t *code)
{
    if (book == NULL)
        return TG_EINVAL;
    tg_message m = {0.0, type, 0, size, price, direction, instrument};
    int emptied;
    int c = tg_book_apply_one(book, instrument, &m, &emptied);
    if (code)
        *code = (int8_t)c;
    return c == TG_BOOK_OK ? TG_OK : c == TG_BOOK_NO_MEMORY ? TG_ENOMEM : TG_EDATA;
}

int tg_book_snapshot(const tg_book *book, int32_t instrument, int32_t levels,
                     int64_t *ask_price, int64_t *ask_size, int64_t *bid_price, int64_t *bid_size,
                     int64_t stride)
{
    if (book == NULL || levels < 0 || stride < 0)
        return TG_EINVAL;
    if (instrument < 0 || instrument >= book->n_instruments)
        return TG_ERANGE;
    const tg_instrument *in = &book->inst[instrument];
    const tg_side *bid = &in->side[TG_BID], *ask = &in->side[TG_ASK];
    for (int32_t k = 0; k < levels; k++) {
        int64_t at = k * stride;
        int ha = k < ask->n, hb = k < bid->n;
        if (ask_price)
            ask_price[at] = ha ? -ask->lv[ask->n - 1 - k].key : TG_BOOK_EMPTY_ASK;
        if (ask_size)
            ask_size[at] = ha ? ask->lv[ask->n - 1 - k].size : 0;
        if (bid_price)
            bid_price[at] = hb ? bid->lv[bid->n - 1 - k].key : TG_BOOK_EMPTY_BID;
        if (bid_size)
            bid_size[at] = hb ? bid->lv[bid->n - 1 - k].size : 0;
    }
    return TG_OK;
}

/* Number of occupied levels in a snapshot side, or -1 if the snapshot is inconsistent. */
static int32_t check_snapshot_side(int s, int32_t levels, const int64_t *price, const int64_t *size,
                                   int64_t stride)
{
    int32_t used = 0;
    int seen_empty = 0;
    int64_t prev = 0;
    for (int32_t k = 0; k < levels; k++) {
        int64_t p = price[k * stride], z = size[k * stride];
        if (z < 0)
            return -1;
        if (z == 0) {
            seen_empty = 1;
            continue;
        }
        if (seen_empty)   /* an occupied level after an empty one */
            return -1;
        if (p <= 0 || p >= TG_BOOK_MAX_PRICE)
            return -1;
        int64_t key = s == TG_BID ? p : -p;
        if (k > 0 && key >= prev)   /* levels must get strictly worse */
            return -1;
        prev = key;
        used = k + 1;
    }
    return used;
}

static int reserve(tg_side *s, int32_t n, int32_t max_levels)
{
    if (n > max_levels)
        return TG_ERANGE;
    while (s->cap < n) {
        int code = grow(s, max_levels);
        if (code == TG_BOOK_NO_MEMORY)
            return TG_ENOMEM;
        if (code != TG_BOOK_OK)
            return TG_ERANGE;
    }
    return TG_OK;
}

/* Writes a checked snapshot side of `used` levels (best first) into the side (best last). */
static void fill_side(tg_side *side, int s, int32_t used, const int64_t *price, const int64_t *size,
                      int64_t stride)
{
    for (int32_t k = 0; k < used; k++) {
        tg_level *lv = &side->lv[used - 1 - k];
        lv->key = s == TG_BID ? price[k * stride] : -price[k * stride];
        lv->size = size[k * stride];
    }
    side->n = used;
}

int tg_book_set_side(tg_book *book, int32_t instrument, int32_t direction, int32_t levels,
                     const int64_t *price, const int64_t *size, int64_t stride)
{
    if (book == NULL || levels < 0 || stride < 0 || (levels > 0 && (price == NULL || size == NULL)))
        return TG_EINVAL;
    if (direction != 1 && direction != -1)
        return TG_EINVAL;
    if (instrument < 0 || instrument >= book->n_instruments)
        return TG_ERANGE;
    int s = direction == 1 ? TG_BID : TG_ASK;
    int32_t used = check_snapshot_side(s, levels, price, size, stride);
    if (used < 0)
        return TG_EDATA;
    tg_side *side = &book->inst[instrument].side[s];
    int status = reserve(side, used, book->max_levels);
    if (status != TG_OK)
        return status;
    fill_side(side, s, used, price, size, stride);
    return TG_OK;
}

int tg_book_sync_row(tg_book *book, int32_t instrument, int32_t levels, const int64_t *row)
{
    if (book == NULL || levels < 0 || (levels > 0 && row == NULL))
        return TG_EINVAL;
    if (instrument < 0 || instrument >= book->n_instruments)
        return TG_ERANGE;
    /* Check both sides before touching either, so a bad row leaves the book as it was. */
    int32_t na = check_snapshot_side(TG_ASK, levels, row + 0, row + 1, 4);
    int32_t nb = check_snapshot_side(TG_BID, levels, row + 2, row + 3, 4);
    if (na < 0 || nb < 0)
        return TG_EDATA;
    tg_instrument *in = &book->inst[instrument];
    int status = reserve(&in->side[TG_ASK], na, book->max_levels);
    if (status == TG_OK)
        status = reserve(&in->side[TG_BID], nb, book->max_levels);
    if (status != TG_OK)
        return status;
    fill_side(&in->side[TG_ASK], TG_ASK, na, row + 0, row + 1, 4);
    fill_side(&in->side[TG_BID], TG_BID, nb, row + 2, row + 3, 4);
    return TG_OK;
}

int tg_book_clear(tg_book *book, int32_t instrument)
{
    if (book == NULL)
        return TG_EINVAL;
    if (instrument < -1 || instrument >= book->n_instruments)
        return TG_ERANGE;
    int32_t lo = instrument < 0 ? 0 : instrument;
    int32_t hi = instrument < 0 ? book->n_instruments : instrument + 1;
    for (int32_t i = lo; i < hi; i++) {
        book->inst[i].side[0].n = 0;
        book->inst[i].side[1].n = 0;
        book->inst[i].state = TG_TRADING;
    }
    return TG_OK;
}

int tg_book_features_now(const tg_book *book, int32_t instrument, const tg_book_features *out)
{
    if (book == NULL || out == NULL || out->levels < 0)
        return TG_EINVAL;
    if (instrument < 0 || instrument >= book->n_instruments)
        return TG_ERANGE;
    tg_book_features_row(&book->inst[instrument], out, 0);
    return TG_OK;
}

int tg_book_info(const tg_book *book, int32_t instrument, int32_t *bid_levels, int32_t *ask_levels,
                 int32_t *state)
{
    if (book == NULL)
        return TG_EINVAL;
    if (instrument < 0 || instrument >= book->n_instruments)
        return TG_ERANGE;
    const tg_instrument *in = &book->inst[instrument];
    if (bid_levels)
        *bid_levels = in->side[TG_BID].n;
    if (ask_levels)
        *ask_levels = in->side[TG_ASK].n;
    if (state)
        *state = in->state;
    return TG_OK;
}

void tg_book_truncate(tg_book *book, int32_t instrument, int32_t levels)
{
    for (int s = 0; s < 2; s++) {
        tg_side *side = &book->inst[instrument].side[s];
        if (side->n > levels) {
            memmove(side->lv, side->lv + (side->n - levels), (size_t)levels * sizeof *side->lv);
            side->n = levels;
        }
    }
}
