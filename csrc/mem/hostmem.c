/*
 * hostmem.c -- anonymous host mappings for the pinned pool, on huge pages where the OS allows.
 *
 * The pool registers these regions with cuMemHostRegister. Huge pages matter twice there: the
 * driver pins and maps 2 MB pages instead of 512 times as many 4 KB ones (registration and the
 * device's page tables shrink), and host copies into staging take fewer TLB misses.
 *
 * Order of attempts (want_huge != 0): explicit huge pages (MAP_HUGETLB; needs a reserved pool,
 * /proc/sys/vm/nr_hugepages, often 0), then transparent huge pages (madvise(MADV_HUGEPAGE) on a
 * 2 MB-aligned range; the kernel backs it with huge pages when it can), then plain pages.
 *
 * Every region is pre-faulted (one write per 4 KB page) so that neither registration nor the
 * first copy takes page faults, and so that with THP the faults happen after the madvise, when
 * they can still be served with huge pages (MAP_POPULATE would fault them in as small pages
 * first).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tickgpu.h"

#define HUGE_2MB ((uint64_t)2 << 20)
#define SMALL_PAGE ((uint64_t)4096)
/* mmap takes a size_t; refusing more than 2**47 keeps the rounding below from overflowing and
 * is beyond any host's memory anyway. */
#define MAX_MAP_BYTES ((uint64_t)1 << 47)

static uint64_t round_up(uint64_t x, uint64_t to) { return (x + to - 1) / to * to; }

static void prefault(void *p, uint64_t bytes)
{
    /* volatile: the stores must happen even though nothing reads them back. */
    volatile uint8_t *b = (volatile uint8_t *)p;
    for (uint64_t off = 0; off < bytes; off += SMALL_PAGE)
        b[off] = 0;
}

static int status_of_errno(int e)
{
    /* An invalid length or flag is our bug or the caller's; anything else (ENOMEM, EAGAIN from
     * RLIMIT_MEMLOCK, EPERM) is the OS declining to give memory. errno itself stays set for the
     * caller (CFFI's ffi.errno) to report. */
    return e == EINVAL ? TG_EINVAL : TG_ENOMEM;
}

/* Transparent huge pages: over-map by 2 MB, trim to a 2 MB-aligned start, madvise. The kernel
 * only uses a huge page for a 2 MB-aligned 2 MB stretch, so an unaligned start would waste the
 * first and last partial huge pages of every arena. */
static int map_thp(uint64_t len, void **out)
{
    uint64_t over = len + HUGE_2MB;
    uint8_t *raw = mmap(NULL, (size_t)over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED)
        return status_of_errno(errno);
    uintptr_t start = (uintptr_t)raw;
    uintptr_t aligned = (uintptr_t)round_up(start, HUGE_2MB);
    uint64_t head = aligned - start, tail = over - head - len;
    if (head)
        munmap(raw, (size_t)head);
    if (tail)
        munmap((void *)(aligned + len), (size_t)tail);
    if (madvise((void *)aligned, (size_t)len, MADV_HUGEPAGE) != 0) {
        /* The kernel lacks THP (EINVAL): the mapping is fine, just not huge. Keep it, say pages. */
        *out = (void *)aligned;
        return -1;
    }
    *out = (void *)aligned;
    return TG_OK;
}

int tg_host_map(uint64_t bytes, int want_huge, void **out, uint64_t *mapped_bytes, int *backing)
{
    if (out == NULL || mapped_bytes == NULL || backing == NULL || bytes == 0 || bytes > MAX_MAP_BYTES
        || want_huge < 0 || want_huge > 2)
        return TG_EINVAL;
    *out = NULL;
    *mapped_bytes = 0;
    *backing = TG_HOST_PAGES;

    if (want_huge == 2) {
        uint64_t len = round_up(bytes, HUGE_2MB);
        void *p = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB | MAP_POPULATE, -1, 0);
        if (p != MAP_FAILED) {
            /* MAP_POPULATE: hugetlb pages are reserved at mmap, so faulting them is only work;
             * do it now rather than on the first copy. */
            *out = p;
            *mapped_bytes = len;
            *backing = TG_HOST_HUGETLB;
            return TG_OK;
        }
        /* ENOMEM here means no (or too few) reserved huge pages: the usual case. Fall through. */
    }
    if (want_huge >= 1) {
        uint64_t len = round_up(bytes, HUGE_2MB);
        void *p = NULL;
        int st = map_thp(len, &p);
        if (st == TG_OK || st == -1) {
            prefault(p, len);
            *out = p;
            *mapped_bytes = len;
            *backing = st == TG_OK ? TG_HOST_THP : TG_HOST_PAGES;
            return TG_OK;
        }
        /* A 2 MB over-map failed: a smaller plain mapping may still fit. */
    }
    uint64_t len = round_up(bytes, SMALL_PAGE);
    void *p = mmap(NULL, (size_t)len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return status_of_errno(errno);
    prefault(p, len);
    *out = p;
    *mapped_bytes = len;
    *backing = TG_HOST_PAGES;
    return TG_OK;
}

int tg_host_unmap(void *p, uint64_t bytes)
{
    if (p == NULL || bytes == 0 || bytes > MAX_MAP_BYTES || ((uintptr_t)p % SMALL_PAGE) != 0)
        return TG_EINVAL;
    if (munmap(p, (size_t)bytes) != 0)
        return status_of_errno(errno);
    return TG_OK;
}
