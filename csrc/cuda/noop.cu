/*
 * noop.cu -- a kernel that does nothing, so that the cost of a launch can be measured like for
 * like: tickgpu's launch path (a prepacked argument buffer, one native call, GIL released) on an
 * empty kernel against the floor program's C `<<<>>>` launch of an empty kernel
 * (`tickgpu bench --suite gpu`, "launch"), and `tickgpu doctor`-style probes of a machine's
 * launch overhead. Grid (1, 1, 1), block (TG_NOOP_BLOCK, 1, 1); the one argument, n, is unused
 * (a kernel with no parameters would be the one kernel whose argument buffer is empty).
 */
#ifdef TG_NOOP_ONLY_F32
extern "C" __global__ void tg_noop_kernel(int n)
{
    (void)n;
}
#endif
