// Probe: the fixed cost of launching a kernel in clusters with large dynamic shared memory.
#include <cooperative_groups.h>
namespace cg = cooperative_groups;
#ifndef CL
#define CL 0
#endif
#ifndef SYNCS
#define SYNCS 0
#endif
extern "C" __global__ void
#if CL
__cluster_dims__(CL, 1, 1)
#endif
__launch_bounds__(THREADS, 1) probe_kernel(float *y, int flag)
{
    extern __shared__ float smem[];
#if CL
    for (int i = 0; i < SYNCS; ++i)
        cg::this_cluster().sync();
#endif
    if (flag && threadIdx.x == 0)
        y[blockIdx.x] = smem[0];
}
