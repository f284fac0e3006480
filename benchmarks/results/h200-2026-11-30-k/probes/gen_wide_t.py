"""Make .probe/mlp3_wide_t.cu: csrc/cuda/mlp3_wide.cu with %globaltimer stamps per block and phase
(in a module global tg_mlp3w_times[block][24])."""
s = open("csrc/cuda/mlp3_wide.cu").read()
s = s.replace("namespace cg = cooperative_groups;", """namespace cg = cooperative_groups;
__device__ unsigned long long tg_mlp3w_times[64][32];
__device__ __forceinline__ unsigned long long gtime() { unsigned long long t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
#define STAMP(i) do { if (threadIdx.x == 0) { tg_mlp3w_times[blockIdx.x][i] = gtime(); tg_mlp3w_times[blockIdx.x][(i) + 16] = clock64(); } } while (0)
""", 1)
marks = [  # (text, stamp after it)
    ("    cg::cluster_group cluster = cg::this_cluster();\n", 0),
    ("    cluster.sync();   // every block runs, its barriers are armed: copies to it may start; scales in\n", 1),
    ("    __syncthreads();   // this block's own rows\n", 2),
    ("    if (L1.count > 0)\n        wait(bar + 0);\n", 3),
    ("    layer<false>(L1, act0, red, rows, buf[1], bar + 4, nullptr, 0, rank, warp, lane);\n", 4),
    ("    if (in_bytes[1])\n        wait(bar + 4);\n", 5),
    ("    layer<false>(L2, buf[1], red, rows, buf[0], bar + 5, nullptr, 0, rank, warp, lane);\n", 6),
    ("    if (in_bytes[2])\n        wait(bar + 5);\n", 7),
    ("                lane);\n    asm volatile(\"barrier.cluster.wait.acquire.aligned;\" ::: \"memory\");\n", 9),
]
for text, i in marks:
    assert text in s, text
    s = s.replace(text, text + f"    STAMP({i});\n", 1)
s = s.replace("                lane);\n    asm volatile(\"barrier.cluster.wait", "                lane);\n    STAMP(8);\n    asm volatile(\"barrier.cluster.wait", 1)
s = s.replace("""    __syncthreads();
    if (L.count > 0)
        epilogue<LAST>""", """    if (threadIdx.x == 0) tg_mlp3w_times[blockIdx.x][LAST ? 12 : (L.s_in ? 11 : 10)] = gtime();
    __syncthreads();
    if (L.count > 0)
        epilogue<LAST>""", 1)
import os
if os.environ.get("LEAN"):
    s = s.replace("__device__ __forceinline__ void layer(const Layer &L,", "__device__ __noinline__ void layer(const Layer L,", 1)
# the bulk copies' issue, timed (thread 0 issues them)
s = s.replace("""        if (threadIdx.x == 0 && L.count > 0)
            for (int q = 0; q < C; ++q)""", """        if (threadIdx.x == 0) tg_mlp3w_times[blockIdx.x][L.s_in ? 14 : 13] = gtime();
        if (threadIdx.x == 0 && L.count > 0)
            for (int q = 0; q < C; ++q)""", 1)
if os.environ.get("TWOPASS"):
    def rep(a, b, n=1):
        global s
        assert s.count(a) >= n, a
        s = s.replace(a, b, n)
    rep("#define STAMP(i) do { if (threadIdx.x == 0) { tg_mlp3w_times[blockIdx.x][i] = gtime(); tg_mlp3w_times[blockIdx.x][(i) + 16] = clock64(); } } while (0)",
        "#define STAMP(i) do { if (threadIdx.x == 0) tg_mlp3w_times[blockIdx.x][(i) + stamp_off] = gtime(); } while (0)")
    rep("    cg::cluster_group cluster = cg::this_cluster();\n", "    int stamp_off = 0;\n    cg::cluster_group cluster = cg::this_cluster();\n")
    rep("""    if (threadIdx.x == 0) {
#pragma unroll
        for (int i = 0; i < 6; ++i)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar + i)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        if (L1.count > 0) {""", """    for (int pass = 0; pass < 2; ++pass) {
    if (pass) { __syncthreads(); stamp_off = 15; STAMP(0); }
    if (threadIdx.x == 0) {
        if (pass == 0) {
#pragma unroll
        for (int i = 0; i < 6; ++i)
            asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_u32(bar + i)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        if (pass == 0 && L1.count > 0) {""")
    rep("        if (L2.count > 0) {\n            expect(bar + 1", "        if (pass == 0 && L2.count > 0) {\n            expect(bar + 1")
    rep("    if (L1.count > 0)\n        wait(bar + 0);", "    if (pass == 0 && L1.count > 0)\n        wait(bar + 0);")
    rep("    if (L2.count > 0)\n        wait(bar + 1);", "    if (pass == 0 && L2.count > 0)\n        wait(bar + 1);")
    rep("    if (L3.count > 0)\n        wait(bar + 2);", "    if (pass == 0 && L3.count > 0)\n        wait(bar + 2);")
    rep("    if (threadIdx.x == 0 && L3.count > 0) {", "    if (pass == 0 && threadIdx.x == 0 && L3.count > 0) {")
    for i in (3, 4, 5):
        rep(f"wait(bar + {i});", f"wait(bar + {i}, pass);")
    rep("__device__ __forceinline__ void wait(uint64_t *bar)\n{", "__device__ __forceinline__ void wait(uint64_t *bar, int parity = 0)\n{")
    rep("mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;", "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;")
    rep(""": "r"(smem_u32(bar))
                     : "memory");
}""", """: "r"(smem_u32(bar)), "r"(parity)
                     : "memory");
}""")
    rep("    STAMP(9);\n}", "    STAMP(9);\n    }\n}")
open(".probe/mlp3_wide_t.cu", "w").write(s)
