/*
 * tickgpu.h -- the one C ABI of tickgpu's native core.
 *
 * The Python binding (CFFI, API mode) reads its cdef from the region between the two
 * TICKGPU_CDEF markers below, so that region holds only declarations CFFI can parse:
 * no preprocessor lines, no inline code. Everything outside it is for C callers only.
 *
 * Conventions
 *   - Every function returns a tg_status (0 on success); per-element problems are not
 *     errors of the call: they give NaN (and a per-element status where documented).
 *   - Array inputs come with an element stride: 1 for contiguous, 0 to broadcast one value.
 *   - `nthreads` <= 0 means "decide": one thread below TG_PARALLEL_MIN elements, else all cores.
 *   - Output pointers may be NULL where documented, to skip that output.
 */
#ifndef TICKGPU_H
#define TICKGPU_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* TICKGPU_CDEF_BEGIN */

typedef enum {
    TG_OK = 0,
    TG_EINVAL = 1,      /* a bad argument (NULL pointer, negative size, bad enum) */
    TG_ENOMEM = 2,      /* allocation failed */
    TG_ERANGE = 3,      /* an index or size beyond a capacity */
    TG_EDATA = 4,       /* data inconsistent with the state it is applied to */
    TG_ENODRIVER = 5,   /* the CUDA driver library could not be loaded or lacks a symbol */
    TG_ECUDA = 6,       /* a CUDA driver call failed; the CUresult is reported separately */
    TG_ETHREAD = 7,     /* a worker thread could not be started */
    TG_ECONTEXT = 8     /* making a CUDA context current failed; the CUresult is reported separately */
} tg_status;

const char *tg_status_name(int status);
int tg_num_cores(void);

/* DLPack export (csrc/py/dlpack.c; the export itself is called through ctypes, outside this cdef).
 * tg_dlpack_at_exit: from an atexit handler -- from then on, releasing an exported tensor touches
 * nothing (the interpreter is finalizing). tg_dlpack_live: tensors exported and not yet released. */
void tg_dlpack_at_exit(void);
long tg_dlpack_live(void);

/* ---- Black-Scholes-Merton greeks (csrc/cpu/greeks.c) ------------------------------------
 * Inputs: spot S, strike K, time t (years), rate r, vol sigma (per sqrt(year)), dividend q
 * (continuous), call (nonzero = call). Element strides s_* (0 broadcasts).
 * Outputs (any may be NULL): price, delta, gamma, vega (per 1.00 vol), theta (per year),
 * rho (per 1.00 rate), phi (dividend rho, per 1.00 q), vanna (d delta / d sigma),
 * volga (d vega / d sigma), charm (d delta / d t, per year of calendar time, i.e. -d/dT).
 * Invalid elements (non-finite, S <= 0, K <= 0, t < 0, sigma <= 0) give NaN in every output.
 * t == 0 (or sigma sqrt(t) too small for its reciprocal to be finite) gives the zero-total-
 * variance limit: price max(w (S e^{-qt} - K e^{-rt}), 0) with w = +1 call / -1 put; in the money:
 * delta w e^{-qt}, theta w (q S e^{-qt} - r K e^{-rt}), rho w t K e^{-rt}, phi -w t S e^{-qt},
 * charm w q e^{-qt}; out of the money all of these 0; gamma, vega, vanna, volga 0. Exactly at
 * the money the limits along S == K as t -> 0: delta w/2, gamma +inf, theta -inf, charm
 * -sign(r - q + sigma^2/2) inf (w q / 2 where that is 0), the rest half the ITM values or 0.
 * Valid inputs whose results exceed the type's range (S e^{-qt} overflowing) give inf or NaN.
 * Any stride < 0, a NULL input pointer (n > 0) or n < 0 is TG_EINVAL. */
typedef struct {
    const void *spot;   int64_t s_spot;
    const void *strike; int64_t s_strike;
    const void *t;      int64_t s_t;
    const void *rate;   int64_t s_rate;
    const void *vol;    int64_t s_vol;
    const void *div;    int64_t s_div;
    const uint8_t *call; int64_t s_call;
} tg_bsm_inputs;

typedef struct {
    void *price, *delta, *gamma, *vega, *theta, *rho, *phi, *vanna, *volga, *charm;
} tg_greeks_outputs;

int tg_greeks_f64(int64_t n, const tg_bsm_inputs *in, const tg_greeks_outputs *out, int nthreads);
int tg_greeks_f32(int64_t n, const tg_bsm_inputs *in, const tg_greeks_outputs *out, int nthreads);

/* ---- Implied volatility (csrc/cpu/iv.c, csrc/cpu/lbr_core.h) -----------------------------
 * Black-Scholes-Merton implied vol from premiums by Jaeckel's "Let's Be Rational" (two
 * Householder(3) iterations from a rational initial guess; about machine precision).
 * Inputs: price (premium, currency), spot S, strike K, t (years), rate r, dividend q (continuous),
 * call (nonzero = call); element strides s_* are 0 (broadcast) or 1 (contiguous), else TG_EINVAL.
 * Bounds on discounted quantities S e^{-qt}, K e^{-rt}: intrinsic max(+-(S e^{-qt} - K e^{-rt}), 0),
 * maximum S e^{-qt} (call) or K e^{-rt} (put).
 * Outputs: vol[n] (per sqrt(year); NaN where there is no answer, 0 at intrinsic) and status[n]
 * (tg_iv_status, may be NULL). f32: inputs promoted to double, solved, narrowed; PRECISION where
 * the time value (in the money) or the room below the maximum is under 2^-21 max(S e^{-qt}, K e^{-rt}). */
typedef enum {
    TG_IV_OK = 0,
    TG_IV_BELOW_INTRINSIC = 1,  /* price below the discounted intrinsic value: no vol exists */
    TG_IV_ABOVE_MAXIMUM = 2,    /* price at or above the no-arbitrage maximum (S e^{-qt} call, K e^{-rt} put) */
    TG_IV_BAD_INPUT = 3,        /* non-finite, S <= 0, K <= 0, t <= 0, price < 0 */
    TG_IV_AT_INTRINSIC = 4,     /* price equals intrinsic: vol is 0 (reported as 0, not NaN) */
    TG_IV_PRECISION = 5         /* float32 cannot resolve this price (time value below its resolution) */
} tg_iv_status;

typedef struct {
    const void *price;  int64_t s_price;
    const void *spot;   int64_t s_spot;
    const void *strike; int64_t s_strike;
    const void *t;      int64_t s_t;
    const void *rate;   int64_t s_rate;
    const void *div;    int64_t s_div;
    const uint8_t *call; int64_t s_call;
} tg_iv_inputs;

int tg_implied_vol_f64(int64_t n, const tg_iv_inputs *in, double *vol, int8_t *status, int nthreads);
int tg_implied_vol_f32(int64_t n, const tg_iv_inputs *in, float *vol, int8_t *status, int nthreads);
/* Normalised Black price b(x, s, theta) = Black(F, K, sigma, T, theta) / sqrt(F K) of an
   undiscounted option, x = ln(F/K), s = sigma sqrt(T), theta = +1 call / -1 put; s = 0 gives the
   intrinsic value, NaN for s < 0, NaN inputs or theta not +-1. Exposed for tests. */
double tg_normalised_black(double x, double s, double theta);
/* Its inverse: s from beta = b(x, s, theta), status a tg_iv_status (intrinsic 2 sinh(|x|/2) in the
   money, maximum e^{theta x/2}). Exposed for tests. */
double tg_normalised_implied_vol(double beta, double x, double theta, int *status);

/* ---- Volatility surface (csrc/cpu/surface.c) ----------------------------------------------
 * Grid: nk strictly increasing strikes, nt strictly increasing positive expiries (years),
 * vols[it * nk + ik]. mode 0: bilinear in total variance sigma^2 t with an implicit zero at t = 0
 * (QuantLib BlackVarianceSurface); mode 1: bilinear in vol. Extrapolation: flat in strike,
 * flat vol beyond the last expiry, and (mode 0) variance linear in t before the first expiry
 * (mode 1: flat vol there). what 0: vol, 1: total variance sigma^2 t.
 * A query with a non-finite strike or t, or t < 0, gives NaN; at t == 0 the variance is 0 and the
 * vol its limit (the first expiry's). The grid is checked on every call: nk, nt >= 1, finite
 * strictly increasing strikes, finite strictly increasing expiries > 0, finite vols >= 0, mode
 * and what 0 or 1, strides >= 0; anything else is TG_EINVAL (no calendar-arbitrage check). */
typedef struct {
    int32_t nk, nt;
    const double *strikes;
    const double *expiries;
    const double *vols;
    int32_t mode;
} tg_surface;

int tg_surface_eval(const tg_surface *surf, int64_t n, const double *strike, int64_t s_strike,
                    const double *t, int64_t s_t, double *out, int32_t what, int nthreads);

/* ---- Order book (csrc/cpu/book.c) -------------------------------------------------------- */
/* BOOK section, owned by csrc/cpu/book.c and csrc/cpu/lobster.c.
 *
 * A price-level book for many instruments. Prices are int64 ticks (LOBSTER: dollars x 10000;
 * prices must lie in (0, 2^62)), sizes int64 shares. Each side is a sorted array of aggregated
 * levels with the best level at the end, so updates near the top move few bytes. Level arrays
 * are preallocated (initial_levels per side) and grow by realloc up to max_levels; nothing else
 * on the per-message path allocates.
 *
 * Messages follow LOBSTER's event types. A message the book cannot apply consistently (a
 * cancel larger than its level, a cancel at a price with no level, a bad field) leaves the
 * book unchanged and is reported by a tg_book_code; nothing is clamped.
 *
 * Empty levels in snapshots use LOBSTER's encoding: ask price 9999999999, bid price
 * -9999999999, size 0. A level is empty exactly when its size is 0. */

typedef struct tg_book tg_book;

typedef struct {
    double time;          /* seconds after midnight; carried, not used by the book */
    int32_t type;         /* tg_message_type */
    int64_t order_id;
    int64_t size;         /* shares */
    int64_t price;        /* ticks; halts (type 7): -1 halt, 0 quoting resumes, 1 trading resumes */
    int32_t direction;    /* 1 buy order (bid side), -1 sell order (ask side) */
    int32_t instrument;   /* index into the book's instruments */
} tg_message;

typedef enum {
    TG_MSG_SUBMIT = 1,           /* new limit order: adds size at price */
    TG_MSG_CANCEL = 2,           /* partial cancel: removes size, the order (so the level) stays */
    TG_MSG_DELETE = 3,           /* total deletion of an order */
    TG_MSG_EXECUTE = 4,          /* execution of a visible order */
    TG_MSG_EXECUTE_HIDDEN = 5,   /* execution of a hidden order: book unchanged */
    TG_MSG_CROSS = 6,            /* cross / auction trade: book unchanged */
    TG_MSG_HALT = 7              /* trading state change, see tg_trading_state */
} tg_message_type;

typedef enum {
    TG_BOOK_OK = 0,
    TG_BOOK_BAD_TYPE = 1,         /* type not in 1..7 */
    TG_BOOK_BAD_DIRECTION = 2,    /* direction not +1/-1 (types 1-5) */
    TG_BOOK_BAD_INSTRUMENT = 3,   /* instrument index outside [0, n_instruments) */
    TG_BOOK_BAD_SIZE = 4,         /* size <= 0 (types 1-4), < 0 (5, 6), or a level would overflow */
    TG_BOOK_BAD_PRICE = 5,        /* price outside (0, 2^62) (types 1-4); halt price not -1/0/1 */
    TG_BOOK_NO_LEVEL = 6,         /* cancel/delete/execution at a price with no level on that side */
    TG_BOOK_OVERSIZE = 7,         /* cancel/delete/execution larger than its level's size */
    TG_BOOK_PARTIAL_EMPTIES = 8,  /* partial cancel (type 2) of the whole level: the order would be gone */
    TG_BOOK_TOO_DEEP = 9,         /* a new level beyond max_levels on that side */
    TG_BOOK_NO_MEMORY = 10        /* level growth failed */
} tg_book_code;

typedef enum {
    TG_TRADING = 0,   /* normal trading (the initial state) */
    TG_HALTED = 1,    /* halt message (price -1) seen */
    TG_QUOTING = 2    /* quoting resumed (price 0), trading not yet */
} tg_trading_state;

/* Per-state features, in ticks and shares. Any pointer may be NULL to skip that output; the
 * per-level arrays hold `levels` values per row (row-major, best level first, 0 beyond the book).
 *   mid             (best bid + best ask) / 2; NaN when a side is empty
 *   microprice      (bid px * ask size + ask px * bid size) / (bid size + ask size), best levels;
 *                   NaN when a side is empty
 *   spread          best ask - best bid; NaN when a side is empty (negative if the book is crossed)
 *   imbalance       (bid size - ask size) / (bid size + ask size) at the best levels, an empty side
 *                   counting 0; NaN when both sides are empty
 *   depth_imbalance the same over the `levels` best levels of each side
 *   bid_size, ask_size   size at each of the `levels` best levels */
typedef struct {
    int32_t levels;
    double *mid;
    double *microprice;
    double *spread;
    double *imbalance;
    double *depth_imbalance;
    int64_t *bid_size;
    int64_t *ask_size;
} tg_book_features;

/* n_instruments >= 1; initial_levels >= 1 levels preallocated per side; max_levels >= initial. */
int tg_book_create(int32_t n_instruments, int32_t initial_levels, int32_t max_levels, tg_book **out);
void tg_book_destroy(tg_book *book);
int32_t tg_book_instruments(const tg_book *book);

/* Applies msgs[0..n) in order, each to its own instrument. codes[n] (may be NULL) receives a
 * tg_book_code per message; a rejected message leaves the book unchanged. With stop_on_error
 * nonzero, processing stops at the first rejected message (later messages are not applied and
 * their codes are not written). features (may be NULL) receives one row per applied message:
 * the features of that message's instrument after it. *n_rejected and *first_rejected (index,
 * -1 if none; either may be NULL) summarise. Returns TG_OK when every message applied, TG_EDATA
 * when one was rejected, TG_ENOMEM when growth failed, TG_EINVAL for bad arguments. */
int tg_book_apply(tg_book *book, int64_t n, const tg_message *msgs, int32_t stop_on_error,
                  int8_t *codes, const tg_book_features *features,
                  int64_t *n_rejected, int64_t *first_rejected);

/* One message from its fields, for tick-by-tick callers (order id and time are not needed by a
 * level book). *code (may be NULL) receives the tg_book_code. Returns TG_OK, TG_EDATA (rejected,
 * book unchanged) or TG_ENOMEM. */
int tg_book_apply_fields(tg_book *book, int32_t instrument, int32_t type, int64_t size, int64_t price,
                         int32_t direction, int8_t *code);

/* The `levels` best levels of each side (best first), LOBSTER's empty encoding beyond the book.
 * Element k of each output goes to [k * stride]: stride 1 for four separate arrays, stride 4 with
 * pointers row, row+1, row+2, row+3 for a LOBSTER orderbook row. Any output may be NULL. */
int tg_book_snapshot(const tg_book *book, int32_t instrument, int32_t levels,
                     int64_t *ask_price, int64_t *ask_size, int64_t *bid_price, int64_t *bid_size,
                     int64_t stride);

/* Replaces one side (direction 1 bid, -1 ask) with `levels` snapshot levels, best first, element
 * k at [k * stride]. Size 0 marks an empty level; only empty levels may follow one. Prices must
 * get strictly worse, sizes be >= 0. Levels beyond the snapshot are dropped: a level-L snapshot
 * says nothing about them. On TG_EDATA (an inconsistent snapshot) the side is unchanged. */
int tg_book_set_side(tg_book *book, int32_t instrument, int32_t direction, int32_t levels,
                     const int64_t *price, const int64_t *size, int64_t stride);
/* Both sides from one LOBSTER orderbook row of 4 * levels values. All or nothing. */
int tg_book_sync_row(tg_book *book, int32_t instrument, int32_t levels, const int64_t *row);
/* Empties an instrument's book (instrument -1: all) and sets its state to TG_TRADING. */
int tg_book_clear(tg_book *book, int32_t instrument);

/* Features of one instrument's current state: row 0 of each output in `out`. */
int tg_book_features_now(const tg_book *book, int32_t instrument, const tg_book_features *out);
/* Number of levels held per side and the trading state (tg_trading_state); any may be NULL. */
int tg_book_info(const tg_book *book, int32_t instrument, int32_t *bid_levels, int32_t *ask_levels,
                 int32_t *state);

/* ---- LOBSTER replay and parsing (csrc/cpu/lobster.c) ---- */
typedef enum {
    TG_RESYNC_NONE = 0,            /* row reproduced from row i-1 and message i */
    TG_RESYNC_INITIAL = 1,         /* row 0: the initial book is not in the message file */
    TG_RESYNC_WINDOW_REFILL = 2,   /* a level in the window emptied; the level that moved into the
                                      window from outside it is taken from the row */
    TG_RESYNC_OUTSIDE_WINDOW = 3,  /* cancel/delete/execution at a price beyond a full window */
    TG_RESYNC_MISMATCH = 4         /* anything else: a real inconsistency (resynchronised to go on) */
} tg_resync_reason;

typedef struct {
    int64_t messages;       /* rows replayed */
    int64_t exact;          /* transitions reproduced from the message alone (no resync) */
    int64_t resyncs[5];     /* by tg_resync_reason ([0] stays 0) */
    int64_t mismatches;     /* resyncs[TG_RESYNC_MISMATCH] */
    int64_t first_mismatch; /* row index, -1 if none */
} tg_replay_stats;

/* Replays a LOBSTER message file against its level-`levels` orderbook rows (n rows of
 * 4 * levels values) on `instrument` (the messages' own instrument field is ignored): message i
 * is applied to the state of row i-1 and the result compared with row i's window; where a
 * level-L file cannot carry the information (tg_resync_reason) the book is set from row i and the
 * resync counted. row_reason[n] (may be NULL) receives each row's tg_resync_reason. The book ends
 * holding the last row's window. */
int tg_lobster_replay(tg_book *book, int32_t instrument, int64_t n, const tg_message *msgs,
                      int32_t levels, const int64_t *orderbook, int8_t *row_reason,
                      tg_replay_stats *stats);

/* One message of a tick-by-tick replay against the orderbook row that follows it, in one call:
 * applies the message (as tg_book_apply_fields; *code, may be NULL, receives its tg_book_code, and
 * a rejected message leaves the book as it was); with levels > 0 compares the book's window with
 * `row` (4 * levels values, LOBSTER's layout; an empty row level must be empty in the book, its
 * price not compared) and, where they differ, sets both sides from the row (tg_book_sync_row;
 * levels beyond the row are dropped); *resynced (may be NULL) receives 1 if so, else 0. Then the
 * features of the state after it into row 0 of `out` (may be NULL). Returns TG_OK (whether or not
 * the message applied), TG_EDATA (the row is not a book: the book is as the message left it),
 * TG_ENOMEM, TG_ERANGE (instrument; a row of more than max_levels levels) or TG_EINVAL. */
int tg_book_step(tg_book *book, int32_t instrument, int32_t type, int64_t size, int64_t price,
                 int32_t direction, int32_t levels, const int64_t *row, const tg_book_features *out,
                 int8_t *code, int32_t *resynced);

typedef enum {
    TG_CSV_OK = 0,
    TG_CSV_FIELDS = 1,     /* wrong number of fields on a line */
    TG_CSV_NUMBER = 2,     /* a field is not a number (of its column's kind) */
    TG_CSV_RANGE = 3,      /* an integer beyond int64, or a number beyond the float64 range */
    TG_CSV_ROWS = 4        /* more rows than max_rows */
} tg_csv_error_kind;

typedef struct {
    int32_t kind;     /* tg_csv_error_kind */
    int64_t line;     /* 1-based, counted from the start of `text` */
    int32_t column;   /* 1-based */
    int32_t fields;   /* fields found on the line (TG_CSV_FIELDS) */
} tg_csv_error;

/* Parses comma-separated numbers: ncols fields per line; column c is a decimal float when
 * is_float[c] else an int64. Float columns go to f_out (row-major over the float columns only),
 * int columns to i_out (row-major over the int columns). Blank lines are skipped; \r\n accepted.
 * Returns TG_OK with *n_rows, or TG_EDATA with *err describing the first bad field. */
int tg_csv_parse(const char *text, int64_t len, int32_t ncols, const uint8_t *is_float,
                 int64_t max_rows, double *f_out, int64_t *i_out, int64_t *n_rows, tg_csv_error *err);

/* ---- Hot path: CUDA driver through function pointers (csrc/hot/) --------------------------- */
/* HOT section (csrc/hot/hot.c). libcuda.so.1 is opened with dlopen on first use, so the core
 * builds and loads on machines without CUDA: tg_hot_init returns TG_ENODRIVER there.
 * Handles (CUfunction, CUstream, CUgraphExec, CUevent, CUdeviceptr) travel as uintptr_t.
 * A call that reaches the driver returns TG_ECUDA when the driver refused, with its CUresult in
 * *cu_result (0 otherwise; cu_result may be NULL). Nothing here allocates after tg_hot_init, so
 * these are safe to call with the GIL released from any thread whose current context owns the
 * handles. The only lock is the copy pool's (below), taken for copies of 512 KB and more.
 * tg_hot_graph_set_kernel / _set_copy update a node of an instantiated graph (a new layout costs
 * two microseconds, not a recapture); copy_params points at a CUDA_MEMCPY3D as cuda.h defines it
 * (the runtime passes the one it read back from the captured node, with its size changed). */
typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} tg_hot_copy;

int tg_hot_init(void);
const char *tg_hot_error_name(int cu_result);
int tg_hot_ctx_set_current(uintptr_t ctx, int *cu_result);
int tg_hot_launch(uintptr_t func, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z,
                  uint32_t block_x, uint32_t block_y, uint32_t block_z, uint32_t shared_bytes,
                  uintptr_t stream, void **params, int *cu_result);
int tg_hot_launch_sync(uintptr_t func, uint32_t grid_x, uint32_t grid_y, uint32_t grid_z,
                       uint32_t block_x, uint32_t block_y, uint32_t block_z, uint32_t shared_bytes,
                       uintptr_t stream, void **params, int *cu_result);
/* A launch described once -- tg_hot_launch's arguments -- and run by tg_hot_launch_desc_run, which
 * waits for the stream too when sync is nonzero: a launch repeated from Python is then one call of
 * three arguments, not eleven (tickgpu.runtime.launch.BoundLaunch). params is read at each run, so
 * arguments rewritten in place between runs take effect. A nonzero ctx is made current on the
 * calling thread first (cuCtxSetCurrent), so the caller need not make it so from Python; where that
 * fails, TG_ECONTEXT (the CUresult in *cu_result) and no launch. TG_EINVAL for a NULL desc and as
 * tg_hot_launch. */
typedef struct {
    uintptr_t func;
    uint32_t grid_x, grid_y, grid_z;
    uint32_t block_x, block_y, block_z;
    uint32_t shared_bytes;
    uintptr_t stream;
    void **params;
    uintptr_t ctx;
} tg_hot_launch_desc;
int tg_hot_launch_desc_run(const tg_hot_launch_desc *desc, int sync, int *cu_result);
int tg_hot_graph_launch(uintptr_t graph_exec, uintptr_t stream, int *cu_result);
int tg_hot_graph_replay(uintptr_t graph_exec, uintptr_t stream, int *cu_result);
int tg_hot_stream_sync(uintptr_t stream, int *cu_result);
int tg_hot_event_record(uintptr_t event, uintptr_t stream, int *cu_result);
int tg_hot_event_sync(uintptr_t event, int *cu_result);
int tg_hot_copy_htod_async(uintptr_t dst_device, const void *src_host, size_t bytes,
                           uintptr_t stream, int *cu_result);
int tg_hot_copy_dtoh_async(void *dst_host, uintptr_t src_device, size_t bytes,
                           uintptr_t stream, int *cu_result);
int tg_hot_graph_set_kernel(uintptr_t graph_exec, uintptr_t node, uintptr_t func, uint32_t grid_x,
                            uint32_t grid_y, uint32_t grid_z, uint32_t block_x, uint32_t block_y,
                            uint32_t block_z, uint32_t shared_bytes, void **params, int *cu_result);
int tg_hot_graph_set_copy(uintptr_t graph_exec, uintptr_t node, const void *copy_params, uintptr_t ctx,
                          int *cu_result);
/* tg_hot_stage: plain host copies (no driver needed); a list with a NULL pointer under a nonzero
 * size is TG_EINVAL and copies nothing. Lists of 512 KB or more are split across copy threads (a
 * pool started on first need, at most 8 by default or $TICKGPU_COPY_THREADS, never more than the
 * cores), because one core copies ~10 GB/s where PCIe moves 55. A caller that finds the pool busy
 * copies alone. tg_hot_set_copy_threads sets how many threads (caller included) may copy: n > 0
 * that many, 0 the default, n < 0 leaves it; returns the previous count.
 * tg_hot_roundtrip: one tick -- inputs into staging, graph replayed, wait, results out. It is
 * tg_hot_roundtrip_begin (inputs into staging, graph launched) then tg_hot_roundtrip_end (wait,
 * results out): a caller with host work that does not read the results (handing out their
 * arrays) does it between the two, while the GPU runs. After a begin that returned TG_OK the
 * caller must call end (on the same stream) before it touches the staging again. */
int tg_hot_stage(const tg_hot_copy *copies, int n_copies);
int tg_hot_set_copy_threads(int nthreads);
int tg_hot_roundtrip(const tg_hot_copy *in, int n_in, uintptr_t graph_exec, uintptr_t stream,
                     const tg_hot_copy *out, int n_out, int *cu_result);
int tg_hot_roundtrip_begin(const tg_hot_copy *in, int n_in, uintptr_t graph_exec, uintptr_t stream,
                           int *cu_result);
int tg_hot_roundtrip_end(uintptr_t stream, const tg_hot_copy *out, int n_out, int *cu_result);

/* tg_hot_pipeline: a large host call as chunks through a few graph runners, in one call with the
 * GIL released. For chunk k in order: wait for (and copy out the results of) every earlier chunk,
 * in order, up to the last one queued on chunk k's stream -- its runner's staging is then free --;
 * copy chunk k's inputs into staging (together with those results, as one job for the copy
 * threads); launch its graph on its stream. Then the rest is collected in order. So with chunks
 * alternating between two runners the host stages chunk k+1 and copies out chunk k-1 while the
 * GPU runs chunk k. Chunks that share a stream must share its staging and nothing else; every
 * graph must already hold its chunk's layout. On a driver error every launched stream is waited
 * for (no copy stays in flight into staging) and the first error is returned. */
typedef struct {
    const tg_hot_copy *copies_in;
    int n_in;
    const tg_hot_copy *copies_out;
    int n_out;
    uintptr_t graph_exec;
    uintptr_t stream;
} tg_hot_chunk;

int tg_hot_pipeline(const tg_hot_chunk *chunks, int n_chunks, int *cu_result);

/* ---- Mailbox: resident (persistent) kernels polled through mapped memory (csrc/hot/mailbox.c) */
/* MAILBOX section (csrc/hot/mailbox.c; layout and rules in csrc/hot/mailbox_protocol.h).
 * A resident greeks kernel polls a mailbox in mapped pinned host memory that the caller
 * allocated (cuMemHostAlloc PORTABLE | DEVICEMAP, 128-byte aligned, tg_mailbox_bytes long) and
 * launched the kernel on; a call stages the inputs there, bumps a sequence number and spins on the
 * answer: no driver call, no allocation, no lock. One caller at a time per mailbox.
 * Element size 8 (float64) or 4 (float32); capacity 1 .. 2^24 options per call.
 * tg_mailbox_init writes the header (idle_timeout_ns 0: the kernel never returns by itself;
 * spin_ns: it polls flat out this long after an answer, then backs off with sleeps of up to
 * sleep_max_ns); tg_mailbox_rearm clears the kernel's exit state before a (re)launch;
 * tg_mailbox_quit asks the kernel to return; tg_mailbox_state reads the control words (any
 * pointer may be NULL).
 * tg_mailbox_call: inputs with strides 0 (one value) or 1 (n values), else TG_EINVAL; n outside
 * [1, capacity] is TG_ERANGE (nothing staged); outputs as tg_greeks_outputs (NULL skips one).
 * tg_mailbox_call_block: the same, the outputs as one (10, n) row-major block at `out` (elements
 * of the mailbox's size: price, delta, ... charm, each a row of n).
 * Returns TG_OK; TG_MB_TIMEOUT when no answer came within timeout_ns (the request stays pending:
 * the kernel is hung or slow, and the mailbox must not be used again); TG_MB_EXITED when the
 * kernel had returned by itself (idle): nothing pending, rearm + relaunch and call again;
 * TG_MB_REFUSED when the kernel answered with an error (*kernel_status says which:
 * 1 bad request, 2 config not for this kernel). */
typedef enum {
    TG_MB_TIMEOUT = 64,
    TG_MB_EXITED = 65,
    TG_MB_REFUSED = 66
} tg_mailbox_status;

int64_t tg_mailbox_bytes(int64_t capacity, int32_t elem_size);
int tg_mailbox_init(void *box, int64_t bytes, int32_t elem_size, int64_t capacity,
                    int64_t idle_timeout_ns, int64_t spin_ns, int32_t sleep_max_ns);
int tg_mailbox_rearm(void *box);
int tg_mailbox_quit(void *box);
int tg_mailbox_state(const void *box, uint64_t *seq, uint64_t *done, uint32_t *exited, uint64_t *served);
int tg_mailbox_call(void *box, int64_t n, const tg_bsm_inputs *in, const tg_greeks_outputs *out,
                    int64_t timeout_ns, uint32_t *kernel_status);
int tg_mailbox_call_block(void *box, int64_t n, const tg_bsm_inputs *in, void *out, int64_t timeout_ns,
                          uint32_t *kernel_status);

/* ---- Host memory: huge-page mappings for the pinned pool (csrc/mem/hostmem.c) ------------- */
/* tg_host_map: an anonymous private read-write mapping of at least `bytes` for the pinned pool,
 * pre-faulted (every 4 KB page written once) so that registration and first use take no faults.
 * want_huge: 0 plain pages; 1 transparent huge pages (a 2 MB-aligned range, madvise(MADV_HUGEPAGE)),
 * else plain pages; 2 explicit huge pages (MAP_HUGETLB) first, then as 1. *out receives the
 * address (4 KB-aligned; 2 MB-aligned for huge pages), *mapped_bytes the length mapped (rounded up
 * to 2 MB for huge pages, 4 KB otherwise: pass it to tg_host_unmap), *backing a tg_host_backing.
 * TG_HOST_THP means the madvise was accepted; whether the kernel then used huge pages depends on
 * /sys/kernel/mm/transparent_hugepage/enabled ("never" disables it).
 * Returns TG_EINVAL for bytes 0 or above 2**47, want_huge outside 0..2, or a NULL output pointer;
 * TG_ENOMEM when the OS refused every attempt (errno says why). Nothing is mapped on failure.
 * tg_host_unmap: unmaps what tg_host_map returned (p, *mapped_bytes); TG_EINVAL for NULL, 0 bytes or
 * an address not 4 KB-aligned. */
typedef enum {
    TG_HOST_PAGES = 0,
    TG_HOST_THP = 1,
    TG_HOST_HUGETLB = 2
} tg_host_backing;

int tg_host_map(uint64_t bytes, int want_huge, void **out, uint64_t *mapped_bytes, int *backing);
int tg_host_unmap(void *p, uint64_t bytes);


/* ---- Device pool: two-level device memory pool (csrc/mem/devpool.c) ----------------------- */
/* A pool of device memory for many short-lived buffers. Level 1: size classes (4 per power of
 * two, 512 B minimum, every class a multiple of 512 B so pointers are 512-byte aligned) served
 * from slabs carved out of a few large blocks (64 KB pages, free ranges coalesced). Level 2:
 * requests above small_max, or when level 1 is full, from the driver's stream-ordered pool.
 * Level 3 (driver backend, where the driver and device support virtual memory management):
 * requests of at least vmm_min_bytes, rounded up to the physical granule (2 MB), each in its own
 * virtual range with granules from the pool's free list mapped into it; a freed range stays mapped
 * in a cache by size (reused with no driver call), and cached ranges of other sizes are unmapped
 * to serve a request the cache and the free list cannot, so large blocks never fragment. Where
 * VMM is unsupported, those requests take levels 1 and 2 and the stats say why (vmm_reason).
 * Frees are lazy: a freed buffer is pending, not reusable, until a flush (tg_devpool_flush, the
 * pending bytes passing lazy_bytes, or an allocation that cannot otherwise be served). A free
 * records an event on its stream (one event per distinct stream per batch, re-recorded, from a
 * free list the pool owns), never keeping the stream: the flush waits on the events, so a stream
 * destroyed after the free is harmless. A free on TG_DEVPOOL_ANY_STREAM (memory that may be in use
 * on any stream), on a 17th distinct stream of one batch, or on a stream the driver refuses to
 * record on, makes the flush wait for the whole context (cuCtxSynchronize), unless context waits
 * are held (tg_devpool_hold_context_waits): those blocks then stay pending for a later flush.
 * Level-2 buffers are freed at the flush, after their wait. Where a wait fails, the flush returns
 * TG_ECUDA and keeps every pending free pending: its memory may still be in use.
 * Reserved bytes (blocks + level 2 + level-3 granules) never pass the
 * cap. Every call takes the pool's mutex, so any thread may call, with the GIL released.
 * backend: TG_DEVPOOL_DRIVER reaches libcuda through dlopen (TG_ENODRIVER without it);
 * TG_DEVPOOL_HOST runs the same logic on aligned host memory (tests, sanitizers).
 * Status: TG_EINVAL bad argument or a pointer this pool does not hold (foreign, or freed and
 * already reclaimed); TG_EDATA a pointer already freed and still pending (double free);
 * TG_ERANGE the request would take reserved bytes past the cap; TG_ENOMEM the memory itself ran
 * out (device or host); TG_ECUDA a driver call failed (CUresult in *cu_result, may be NULL). */
enum {
    TG_DEVPOOL_DRIVER = 0,
    TG_DEVPOOL_HOST = 1
};
/* The stream argument of tg_devpool_free meaning "may be in use on any stream" ((uintptr_t)-1:
 * never a CUstream). */
enum { TG_DEVPOOL_ANY_STREAM = -1 };

typedef struct tg_devpool tg_devpool;

typedef struct {
    int backend;                /* TG_DEVPOOL_DRIVER or TG_DEVPOOL_HOST */
    int device;                 /* CUdevice ordinal the driver pool lives on */
    uintptr_t ctx;              /* CUcontext made current before driver calls; 0 leaves it */
    int64_t slab_block_bytes;   /* bytes per level-1 block (a multiple of 64 KB, > 0) */
    int64_t slab_blocks;        /* at most this many blocks (0: level 1 off) */
    int64_t small_max;          /* requests up to this many bytes try level 1 */
    int64_t release_threshold;  /* driver pool's release threshold; < 0: the cap */
    int64_t lazy_bytes;         /* pending bytes that trigger a flush (0: flush on every free) */
    double fraction;            /* cap = fraction x device total memory (driver backend) */
    int64_t cap_bytes;          /* > 0: the cap in bytes, overriding fraction (host backend: required) */
    int preallocate;            /* nonzero: all slab_blocks allocated at create */
    int64_t vmm_min_bytes;      /* requests of at least this many bytes take level 3 (0: 2 MB; < 0: off) */
} tg_devpool_config;

typedef struct {
    int64_t in_use;             /* bytes of live buffers (rounded sizes) */
    int64_t reserved;           /* level-1 blocks + level-2 reserved (driver pool attribute) + level-3 granules */
    int64_t peak_in_use;
    int64_t peak_reserved;
    int64_t largest_free;       /* largest contiguous free range in level-1 blocks */
    double fragmentation;       /* 1 - largest_free / free bytes in level-1 blocks; 0 when none */
    int64_t pending_bytes;      /* freed, not yet reclaimed (rounded sizes) */
    int64_t served_slab;        /* allocations served by level 1 */
    int64_t served_driver;      /* allocations served by level 2 */
    int64_t failed;             /* allocations refused */
    int64_t driver_allocs;      /* allocating driver calls: block cuMemAlloc + cuMemAllocFromPoolAsync */
    int64_t flushes;
    int64_t live;               /* live buffers */
    int64_t cap;                /* the cap in bytes */
    int64_t blocks;             /* level-1 blocks held */
    int64_t served_vmm;         /* allocations served by level 3 (cache hits included) */
    int64_t vmm_cache_hits;     /* of those, served by a cached mapped range with no driver call */
    int64_t vmm_granule;        /* bytes per physical granule (0: level 3 off) */
    int64_t vmm_granules;       /* granules held: mapped (live, pending or cached ranges) or free */
    int64_t vmm_granules_free;  /* of those, unmapped on the free list */
    int64_t vmm_granules_created; /* cuMemCreate calls since the pool was made */
    int64_t vmm_ranges_cached;  /* freed ranges kept mapped for reuse */
    int64_t vmm_driver_calls;   /* level-3 driver calls: create, release, reserve, free, map, unmap, access */
    int vmm_enabled;            /* 1: level 3 serves requests of at least vmm_min_bytes */
    char vmm_reason[128];       /* why level 3 is off ("" when on) */
    int64_t events_created;     /* cuEventCreate calls (the free list reuses them: at most 16) */
    int64_t pending_any;        /* pending buffers whose flush waits for the whole context */
} tg_devpool_stats;

int tg_devpool_create(const tg_devpool_config *config, tg_devpool **pool, int *cu_result);
/* Returns everything (live buffers too) and frees the pool; *outstanding / *outstanding_bytes
 * (may be NULL) receive the live buffers that were never freed. */
int tg_devpool_destroy(tg_devpool *pool, int64_t *outstanding, int64_t *outstanding_bytes, int *cu_result);
/* nbytes >= 0 (0 gets the smallest class); *level receives 1, 2 or 3 (may be NULL). */
int tg_devpool_alloc(tg_devpool *pool, int64_t nbytes, uintptr_t stream, uintptr_t *ptr, int *level,
                     int *cu_result);
/* stream: the last stream that used the buffer (an event recorded on it now is what the flush
 * waits for), or TG_DEVPOOL_ANY_STREAM. */
int tg_devpool_free(tg_devpool *pool, uintptr_t ptr, uintptr_t stream, int *cu_result);
int tg_devpool_flush(tg_devpool *pool, int *cu_result);
int tg_devpool_get_stats(tg_devpool *pool, tg_devpool_stats *stats);
/* The bytes an nbytes request is accounted as (its class, a 512-byte multiple at level 2, or a
 * multiple of the granule at level 3). */
int64_t tg_devpool_rounded(const tg_devpool *pool, int64_t nbytes);
/* Size (rounded), level and state (1 live, 2 pending) of a pointer; TG_EINVAL if not held. */
int tg_devpool_lookup(tg_devpool *pool, uintptr_t ptr, int64_t *nbytes, int *level, int *state);
/* hold != 0: one more hold; 0: one fewer. While any is held no flush calls cuCtxSynchronize (a
 * resident kernel never finishes, so that wait would stall): buffers freed on
 * TG_DEVPOOL_ANY_STREAM stay pending. Returns the holds now (-1: pool NULL). */
int64_t tg_devpool_hold_context_waits(tg_devpool *pool, int hold);
/* The driver's CUmemoryPool handle of level 2 (0 on the host backend). */
uintptr_t tg_devpool_driver_pool(tg_devpool *pool);
/* The process-wide pool tg_torch_alloc / tg_torch_free use (NULL: none); returns the previous one. */
tg_devpool *tg_devpool_set_default(tg_devpool *pool);
tg_devpool *tg_devpool_get_default(void);
/* PyTorch's CUDAPluggableAllocator signatures (intptr_t has ssize_t's ABI on LP64 platforms):
 * NULL (PyTorch raises its out-of-memory error) when the default pool refuses or is not set, or
 * the device is not the pool's; a free the pool does not recognise is ignored. */
void *tg_torch_alloc(intptr_t size, int device, void *stream);
void tg_torch_free(void *ptr, intptr_t size, int device, void *stream);


/* ---- quantized models: an input batch staged for the GPU ---------------------------------------
 * Copies a (rows x cols) matrix of float32 (src_f64 = 0) or float64 (src_f64 = 1) values, row
 * stride src_stride elements, into dense float32 dst (float64 rounded to nearest, as a cast does),
 * and with check != 0 looks at the float32 values: *bad receives the row-major index of the first
 * that is not finite, else of the first whose magnitude exceeds limit, else -1; *bad_kind 1 (not
 * finite), 2 (beyond limit) or 0. The copy is whole either way (one pass: convert, check, store).
 * TG_EINVAL for a NULL pointer, a negative size or src_stride < cols. */
int tg_stage_rows_f32(const void *src, int src_f64, int64_t rows, int64_t cols, int64_t src_stride,
                      float *dst, int check, float limit, int64_t *bad, int *bad_kind);

/* The shipped signal model's twelve features, one LOBSTER event at a time (tickgpu.app.signal
 * defines them; its whole-day NumPy form is what the model was trained on, and a test holds the
 * two equal): spread (cents), level-1 imbalance, log size ratio, log-mid returns over 1/5/20/100
 * events (bps), EMAs of signed trade flow (0.9, 0.99), of submissions and of deletions (0.95), and
 * log1p of the milliseconds since the previous event. Each is then standardized by the EMA mean
 * and variance of the events before it (alpha 0.999, the rule of tickgpu.quant.EmaStandardizer)
 * and clipped to +-8. Zero the state before the first event. */
#define TG_SIGNAL_FEATURES 12
#define TG_SIGNAL_HISTORY 101
typedef struct tg_signal_feed {
    double raw[12];             /* the last event's features before standardization */
    double mean[12];            /* EMA statistics of the events so far (NaN: no finite value yet) */
    double var[12];
    double flow[2];
    double submissions;
    double deletions;
    double prev_time;
    double history[101];        /* log mids: event j at [j % TG_SIGNAL_HISTORY] (100 events back) */
    int64_t events;
} tg_signal_feed;

/* The feed's next event: its message (time in seconds, LOBSTER type, size, direction) and the
 * level-1 book after it (prices in LOBSTER's 1e-4 units, sizes in shares). Writes the 12
 * standardized, clipped features to x (float32; NaN where a feature is not finite) and the
 * event's log mid to *log_mid. A side of size <= 0 (LOBSTER's empty level, whatever its price)
 * leaves the event without a mid or spread: NaN, as is a mid that is not positive. Returns 1 when
 * every feature is finite (x is the model's input), 0 when not, TG_EINVAL for a NULL pointer. */
int tg_signal_update(tg_signal_feed *feed, double time, int32_t type, double size, double direction,
                     double ask, double ask_size, double bid, double bid_size, float *x, double *log_mid);

/* TICKGPU_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* TICKGPU_H */
