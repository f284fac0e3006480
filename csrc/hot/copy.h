/* Staging copies shared by csrc/hot (not part of the ABI): lists of tg_hot_copy run as one job,
 * split across the copy threads when large (copy.c). */
#ifndef TICKGPU_HOT_COPY_H
#define TICKGPU_HOT_COPY_H

#include <stddef.h>

#include "tickgpu.h"

#define COPY_MAX_LISTS 8

typedef struct {
    const tg_hot_copy *list[COPY_MAX_LISTS];
    int n[COPY_MAX_LISTS];
    int lists;
    size_t total;
} copy_job;

/* TG_EINVAL for n < 0, a NULL list with n > 0, or a NULL pointer under a nonzero size. */
int copy_list_check(const tg_hot_copy *copies, int n);
/* Appends a list (already checked); a full job is run first and emptied. */
void copy_job_add(copy_job *job, const tg_hot_copy *copies, int n);
/* Copies every byte of the job's lists, on the copy threads when large. */
void copy_job_run(const copy_job *job);

#endif
