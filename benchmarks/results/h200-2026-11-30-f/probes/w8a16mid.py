"""Probe: Triton W8A16 tiles for 17 <= M <= 64 (BLOCK_M 32 / 64: warp-group MMA) vs cuBLAS fp16."""
import json, os, sys
import torch, triton
sys.path.insert(0, "src")
import importlib.util as _u
_spec = _u.spec_from_file_location('tg_quant_kernels', 'src/tickgpu/kernels/quant.py'); _m = _u.module_from_spec(_spec); _spec.loader.exec_module(_m)

def graph_us(fn, reps=20):
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        for _ in range(3):
            fn(0)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=s):
        for i in range(reps):
            fn(i)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    out = []
    for _ in range(9):
        e0.record(); g.replay(); e1.record(); e1.synchronize()
        out.append(e0.elapsed_time(e1) * 1e3 / reps)
    out = sorted(out[1:])
    return out[len(out) // 2]

tiles = [(16, 32, 256, 4, 4), (16, 64, 256, 4, 5), (32, 64, 128, 4, 4), (32, 64, 256, 4, 3), (32, 128, 128, 4, 4),
         (64, 64, 128, 4, 4), (64, 64, 256, 4, 3), (64, 128, 64, 4, 4), (64, 128, 128, 4, 3), (64, 128, 128, 8, 3),
         (64, 256, 64, 8, 3), (64, 256, 128, 8, 3), (64, 32, 256, 4, 4), (32, 32, 256, 4, 4), (64, 128, 64, 8, 5)]
res = []
gen = torch.Generator(device="cuda").manual_seed(7)
for M, N, K in [(17, 4096, 4096), (32, 4096, 4096), (64, 4096, 4096), (64, 1024, 1024), (48, 4096, 4096), (64, 14336, 4096)]:
    ncopy = 4 if N * K >= 4096 * 4096 else 1
    bs = [torch.randint(-127, 128, (N, K), dtype=torch.int8, device="cuda", generator=gen) for _ in range(ncopy)]
    w16 = [torch.randn((N, K), dtype=torch.float16, device="cuda", generator=gen) for _ in range(ncopy)]
    a = torch.randn((M, K), dtype=torch.float16, device="cuda", generator=gen)
    scale = torch.rand(N, device="cuda", generator=gen) * 1e-2
    bias = torch.randn(N, device="cuda", generator=gen)
    c = torch.empty((M, N), dtype=torch.float16, device="cuda")
    ref = (a.double() @ bs[0].double().T) * scale.double() + bias.double()
    base = dict(M=M, N=N, K=K, fp16_hot=graph_us(lambda i: torch.matmul(a, w16[0].T)),
                fp16_rot=graph_us(lambda i: torch.matmul(a, w16[i % ncopy].T)))
    print(json.dumps(base), flush=True)
    for bm, bn, bk, w, st in tiles:
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        def run(i, b=None):
            _m.w8a16_gemm_kernel[grid](a, bs[i % ncopy] if b is None else b, scale, bias, c, M, N, K, K, K, N, GELU=0,
                                       BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, FAST_CVT=1, num_warps=w, num_stages=st)
        row = dict(base, tile=[bm, bn, bk, w, st])
        try:
            run(0, bs[0]); torch.cuda.synchronize()
            row["hot"] = graph_us(lambda i: run(0, bs[0])); row["rot"] = graph_us(run)
            run(0, bs[0]); torch.cuda.synchronize()
            row["err"] = float(((c.double() - ref).abs() / ref.abs().clamp_min(1e-1)).max())
            row["x_hot"], row["x_rot"] = base["fp16_hot"] / row["hot"], base["fp16_rot"] / row["rot"]
        except Exception as e:
            row["error"] = str(e)[:200]
        print(json.dumps(row), flush=True)
        res.append(row)
with open(os.path.join(os.environ.get("OUT", "."), "w8a16mid-probe.json"), "w") as f:
    json.dump(res, f, indent=0)
