/* LOBSTER files: a strict CSV number parser and the replay of a message file against its
 * orderbook file (the BOOK section of tickgpu.h).
 *
 * Replay model. Orderbook row i is the book after message i, but a level-L file only carries
 * the L-level window: the level that moves into the window when a level inside it empties comes
 * from outside it, and the initial book is not in the message file at all. A real feed handler
 * takes such state from its snapshot channel; here the orderbook row is that channel. So each
 * transition (row i-1 + message i -> row i) is checked, and where the file provably cannot carry
 * the information the book is set from row i and the resync counted by reason. Everything else
 * that disagrees is a mismatch: a real inconsistency.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tickgpu.h"
#include "book_internal.h"

/* ---- replay ---------------------------------------------------------------------------- */

/* Does the top `levels` of side s equal the row's window for that side (from level `from`)? An
   empty row level (size 0) must be empty in the book; its price is not compared, so any empty
   encoding is accepted. */
static int side_matches(const tg_side *side, int s, int32_t from, int32_t levels, const int64_t *row)
{
    const int64_t *price = row + (s == TG_ASK ? 0 : 2), *size = price + 1;
    for (int32_t k = from; k < levels; k++) {
        int64_t z = size[4 * k];
        if (k >= side->n) {
            if (z != 0)
                return 0;
            continue;
        }
        const tg_level *lv = &side->lv[side->n - 1 - k];
        int64_t p = s == TG_BID ? lv->key : -lv->key;
        if (z != lv->size || price[4 * k] != p)
            return 0;
    }
    return 1;
}

static int window_matches(const tg_instrument *in, int32_t levels, const int64_t *row)
{
    return side_matches(&in->side[TG_BID], TG_BID, 0, levels, row)
        && side_matches(&in->side[TG_ASK], TG_ASK, 0, levels, row);
}

/* After a level of side s emptied: the other side and the first L-1 levels of side s match, and
   the row's level L on side s is occupied and worse than anything the book holds. */
static int is_window_refill(const tg_instrument *in, int s, int32_t levels, const int64_t *row)
{
    const tg_side *side = &in->side[s];
    if (side->n != levels - 1)
        return 0;
    if (!side_matches(&in->side[1 - s], 1 - s, 0, levels, row))
        return 0;
    if (!side_matches(side, s, 0, levels - 1, row))
        return 0;
    const int64_t *last = row + 4 * (levels - 1) + (s == TG_ASK ? 0 : 2);
    if (last[1] <= 0)
        return 0;
    int64_t key = s == TG_BID ? last[0] : -last[0];
    return side->n == 0 || key < side->lv[0].key;
}

/* A cancel/delete/execution at a price worse than the last level of a full window refers to an
   order the window never showed. */
static int is_outside_window(const tg_instrument *in, const tg_message *m, int32_t levels)
{
    if (m->type < TG_MSG_CANCEL || m->type > TG_MSG_EXECUTE)
        return 0;
    if (m->direction != 1 && m->direction != -1)
        return 0;
    int s = m->direction == 1 ? TG_BID : TG_ASK;
    const tg_side *side = &in->side[s];
    int64_t key = s == TG_BID ? m->price : -m->price;
    return side->n == levels && key < side->lv[0].key;
}

int tg_lobster_replay(tg_book *book, int32_t instrument, int64_t n, const tg_message *msgs,
                      int32_t levels, const int64_t *orderbook, int8_t *row_reason,
                      tg_replay_stats *stats)
{
    if (book == NULL || stats == NULL || n < 0 || levels < 1)
        return TG_EINVAL;
    if (n > 0 && (msgs == NULL || orderbook == NULL))
        return TG_EINVAL;
    if (instrument < 0 || instrument >= book->n_instruments)
        return TG_ERANGE;
    memset(stats, 0, sizeof *stats);
    stats->first_mismatch = -1;
    tg_instrument *in = &book->inst[instrument];
    const int64_t width = 4 * (int64_t)levels;
    for (int64_t i = 0; i < n; i++) {
        const int64_t *row = orderbook + i * width;
        int reason = TG_RESYNC_INITIAL;
        if (i > 0) {
            const tg_message *m = &msgs[i];
            int emptied;
            int code = tg_book_apply_one(book, instrument, m, &emptied);
            if (code == TG_BOOK_OK) {
                if (window_matches(in, levels, row))
                    reason = TG_RESYNC_NONE;
                else if (emptied && is_window_refill(in, m->direction == 1 ? TG_BID : TG_ASK, levels, row))
                    reason = TG_RESYNC_WINDOW_REFILL;
                else
                    reason = TG_RESYNC_MISMATCH;
            } else if (code == TG_BOOK_NO_LEVEL && is_outside_window(in, m, levels)
                       && window_matches(in, levels, row)) {
                reason = TG_RESYNC_OUTSIDE_WINDOW;
            } else if (code == TG_BOOK_NO_MEMORY) {
                return TG_ENOMEM;
            } else {
                reason = TG_RESYNC_MISMATCH;
            }
        }
        if (reason == TG_RESYNC_NONE) {
            /* A submit may have pushed a level out of the window; beyond it the file says
               nothing (events there are not in it), so the book keeps only the window. */
            tg_book_truncate(book, instrument, levels);
            stats->exact++;
        } else {
            int status = tg_book_sync_row(book, instrument, levels, row);
            if (status != TG_OK) {
                /* The row itself is not a book (unsorted, an occupied level after an empty one). */
                stats->messages = i;
                stats->first_mismatch = i;
                return status;
            }
            stats->resyncs[reason]++;
            if (reason == TG_RESYNC_MISMATCH) {
                stats->mismatches++;
                if (stats->first_mismatch < 0)
                    stats->first_mismatch = i;
            }
        }
        if (row_reason)
            row_reason[i] = (int8_t)reason;
        stats->messages = i + 1;
    }
    return TG_OK;
}

int tg_book_step(tg_book *book, int32_t instrument, int32_t type, int64_t size, int64_t price,
                 int32_t direction, int32_t levels, const int64_t *row, const tg_book_features *out,
                 int8_t *code, int32_t *resynced)
{
    if (book == NULL || levels < 0 || (levels > 0 && row == NULL) || (out != NULL && out->levels < 0))
        return TG_EINVAL;
    if (instrument < 0 || instrument >= book->n_instruments)
        return TG_ERANGE;
    if (resynced)
        *resynced = 0;
    tg_message m = {0.0, type, 0, size, price, direction, instrument};
    int emptied;
    int c = tg_book_apply_one(book, instrument, &m, &emptied);
    if (code)
        *code = (int8_t)c;
    if (c == TG_BOOK_NO_MEMORY)
        return TG_ENOMEM;
    tg_instrument *in = &book->inst[instrument];
    if (levels > 0 && !window_matches(in, levels, row)) {
        int status = tg_book_sync_row(book, instrument, levels, row);
        if (status != TG_OK)
            return status;
        if (resynced)
            *resynced = 1;
    }
    if (out)
        tg_book_features_row(in, out, 0);
    return TG_OK;
}

/* ---- CSV numbers --------------------------------------------------------------------------- */

/* parse_float's copy for strtod failed: not a tg_csv_kind, tg_csv_parse returns TG_ENOMEM. */
#define CSV_NO_MEMORY (-1)

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

static const char *skip_blanks(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\t'))
        p++;
    return p;
}

static int parse_int(const char **pp, const char *end, int64_t *out)
{
    const char *p = *pp;
    int neg = 0;
    if (p < end && (*p == '-' || *p == '+')) {
        neg = *p == '-';
        p++;
    }
    if (p == end || !is_digit(*p))
        return TG_CSV_NUMBER;
    const uint64_t limit = neg ? (UINT64_C(1) << 63) : (UINT64_C(1) << 63) - 1;
    uint64_t v = 0;
    for (; p < end && is_digit(*p); p++) {
        uint64_t d = (uint64_t)(*p - '0');
        if (v > (limit - d) / 10)
            return TG_CSV_RANGE;
        v = v * 10 + d;
    }
    *out = neg ? (int64_t)(UINT64_C(0) - v) : (int64_t)v;
    *pp = p;
    return TG_CSV_OK;
}

static const double POW10[23] = {
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
    1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
};

/* A decimal number [sign] digits [. digits] [e [sign] digits]. When the significant digits fit
   in 2^53 and the power of ten is exact (|e| <= 22) one multiplication or division by an exact
   power of ten is correctly rounded (Clinger's fast path); anything else goes to strtod.
   TG_CSV_RANGE for a value beyond the double range: a time of inf is no time. */
static int parse_float(const char **pp, const char *end, double *out)
{
    const char *start = *pp, *p = start;
    int neg = 0;
    if (p < end && (*p == '-' || *p == '+')) {
        neg = *p == '-';
        p++;
    }
    uint64_t mant = 0;
    int digits = 0, sig = 0, exp10 = 0, exact = 1;
    for (; p < end && is_digit(*p); p++, digits++) {
        if (sig < 19) {
            mant = mant * 10 + (uint64_t)(*p - '0');
            sig += mant != 0;
        } else {
            exact = 0;
            exp10++;
        }
    }
    if (p < end && *p == '.') {
        p++;
        for (; p < end && is_digit(*p); p++, digits++) {
            if (sig < 19) {
                mant = mant * 10 + (uint64_t)(*p - '0');
                sig += mant != 0;
                exp10--;
            } else {
                exact = 0;
            }
        }
    }
    if (digits == 0)
        return TG_CSV_NUMBER;
    if (p < end && (*p == 'e' || *p == 'E')) {
        const char *q = p + 1;
        int eneg = 0;
        if (q < end && (*q == '-' || *q == '+')) {
            eneg = *q == '-';
            q++;
        }
        if (q == end || !is_digit(*q))
            return TG_CSV_NUMBER;
        int e = 0;
        for (; q < end && is_digit(*q); q++)
            if (e < 100000)
                e = e * 10 + (*q - '0');
        exp10 += eneg ? -e : e;
        p = q;
    }
    double v;
    if (exact && mant <= (UINT64_C(1) << 53) && exp10 >= -22 && exp10 <= 22) {
        v = exp10 >= 0 ? (double)mant * POW10[exp10] : (double)mant / POW10[-exp10];
    } else {
        /* strtod needs a terminated string; the field is copied (to the heap only when it is
           longer than any time LOBSTER writes). The syntax was checked above, so strtod reads
           exactly this span. */
        char small[128], *buf = small;
        size_t len = (size_t)(p - start);
        if (len >= sizeof small && (buf = malloc(len + 1)) == NULL)
            return CSV_NO_MEMORY;
        memcpy(buf, start, len);
        buf[len] = '\0';
        v = strtod(buf, NULL);
        if (buf != small)
            free(buf);
        neg = 0;   /* strtod read the sign */
        if (!isfinite(v))
            return TG_CSV_RANGE;
    }
    *out = neg ? -v : v;
    *pp = p;
    return TG_CSV_OK;
}

static int csv_fail(tg_csv_error *err, int kind, int64_t line, int32_t column, int32_t fields)
{
    if (err) {
        err->kind = kind;
        err->line = line;
        err->column = column;
        err->fields = fields;
    }
    return TG_EDATA;
}

int tg_csv_parse(const char *text, int64_t len, int32_t ncols, const uint8_t *is_float,
                 int64_t max_rows, double *f_out, int64_t *i_out, int64_t *n_rows, tg_csv_error *err)
{
    if (err)
        memset(err, 0, sizeof *err);
    if (n_rows == NULL || ncols < 1 || is_float == NULL || len < 0 || max_rows < 0
        || (len > 0 && text == NULL))
        return TG_EINVAL;
    *n_rows = 0;
    int32_t nf = 0;
    for (int32_t c = 0; c < ncols; c++)
        nf += is_float[c] != 0;
    int32_t ni = ncols - nf;
    if ((nf > 0 && f_out == NULL && max_rows > 0) || (ni > 0 && i_out == NULL && max_rows > 0))
        return TG_EINVAL;

    const char *p = text, *end = text + len;
    int64_t line = 0, rows = 0;
    while (p < end) {
        line++;
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (eol == NULL)
            eol = end;
        /* Every carriage return before the newline: files converted to CRLF twice end lines
           in \r\r\n. */
        const char *le = eol;
        while (le > p && le[-1] == '\r')
            le--;
        const char *next = eol < end ? eol + 1 : end;
        if (skip_blanks(p, le) == le) {
            p = next;
            continue;
        }
        int32_t fields = 1;
        for (const char *q = p; q < le; q++)
            fields += *q == ',';
        if (fields != ncols)
            return csv_fail(err, TG_CSV_FIELDS, line, 0, fields);
        if (rows >= max_rows)
            return csv_fail(err, TG_CSV_ROWS, line, 0, fields);
        double *frow = nf > 0 ? f_out + rows * nf : NULL;
        int64_t *irow = ni > 0 ? i_out + rows * ni : NULL;
        const char *q = p;
        for (int32_t c = 0; c < ncols; c++) {
            q = skip_blanks(q, le);
            int kind = is_float[c] ? parse_float(&q, le, frow++) : parse_int(&q, le, irow++);
            if (kind == CSV_NO_MEMORY)
                return TG_ENOMEM;
            if (kind != TG_CSV_OK)
                return csv_fail(err, kind, line, c + 1, fields);
            q = skip_blanks(q, le);
            if (c + 1 < ncols) {
                if (q == le || *q != ',')
                    return csv_fail(err, TG_CSV_NUMBER, line, c + 1, fields);
                q++;
            } else if (q != le) {
                return csv_fail(err, TG_CSV_NUMBER, line, c + 1, fields);
            }
        }
        rows++;
        p = next;
    }
    *n_rows = rows;
    return TG_OK;
}
