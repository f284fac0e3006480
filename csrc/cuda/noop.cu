/*
 * noop.cu -- kernels that do (next to) nothing, so that tickgpu's launch and zero-copy paths can be
 * measured like for like against the floor program (../shared/tools/floor/native_floor.cu):
 *
 * - tg_noop_kernel (family "noop"): an empty kernel. tickgpu's launch path (a prepacked argument
 *   buffer, one native call, GIL released) on it against the floor's C `<<<>>>` launch + sync of an
 *   empty kernel (`tickgpu bench --suite gpu`, "launch"). Grid (1, 1, 1), block (TG_NOOP_BLOCK, 1,
 *   1); the one argument, n, is unused (a kernel with no parameters would be the one kernel whose
 *   argument buffer is empty).
 * - tg_scale_kernel (family "scale"): y[i] = x[i] * 1.0001f + 1.0f for i < n, the floor's scale_k.
 *   On mapped pinned host memory it is the zero-copy tick of `tickgpu bench --suite memory`
 *   ("mapped"), 1,024 floats in and out against the floor's "zero-copy mapped kernel 1024 floats".
 *   Grid ceil(n / TG_SCALE_BLOCK), block (TG_SCALE_BLOCK, 1, 1). Built with nvcc's defaults, as the
 *   floor's kernel is (the multiply-add contracts to one FMA).
 */
#ifdef TG_NOOP_ONLY_F32
extern "C" __global__ void tg_noop_kernel(int n)
{
    (void)n;
}
#endif

#ifdef TG_SCALE_ONLY_F32
extern "C" __global__ void tg_scale_kernel(const float *__restrict__ x, float *__restrict__ y, int n)
{
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n)
        y[i] = x[i] * 1.0001f + 1.0f;
}
#endif
