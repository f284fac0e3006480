"""Make .probe/mlp3_wide_v.cu: csrc/cuda/mlp3_wide.cu with stages that -DSKIP_* macros leave out
(results wrong, timing only): SKIP_GEMM (the MMA loops), SKIP_EXCH (the activation copies between
blocks and their waits), SKIP_W (the weight bulk loads and their waits), SKIP_PRE (the scales' and
LayerNorm parameters' loads)."""
s = open("csrc/cuda/mlp3_wide.cu").read()


def rep(a, b):
    global s
    assert a in s, a
    s = s.replace(a, b, 1)


rep("    if (L.count > 0) {\n        if (rows > 8)", "    if (!SKIPG && L.count > 0) {\n        if (rows > 8)")
rep("                    bulk_to_peer(next + rank * BLK", "                    if (!SKIPX) bulk_to_peer(next + rank * BLK")
rep("                    bulk_to_peer(own,", "                    if (!SKIPX) bulk_to_peer(own,")
rep("            if (in_bytes[i])\n                expect(", "            if (!SKIPX && in_bytes[i])\n                expect(")
for b in ("3", "4", "5"):
    i = {"3": 0, "4": 1, "5": 2}[b]
    rep(f"    if (in_bytes[{i}])\n        wait(bar + {b});", f"    if (!SKIPX && in_bytes[{i}])\n        wait(bar + {b});")
rep("        if (L1.count > 0) {\n            expect(bar + 0", "        if (!SKIPW && L1.count > 0) {\n            expect(bar + 0")
rep("        if (L2.count > 0) {\n            expect(bar + 1", "        if (!SKIPW && L2.count > 0) {\n            expect(bar + 1")
rep("    if (L1.count > 0)\n        wait(bar + 0);", "    if (!SKIPW && L1.count > 0)\n        wait(bar + 0);")
rep("    if (L2.count > 0)\n        wait(bar + 1);", "    if (!SKIPW && L2.count > 0)\n        wait(bar + 1);")
rep("    if (L3.count > 0)\n        wait(bar + 2);", "    if (!SKIPW && L3.count > 0)\n        wait(bar + 2);")
rep("    if (threadIdx.x == 0 && L3.count > 0) {", "    if (!SKIPW && threadIdx.x == 0 && L3.count > 0) {")
rep("                if (ch < Ls[l]->count)\n                    load_async(", "                if (!SKIPP && ch < Ls[l]->count)\n                    load_async(")
rep("    for (int k = threadIdx.x; k < K0; k += WARPS * 32) {\n        load_async(lnp + k", "    for (int k = threadIdx.x; !SKIPP && k < K0; k += WARPS * 32) {\n        load_async(lnp + k")
rep("namespace cg = cooperative_groups;", """namespace cg = cooperative_groups;
#ifndef SKIP_GEMM
#define SKIP_GEMM 0
#endif
#ifndef SKIP_EXCH
#define SKIP_EXCH 0
#endif
#ifndef SKIP_W
#define SKIP_W 0
#endif
#ifndef SKIP_PRE
#define SKIP_PRE 0
#endif
#define SKIPG SKIP_GEMM
#define SKIPX SKIP_EXCH
#define SKIPW SKIP_W
#define SKIPP SKIP_PRE""")
open(".probe/mlp3_wide_v.cu", "w").write(s)
