/*
 * copy.c -- the host copies into and out of pinned staging, split across a pool of copy threads.
 *
 * One core copies only ~10 GB/s on a server (a core has too few cache misses in flight), a fifth of
 * what PCIe moves, so the staging copies of anything past a few hundred kilobytes are split across a
 * small pool of copy threads. The pool starts on the first large copy, its threads sleep on a
 * condition variable between jobs (they never spin), and one job runs at a time: a caller that
 * finds the pool busy copies alone. Below COPY_MIN_PARALLEL bytes waking threads costs more than it
 * saves, so small ticks never touch the pool.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "tickgpu.h"
#include "copy.h"

#define COPY_MIN_PARALLEL ((size_t)512 << 10)
#define COPY_MIN_PER_PART ((size_t)256 << 10)
#define COPY_MAX_PARTS 32
#define COPY_DEFAULT_PARTS 8     /* memory bandwidth is shared: past ~8 copiers a socket is saturated */
#define COPY_ALIGN ((size_t)4096)

static struct {
    pthread_mutex_t busy;       /* held by the caller whose job the pool runs */
    pthread_mutex_t mu;         /* guards everything below */
    pthread_cond_t wake, done;
    unsigned long generation;   /* bumped per job */
    int workers;                /* threads started */
    int parts;                  /* participants of the current job, caller included */
    int remaining;              /* worker parts of the current job not yet finished */
    copy_job job;
    int wanted;                 /* participants asked for (0: COPY_DEFAULT_PARTS, capped by cores) */
    unsigned long spawned_at[COPY_MAX_PARTS];
} pool = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER,
          PTHREAD_COND_INITIALIZER, 0, 0, 0, 0, {{0}, {0}, 0, 0}, 0, {0}};

static pthread_once_t pool_once = PTHREAD_ONCE_INIT;

static void pool_after_fork(void)
{
    /* The child has none of the parent's threads: start over (lazily) with fresh locks. */
    pthread_mutex_init(&pool.busy, NULL);
    pthread_mutex_init(&pool.mu, NULL);
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.done, NULL);
    pool.workers = 0;
    pool.parts = 0;
    pool.remaining = 0;
}

static void pool_setup(void)
{
    pthread_atfork(NULL, NULL, pool_after_fork);
    const char *env = getenv("TICKGPU_COPY_THREADS");
    if (env != NULL && __atomic_load_n(&pool.wanted, __ATOMIC_RELAXED) == 0) {
        int v = atoi(env);
        __atomic_store_n(&pool.wanted, v > 0 ? v : 0, __ATOMIC_RELAXED);
    }
}

static int pool_parts_allowed(void)
{
    /* Set by any thread (tg_hot_set_copy_threads) while copies run: read it once, atomically. */
    int wanted = __atomic_load_n(&pool.wanted, __ATOMIC_RELAXED);
    int want = wanted > 0 ? wanted : COPY_DEFAULT_PARTS;
    int cores = tg_num_cores();
    if (wanted == 0 && want > cores)
        want = cores;
    if (want > COPY_MAX_PARTS)
        want = COPY_MAX_PARTS;
    return want < 1 ? 1 : want;
}

int tg_hot_set_copy_threads(int nthreads)
{
    pthread_once(&pool_once, pool_setup);
    int before = pool_parts_allowed();
    if (nthreads >= 0)
        __atomic_store_n(&pool.wanted, nthreads > COPY_MAX_PARTS ? COPY_MAX_PARTS : nthreads, __ATOMIC_RELAXED);
    return before;
}

/* Bytes [lo, hi) of the job's lists taken end to end. */
static void copy_range(const copy_job *job, size_t lo, size_t hi)
{
    size_t base = 0;
    for (int l = 0; l < job->lists; l++) {
        for (int i = 0; i < job->n[l]; i++) {
            const tg_hot_copy *c = &job->list[l][i];
            size_t b = c->bytes;
            if (b == 0)
                continue;
            size_t end = base + b;
            if (end > lo && base < hi) {
                size_t from = lo > base ? lo - base : 0;
                size_t to = hi < end ? hi - base : b;
                memcpy((char *)c->dst + from, (const char *)c->src + from, to - from);
            }
            base = end;
            if (base >= hi)
                return;
        }
    }
}

/* Part p of `parts`: page-aligned cuts, so no two threads write the same cache line. */
static void copy_part(const copy_job *job, int p, int parts)
{
    size_t lo = p == 0 ? 0 : (job->total / parts * p) & ~(COPY_ALIGN - 1);
    size_t hi = p == parts - 1 ? job->total : (job->total / parts * (p + 1)) & ~(COPY_ALIGN - 1);
    if (hi > lo)
        copy_range(job, lo, hi);
}

static void *copy_worker(void *arg)
{
    int me = (int)(intptr_t)arg;
    pthread_mutex_lock(&pool.mu);
    /* The generation when this thread was made: the job published right after is its first. */
    unsigned long seen = pool.spawned_at[me];
    for (;;) {
        while (pool.generation == seen)
            pthread_cond_wait(&pool.wake, &pool.mu);
        seen = pool.generation;
        if (me >= pool.parts)
            continue;
        copy_job job = pool.job;
        int parts = pool.parts;
        pthread_mutex_unlock(&pool.mu);
        copy_part(&job, me, parts);
        pthread_mutex_lock(&pool.mu);
        if (--pool.remaining == 0)
            pthread_cond_signal(&pool.done);
    }
    return NULL;
}

/* Starts workers up to `parts - 1` (pool.mu held); returns the participants available. */
static int pool_grow(int parts)
{
    while (pool.workers < parts - 1) {
        pthread_t tid;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        pthread_attr_setstacksize(&attr, 64 << 10);
        pool.spawned_at[pool.workers + 1] = pool.generation;
        int rc = pthread_create(&tid, &attr, copy_worker, (void *)(intptr_t)(pool.workers + 1));
        pthread_attr_destroy(&attr);
        if (rc != 0)
            break;
        pool.workers++;
    }
    return pool.workers + 1 < parts ? pool.workers + 1 : parts;
}

void copy_job_run(const copy_job *job)
{
    if (job->total == 0)
        return;
    int parts = 1;
    if (job->total >= COPY_MIN_PARALLEL) {
        pthread_once(&pool_once, pool_setup);
        size_t by_size = job->total / COPY_MIN_PER_PART;
        int allowed = pool_parts_allowed();
        parts = by_size < (size_t)allowed ? (int)by_size : allowed;
    }
    if (parts <= 1 || pthread_mutex_trylock(&pool.busy) != 0) {
        copy_range(job, 0, job->total);
        return;
    }
    pthread_mutex_lock(&pool.mu);
    parts = pool_grow(parts);
    if (parts <= 1) {
        pthread_mutex_unlock(&pool.mu);
        pthread_mutex_unlock(&pool.busy);
        copy_range(job, 0, job->total);
        return;
    }
    pool.job = *job;
    pool.parts = parts;
    pool.remaining = parts - 1;
    pool.generation++;
    pthread_cond_broadcast(&pool.wake);
    pthread_mutex_unlock(&pool.mu);
    copy_part(job, 0, parts);
    pthread_mutex_lock(&pool.mu);
    while (pool.remaining > 0)
        pthread_cond_wait(&pool.done, &pool.mu);
    pthread_mutex_unlock(&pool.mu);
    pthread_mutex_unlock(&pool.busy);
}

int copy_list_check(const tg_hot_copy *copies, int n)
{
    if (n < 0 || (n > 0 && copies == NULL))
        return TG_EINVAL;
    for (int i = 0; i < n; i++)
        if (copies[i].bytes > 0 && (copies[i].dst == NULL || copies[i].src == NULL))
            return TG_EINVAL;
    return TG_OK;
}

void copy_job_add(copy_job *job, const tg_hot_copy *copies, int n)
{
    if (n <= 0)
        return;
    if (job->lists == COPY_MAX_LISTS) {   /* full: run what is there, start again */
        copy_job_run(job);
        job->lists = 0;
        job->total = 0;
    }
    job->list[job->lists] = copies;
    job->n[job->lists] = n;
    job->lists++;
    for (int i = 0; i < n; i++)
        job->total += copies[i].bytes;
}

/* Plain host copies; needs no driver. Checked before any byte moves so a bad list copies nothing. */
int tg_hot_stage(const tg_hot_copy *copies, int n_copies)
{
    int st = copy_list_check(copies, n_copies);
    if (st != TG_OK)
        return st;
    copy_job job = {{0}, {0}, 0, 0};
    copy_job_add(&job, copies, n_copies);
    copy_job_run(&job);
    return TG_OK;
}

