/*
 * mailbox_protocol.h -- the memory layout and the rules of a resident-kernel mailbox, shared by
 * the persistent kernel (csrc/cuda/mailbox.cu), the host client (csrc/hot/mailbox.c) and the
 * CPU stand-in server of the tests (tests/cpu/mailbox_server.c). C and CUDA C; no ABI of its own
 * (the client's functions are declared in tickgpu.h).
 *
 * One allocation of mapped pinned host memory (cuMemHostAlloc PORTABLE | DEVICEMAP), seen by the
 * host at its host address and by the kernel at its device address:
 *
 *   [0, 128)     tg_mb_request   written by the host only, polled by the kernel
 *   [128, 256)   tg_mb_response  written by the kernel only, polled by the host
 *   [256, 384)   tg_mb_config    written by the host before a launch, read by the kernel at start
 *   [384, ...)   inputs: TG_MB_REALS arrays of `capacity` REALs (spot, strike, t, rate, vol,
 *                div), then `capacity` bytes of call flags (nonzero = call)
 *   [out, ...)   outputs (out = tg_mb_output_offset): the ten greeks of a request of n options
 *                as one (10, n) row-major block: output k at element k * n
 *
 * Why each of the three control blocks fills a 128-byte line of its own: each is written by one
 * side and polled by the other. Were the host's request word on the same line as the kernel's
 * response word, every response the GPU writes over PCIe would invalidate the line the host is
 * about to write its next request into, and every poll the kernel makes would fetch a line the
 * host keeps dirtying while it stages inputs (false sharing across the link). 128, not x86's 64:
 * the GPU's cache line is 128 bytes, and the host's adjacent-line prefetcher pairs 64-byte lines.
 * Fields that the same side writes share a line on purpose: the kernel's poll reads the request
 * sequence and the quit flag in one 16-byte load (one PCIe round trip, not two).
 *
 * The rules (every step names its ordering; see the NOTE comments at each fence in the code):
 *  1. Host, once per launch: config (magic, version, element size, capacity, timings), response
 *     zeroed except `done` (kept: the last request answered), then the launch.
 *  2. Host, per request: inputs and call flags into their areas (an input that is one value for
 *     all options: element 0 of its area, and its bit in `mask` clear), `n` and `mask`, then
 *     `seq` = previous + 1 with RELEASE ordering (everything before is visible before it).
 *  3. Kernel: polls (seq, quit). seq != the last it answered: ACQUIRE, compute the n options
 *     over all its blocks, make the outputs visible system-wide, then (once, by the last block
 *     to finish) `status` and then `done` = seq with RELEASE ordering.
 *  4. Host: spins on `done` == seq with ACQUIRE loads (and a timeout: a kernel that exited or hung
 *     never hangs the caller), then copies the outputs out.
 *  5. quit != 0: the kernel returns. Idle for `idle_timeout_ns` (globaltimer): block 0 tells the
 *     other blocks to stop, sets `exited` = TG_MB_EXIT_IDLE with RELEASE ordering, and returns
 *     without answering anything more; a host that sees `exited` while waiting knows that no
 *     answer will come, withdraws its request (seq back to `done`) and relaunches.
 */
#ifndef TICKGPU_MAILBOX_PROTOCOL_H
#define TICKGPU_MAILBOX_PROTOCOL_H

#include <stdint.h>

#ifdef __CUDACC__
#define TG_MB_HD __host__ __device__ static inline
#define TG_MB_STATIC_ASSERT(c, m) static_assert(c, m)
#else
#define TG_MB_HD static inline
#define TG_MB_STATIC_ASSERT(c, m) _Static_assert(c, m)
#endif

#define TG_MB_LINE 128
#define TG_MB_MAGIC 0x62614d74u            /* "tMab" little-endian: a mailbox, not random memory */
#define TG_MB_VERSION 1u
#define TG_MB_REALS 6                      /* spot, strike, t, rate, vol, div */
#define TG_MB_INPUTS 7                     /* ... and the call flags */
#define TG_MB_OUTPUTS 10                   /* price, delta, gamma, vega, theta, rho, phi, vanna, volga, charm */
#define TG_MB_MAX_CAPACITY (1 << 24)       /* keeps every offset and n * 10 in 32 bits */

/* response.status */
#define TG_MB_STATUS_OK 0u
#define TG_MB_STATUS_BAD_REQUEST 1u        /* n outside [1, capacity]: nothing computed */
#define TG_MB_STATUS_BAD_CONFIG 2u         /* magic, version or element size not this kernel's */

/* response.exited */
#define TG_MB_RUNNING 0u
#define TG_MB_EXIT_IDLE 1u                 /* returned by itself after idle_timeout_ns without a request */
#define TG_MB_EXIT_CONFIG 2u               /* returned at start: the config was not for this kernel */

typedef struct {
    uint64_t seq;       /* the latest request; bumped last, with release ordering */
    uint32_t quit;      /* nonzero: return (read together with seq in one 16-byte load) */
    uint32_t n;         /* options in this request, 1..capacity */
    uint32_t mask;      /* bit k (k < TG_MB_INPUTS): input k is an array of n; clear: one value */
    uint8_t pad[TG_MB_LINE - 20];
} tg_mb_request;

typedef struct {
    uint64_t done;      /* the latest request answered; written last, with release ordering */
    uint32_t status;    /* TG_MB_STATUS_* of that answer */
    uint32_t exited;    /* TG_MB_RUNNING, or why the kernel returned by itself (TG_MB_EXIT_*) */
    uint64_t served;    /* requests answered since the launch */
    uint8_t pad[TG_MB_LINE - 24];
} tg_mb_response;

typedef struct {
    uint32_t magic;             /* TG_MB_MAGIC */
    uint32_t version;           /* TG_MB_VERSION */
    uint32_t elem_size;         /* sizeof(REAL): 8 for float64, 4 for float32 */
    uint32_t capacity;          /* options per request at most */
    uint64_t idle_timeout_ns;   /* return after this long without a request (0: never) */
    uint64_t spin_ns;           /* poll flat out this long after a request, then back off */
    uint32_t sleep_max_ns;      /* the backoff's longest __nanosleep */
    uint8_t pad[TG_MB_LINE - 36];
} tg_mb_config;

typedef struct {
    tg_mb_request request;
    tg_mb_response response;
    tg_mb_config config;
} tg_mb_header;

TG_MB_STATIC_ASSERT(sizeof(tg_mb_request) == TG_MB_LINE, "request fills one line");
TG_MB_STATIC_ASSERT(sizeof(tg_mb_response) == TG_MB_LINE, "response fills one line");
TG_MB_STATIC_ASSERT(sizeof(tg_mb_config) == TG_MB_LINE, "config fills one line");
TG_MB_STATIC_ASSERT(sizeof(tg_mb_header) == 3 * TG_MB_LINE, "header is three lines");

TG_MB_HD uint64_t tg_mb_round_line(uint64_t bytes)
{
    return (bytes + TG_MB_LINE - 1) / TG_MB_LINE * TG_MB_LINE;
}

/* Byte offset of input k (0..5: REAL arrays, 6: call flags) from the mailbox's start. */
TG_MB_HD uint64_t tg_mb_input_offset(int k, uint64_t capacity, uint64_t elem_size)
{
    return sizeof(tg_mb_header) + (uint64_t)k * capacity * elem_size;
}

/* Byte offset of the output block (ten rows of n REALs) from the mailbox's start. */
TG_MB_HD uint64_t tg_mb_output_offset(uint64_t capacity, uint64_t elem_size)
{
    return tg_mb_round_line(tg_mb_input_offset(TG_MB_REALS, capacity, elem_size) + capacity);
}

/* Bytes of mapped memory a mailbox of `capacity` options of `elem_size` bytes needs. */
TG_MB_HD uint64_t tg_mb_bytes(uint64_t capacity, uint64_t elem_size)
{
    return tg_mb_output_offset(capacity, elem_size) + tg_mb_round_line(TG_MB_OUTPUTS * capacity * elem_size);
}

#endif /* TICKGPU_MAILBOX_PROTOCOL_H */
