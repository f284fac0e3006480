/* The C entry's round trip as it was before fdd2fde, for an A/B in one process: the whole round
 * trip (inputs in, graph, wait) in the first half, nothing but the copies out in the second, so
 * the results are handed out after the wait instead of while the GPU runs. */
#include <stddef.h>
#include <stdint.h>
typedef struct { void *dst; const void *src; size_t bytes; } hot_copy;
typedef int (*rt_fn)(const hot_copy *, int, uintptr_t, uintptr_t, const hot_copy *, int, int *);
typedef int (*stage_fn)(const hot_copy *, int);
static rt_fn rt;
static stage_fn stage;
void serial_init(void *r, void *s) { rt = (rt_fn)r; stage = (stage_fn)s; }
int serial_begin(const hot_copy *in, int n_in, uintptr_t g, uintptr_t s, int *cu)
{
    return rt(in, n_in, g, s, NULL, 0, cu);
}
int serial_end(uintptr_t s, const hot_copy *out, int n_out, int *cu)
{
    (void)s;
    *cu = 0;
    return stage(out, n_out);
}
