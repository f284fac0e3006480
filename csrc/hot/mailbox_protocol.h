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
 * sequence and the control word (n, mask, quit) in one 16-byte load: one PCIe round trip, not two.
 *
 * The rules (every step names its ordering; see the NOTE comments at each fence in the code):
 *  1. Host, once per launch: config (magic, version, element size, capacity, timings), response
 *     zeroed except `done` (kept: the last request answered), then the launch.
 *  2. Host, per request: inputs and call flags into their areas (an input that is one value for
 *     all options: element 0 of its area, and its bit in the mask clear), then `ctl` = n, the
 *     mask and the low 16 bits of the new seq (tg_mb_ctl), then `seq` = previous + 1 with
 *     RELEASE ordering (everything before is visible before it).
 *  3. Kernel: polls (seq, ctl) in one load. seq != the last it answered and ctl's tag == seq's
 *     low bits (the two 8-byte halves of one load need not be one snapshot: a stale ctl is
 *     polled again, never used): ACQUIRE, compute the n options over all its blocks, write
 *     `status` and `served`, make all of it visible system-wide, then (once, by the last block to
 *     finish) `done` = seq with RELEASE ordering. Nothing the kernel needs per request is read
 *     across the link after the poll but the inputs, and one fence precedes `done`.
 *  4. Host: spins on `done` == seq with ACQUIRE loads (and a timeout: a kernel that exited or hung
 *     never hangs the caller), then copies the outputs out.
 *  5. ctl's TG_MB_QUIT bit set: the kernel returns. Idle for `idle_timeout_ns` (globaltimer): block 0 tells the
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
#define TG_MB_VERSION 2u
#define TG_MB_REALS 6                      /* spot, strike, t, rate, vol, div */
#define TG_MB_INPUTS 7                     /* ... and the call flags */
#define TG_MB_OUTPUTS 10                   /* price, delta, gamma, vega, theta, rho, phi, vanna, volga, charm */
#define TG_MB_MAX_CAPACITY (1 << 24)       /* keeps every offset and n * 10 in 32 bits, n in ctl's 25 */

/* response.status */
#define TG_MB_STATUS_OK 0u
#define TG_MB_STATUS_BAD_REQUEST 1u        /* n outside [1, capacity]: nothing computed */
#define TG_MB_STATUS_BAD_CONFIG 2u         /* magic, version or element size not this kernel's */

/* response.exited */
#define TG_MB_RUNNING 0u
#define TG_MB_EXIT_IDLE 1u                 /* returned by itself after idle_timeout_ns without a request */
#define TG_MB_EXIT_CONFIG 2u               /* returned at start: the config was not for this kernel */

/* request.ctl: n (bits 0-24), the input mask (bits 25-31: bit k set, input k is an array of n;
   clear, one value), the low 16 bits of the seq it goes with (bits 32-47), quit (bit 63). */
#define TG_MB_CTL_N_BITS 25
#define TG_MB_CTL_QUIT ((uint64_t)1 << 63)

typedef struct {
    uint64_t seq;       /* the latest request; bumped last, with release ordering */
    uint64_t ctl;       /* n, mask, seq tag, quit (above); read together with seq in one 16-byte load */
    uint8_t pad[TG_MB_LINE - 16];
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

TG_MB_HD uint64_t tg_mb_ctl(uint64_t n, uint32_t mask, uint64_t seq)
{
    return n | (uint64_t)(mask & 0x7fu) << TG_MB_CTL_N_BITS | (seq & 0xffffu) << 32;
}
TG_MB_HD uint32_t tg_mb_ctl_n(uint64_t ctl)
{
    return (uint32_t)(ctl & (((uint64_t)1 << TG_MB_CTL_N_BITS) - 1));
}
TG_MB_HD uint32_t tg_mb_ctl_mask(uint64_t ctl)
{
    return (uint32_t)(ctl >> TG_MB_CTL_N_BITS) & 0x7fu;
}
/* ctl was written for this seq (not a previous request's left in the other half of a load). */
TG_MB_HD int tg_mb_ctl_matches(uint64_t ctl, uint64_t seq)
{
    return ((ctl >> 32) & 0xffffu) == (seq & 0xffffu);
}
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
